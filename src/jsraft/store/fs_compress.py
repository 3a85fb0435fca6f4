"""Compression of a sealed FileStore block: each message record rewritten as `MSG_ZSTD` (layer L2).

Owns: `compress_block` (write the compressed copy to a temporary file, fsync it, rename it over the block,
fsync the directory) and re-pointing the store's maps at the rewritten records.

Invariants:
  1. The block is read past the cache until a scan shows no damage (or every read shows the same): a read
     error is never written back as the file's content.
  2. Damaged bytes are copied verbatim: compression never hides or "fixes" damage, and a live record
     inside damage becomes a fault.
  3. The rename happens only after the new file is durable, so a crash leaves the old block or the new.

Imports: L1 (`codec`), L2 (`store` siblings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.codec.records import FILE_HEADER_BYTES, RecordView, scan_records
from jsraft.store import fs_ops
from jsraft.store.base import FaultKind
from jsraft.store.blocks import Block, block_name, compress_record

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore


def compress_block(store: "FileStore", block: Block) -> None:
    """Rewrite a sealed block with per-record zstd, keeping damaged bytes exactly as they were."""
    buffer = fs_ops.clean_buffer(store, block)  # a read error must not be written back as damage
    result = scan_records(buffer, FILE_HEADER_BYTES)
    pieces = [bytes(buffer[:FILE_HEADER_BYTES])]
    position = FILE_HEADER_BYTES
    relocated: dict[int, tuple[int, int]] = {}  # old offset -> (new offset, new length)
    events = sorted([(v.offset, v) for v in result.records] + [(lo, (lo, hi)) for lo, hi in result.damaged],
                    key=lambda e: e[0])
    for old_offset, event in events:
        if not isinstance(event, RecordView):  # a damaged region: copied exactly as it is
            chunk = bytes(buffer[event[0] : event[1]])
        else:
            chunk = compress_record(bytes(buffer[event.offset : event.offset + event.length]))
            relocated[old_offset] = (position, len(chunk))
        pieces.append(chunk)
        position += len(chunk)
    if result.torn_tail is not None:
        pieces.append(bytes(buffer[result.torn_tail :]))
    data = b"".join(pieces)
    temp = block_name(block.number) + ".tmp"
    handle = store.disk.open(temp, create=True)
    handle.truncate(0)
    handle.pwrite(0, data)
    handle.sync()
    handle.close()
    store.files.forget(block.number)
    store.disk.rename(temp, block_name(block.number))
    store.disk.sync_dir("")
    _relocate(store, block, relocated)
    block.size = len(data)


def _relocate(store: "FileStore", block: Block, relocated: dict[int, tuple[int, int]]) -> None:
    """Point the maps at the rewritten records. A live record inside damage found now (the file's own:
    every read showed it) was copied verbatim: it is a fault from now on (invariant 2)."""
    offsets, lengths = block.offsets, block.lengths
    damaged: list[tuple[int, tuple[Block, int, int, int]]] = []
    for index, offset in enumerate(offsets):
        if offset and offset not in relocated:
            damaged.append((block.first_seq + index, (block, offset, lengths[index], block.crcs[index])))
        elif offset:
            offsets[index], lengths[index] = relocated[offset]
    for seq, (number, offset, length, crc) in list(store.moved.items()):
        if number == block.number and offset not in relocated:
            damaged.append((seq, (block, offset, length, crc)))
        elif number == block.number:
            new_offset, new_length = relocated[offset]
            store.moved[seq] = (number, new_offset, new_length, crc)
    for seq, where in damaged:
        store.detach(seq, where, readable=False)
        store.fault_map.add(seq, seq, FaultKind.corrupt)
