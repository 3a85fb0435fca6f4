"""The FileStore fast-recovery index: a CRC'd summary of every block, checked against the blocks.

Owns: writing the index (atomically) and deciding whether a found index may be trusted. It is trusted
only when every block it lists exists with the same size and the same last 64 bytes (the newest block
may have grown: recovery then scans just what was written after the index — a crash after a block write
and before the next index write) and its totals are the sums of its parts (`_inconsistency`). Anything
else, including an index that fails its CRC, is ignored, the blocks are scanned in full, and the log says
why.

Invariants:
  1. The index is written only when everything it describes is durable (at `close` after `sync`, and at a
     roll once the bytes sealed since the last one reach its own size and a sixteenth of a block per block
     it lists, `fs_append._index_due`; a deferred roll builds it at the roll and its job writes it last,
     after the blocks' fsyncs and the new block's rename), so it is never newer than the blocks it lists;
     one that is (a lost block write) fails the size or tail check.
  2. Every block region an index vouches for is listed in `FileStore.unverified` until the background
     verifier (`fs_verify`) has read it: trust at open, every record read and CRC-checked soon after.
  3. It carries every accounting group's totals and what each still owes (`fs_unreadable`): a store opened
     from it settles a record detached before the index exactly as the store that wrote it would have.
  4. Only the index's write at `close` may fail without failing the close, and only for want of
     descriptors or space (EMFILE, ENFILE, ENOSPC, EDQUOT), after the blocks were synced: an index left
     older (or a `.tmp` half written) is what a crash before the close leaves, which recovery handles
     (the tails check, or a full scan). A node at its descriptor limit used to stop when it closed a
     stream (a delete) because the close could not open the index's temporary file.
"""

from __future__ import annotations

import errno
import json
import logging
import struct
from array import array
from typing import TYPE_CHECKING

from crc32c import crc32c

from jsraft.codec.records import FILE_HEADER, FILE_HEADER_BYTES, FILE_MAGIC, HEADER_BYTES, Kind, encode_record, scan_records
from jsraft.errors import BadFileFormat, CorruptRecord
from jsraft.store.blocks import FORMAT_VERSION, INDEX_FILE_TYPE, Block, check_file_header
from jsraft.store.faultmap import FaultMap

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore
    from jsraft.store.recovery import _Rebuild

INDEX_NAME = "index"
# 2: blocks' `bytes` are their live records' (they were the bytes appended), the repair records' totals
# and the owed sequences (`fs_unreadable`) are kept. A version-1 index is not used: the blocks are scanned.
_INDEX_VERSION = 2
_TAIL_BYTES = 64
SLOT_BYTES = 12  # the index's bytes per sequence of the store: offset, length and CRC
_U32 = struct.Struct("<I")
_U64 = (1 << 64) - 1
log = logging.getLogger("jsraft.store.index")
_SKIPPABLE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT})  # invariant 4


def _tail_crc(buffer_tail: bytes) -> int:
    return crc32c(buffer_tail)


def _psim_for_index(psim: dict[str, list[int]]) -> dict[str, list[int]]:
    """The per-subject entries as the index keeps them: an unknown first's bound (`fs_accounting` invariant
    3: negative) written as 0, the unknown it was before bounds existed, so any reader of the index reads it."""
    return {s: e if e[1] >= 0 else [e[0], 0, e[2]] for s, e in psim.items()}


def write_index(store: "FileStore") -> None:
    """Write the fast-recovery summary (atomically). Recovery re-checks it against the block tails."""
    store.disk.write_atomic(INDEX_NAME, index_bytes(store))


def write_index_at_close(store: "FileStore") -> None:
    """The index at `close` (invariant 4): skipped, with a warning, when the process is out of descriptors
    or the disk out of space — it only speeds the next open, which then scans the blocks."""
    try:
        write_index(store)
    except OSError as error:
        if error.errno not in _SKIPPABLE:
            raise
        log.warning("store %s: its index was not written at close (%s): the next open scans its blocks",
                    store.config.name, error)


def index_bytes(store: "FileStore") -> bytes:
    """The index file describing the store as it is now (a deferred roll writes it later, invariant 1)."""
    blocks_meta = []
    arrays: list[bytes] = []
    for block in store.blocks:
        handle = store.files.handle(block.number)
        tail = handle.pread(max(block.size - _TAIL_BYTES, 0), min(_TAIL_BYTES, block.size))
        blocks_meta.append({
            "number": block.number, "first_seq": block.first_seq, "last_seq": block.last_seq,
            "size": block.size, "tail_crc": _tail_crc(tail), "msgs": block.msgs, "bytes": block.bytes,
            "subjects": block.subjects, "sealed": block.sealed, "count": len(block.offsets),
        })
        arrays += [block.offsets.tobytes(), block.lengths.tobytes(), block.crcs.tobytes()]
    meta = {
        "version": _INDEX_VERSION, "head": store.head, "touched": store.touched, "lowest_block": store.lowest_block,
        "last_seq": store.last_seq, "msgs": store.msgs, "bytes": store.bytes, "digest": store.digest,
        "ranges": {str(k): v for k, v in store.ranges.items()},
        "range_counts": {str(k): v for k, v in store.range_counts.items()}, "psim": _psim_for_index(store.psim),
        "moved": {str(k): list(v) for k, v in store.moved.items()}, "faults": store.fault_map.to_json(),
        "moved_bytes": store.moved_bytes, "moved_subjects": store.moved_subjects,
        "unaccounted": {str(k): sorted(v) for k, v in store.unaccounted.items()},
        "blocks": blocks_meta,
    }
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
    body = _U32.pack(len(meta_bytes)) + meta_bytes + b"".join(arrays)
    return FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, INDEX_FILE_TYPE) + encode_record(
        Kind.STORE_INDEX, _INDEX_VERSION, 0, body
    )


def load_index(store: "FileStore", numbers: list[int], rebuild: _Rebuild) -> tuple[int, int] | None:
    """Apply a valid index; return `(block number, offset)` to resume scanning from, or None (then every
    block is scanned, and the log says why when an index was there)."""
    if not numbers:
        return None
    if not store.disk.exists(INDEX_NAME):
        _fall_back(store, "none", "no index")
        return None
    try:
        meta, arrays = _read_index(store.disk.read_file(INDEX_NAME))
        indexed = meta["blocks"]
        if not indexed:
            _fall_back(store, "empty", "it lists no block")
            return None
        why = _index_mismatch(store, indexed, numbers)
        if why is not None:
            _fall_back(store, "stale", why)
            return None
        blocks = _index_blocks(meta, arrays)
        why = _inconsistency(meta, blocks)
        if why is not None:
            _fall_back(store, "inconsistent", why)
            return None
    except (CorruptRecord, BadFileFormat, ValueError, KeyError, TypeError) as error:
        _fall_back(store, "damaged", f"it does not verify ({error})")
        return None
    _apply_index(store, meta, blocks, rebuild)
    store.recovery_report["index"] = "used"
    # Invariant 2: what the index vouches for is verified in the background (`fs_verify`).
    store.unverified = {entry["number"]: entry["size"] for entry in indexed}
    store.recovery_report["trusted_blocks"] = [entry["number"] for entry in indexed]
    newest = indexed[-1]
    return newest["number"], newest["size"]


def _fall_back(store: "FileStore", what: str, why: str) -> None:
    store.recovery_report["index"] = f"{what}: rebuilt by a full scan"
    store.recovery_report["index_reason"] = why
    if what != "none":
        log.warning("store %s: index not used (%s): %s; scanning every block", store.config.name, what, why)


def _read_index(data: bytes) -> tuple[dict, memoryview]:
    check_file_header(data, INDEX_FILE_TYPE)
    result = scan_records(data, FILE_HEADER_BYTES)
    if len(result.records) != 1 or result.damaged or result.torn_tail is not None:
        raise CorruptRecord("index record does not verify")
    view = result.records[0]
    body = memoryview(data)[view.offset + HEADER_BYTES : view.offset + view.length]
    meta_len = _U32.unpack_from(body, 0)[0]
    meta = json.loads(bytes(body[4 : 4 + meta_len]))
    if meta.get("version") != _INDEX_VERSION:
        raise ValueError(f"index version {meta.get('version')}, not {_INDEX_VERSION}")
    return meta, body[4 + meta_len :]


def _index_mismatch(store: "FileStore", indexed: list[dict], numbers: list[int]) -> str | None:
    """Why the blocks on disk are not the ones the index describes (None: they are, perhaps grown)."""
    listed = [entry["number"] for entry in indexed]
    on_disk = [n for n in numbers if n <= listed[-1]]
    if listed != on_disk:
        return f"it lists blocks {listed[0]}..{listed[-1]} ({len(listed)}), the disk holds {len(on_disk)} of them"
    for entry in indexed:
        handle = store.files.handle(entry["number"])
        size = handle.size()
        is_last = entry is indexed[-1]
        if size < entry["size"] or (size != entry["size"] and not is_last):
            return f"block {entry['number']} is {size} bytes, the index says {entry['size']}"
        length = min(_TAIL_BYTES, entry["size"])
        if _tail_crc(handle.pread(entry["size"] - length, length)) != entry["tail_crc"]:
            return f"block {entry['number']}'s last {length} bytes differ from the index's"
    return None


def _index_blocks(meta: dict, arrays: memoryview) -> list[Block]:
    blocks: list[Block] = []
    position = 0
    for entry in meta["blocks"]:
        block = Block(entry["number"], entry["first_seq"])
        count = entry["count"]
        for name in ("offsets", "lengths", "crcs"):
            values = array("I")
            values.frombytes(bytes(arrays[position : position + 4 * count]))
            setattr(block, name, values)
            position += 4 * count
        block.last_seq = entry["last_seq"]
        block.size = entry["size"]
        block.msgs, block.bytes = entry["msgs"], entry["bytes"]
        block.subjects, block.sealed = entry["subjects"], entry["sealed"]
        blocks.append(block)
    if position != len(arrays):
        raise ValueError("the index's arrays are not the size its blocks say")
    return blocks


def _inconsistency(meta: dict, blocks: list[Block]) -> str | None:
    """Why the index contradicts itself (None: it does not). Each total it carries must be the sum of its
    parts: a block's count of live records is its non-zero offsets, the store's count is the blocks' plus
    the moved (repair) records and also the digest ranges' counts, the digest is the ranges' sum."""
    previous_last = 0
    for block in blocks:
        if len(block.offsets) != block.last_seq - block.first_seq + 1 or block.first_seq <= previous_last:
            return f"block {block.number} covers {block.first_seq}..{block.last_seq} with {len(block.offsets)} slots"
        live = len(block.offsets) - block.offsets.count(0)
        if live != block.msgs:
            return f"block {block.number} has {live} live records, the index counts {block.msgs}"
        # A block's natural records are appended in sequence order: its last live one has the largest offset.
        if next((offset for offset in reversed(block.offsets) if offset), 0) >= block.size:
            return f"block {block.number} has a record offset past its {block.size} bytes"
        previous_last = max(previous_last, block.last_seq)
    msgs = meta["msgs"]
    if sum(b.msgs for b in blocks) + len(meta["moved"]) != msgs:
        return f"its blocks hold {sum(b.msgs for b in blocks)} records and {len(meta['moved'])} moved, not {msgs}"
    if sum(meta["range_counts"].values()) != msgs:
        return f"its digest ranges count {sum(meta['range_counts'].values())} messages, not {msgs}"
    if sum(meta["ranges"].values()) & _U64 != meta["digest"]:
        return "its digest is not the sum of its digest ranges"
    if previous_last > meta["last_seq"]:
        return f"a block reaches {previous_last}, past the store's last sequence {meta['last_seq']}"
    if sum(b.bytes for b in blocks) + meta["moved_bytes"] != meta["bytes"]:  # fs_unreadable invariant 1
        return f"its blocks and repair records hold {sum(b.bytes for b in blocks) + meta['moved_bytes']} bytes, " \
               f"not {meta['bytes']}"
    counts = dict(meta["moved_subjects"])
    for block in blocks:
        for subject, count in block.subjects.items():
            counts[subject] = counts.get(subject, 0) + count
    if counts != {subject: entry[0] for subject, entry in meta["psim"].items()}:
        return "its per-subject counts are not the sums of its blocks' and repair records'"
    return None


def _apply_index(store: "FileStore", meta: dict, blocks: list[Block], rebuild: _Rebuild) -> None:
    for block in blocks:
        store.files.add(block)
    store.head, store.lowest_block = meta["head"], meta["lowest_block"]
    store.touched = bool(meta["touched"])
    store.last_seq, store.msgs, store.bytes = meta["last_seq"], meta["msgs"], meta["bytes"]
    store.digest = meta["digest"]
    store.ranges = {int(k): v for k, v in meta["ranges"].items()}
    store.range_counts = {int(k): v for k, v in meta["range_counts"].items()}
    store.psim = {k: list(v) for k, v in meta["psim"].items()}
    store.moved = {int(k): tuple(v) for k, v in meta["moved"].items()}
    store.moved_bytes, store.moved_subjects = meta["moved_bytes"], dict(meta["moved_subjects"])
    store.unaccounted = {int(k): list(v) for k, v in meta["unaccounted"].items()}
    store.fault_map = FaultMap.from_json(meta["faults"])
    rebuild.covered = max((b.last_seq for b in store.blocks), default=0)
    rebuild.max_sync = store.last_seq
