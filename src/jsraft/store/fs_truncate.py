"""FileStore `truncate`: remove everything above a sequence, physically (layer L2).

Owns: the cut of a store back to a sequence (a replica's conflict truncation, a recovery's cut back to
what was durable), moved out of `fs_ops` to keep each module one concept.

Invariants:
  1. `truncate` keeps every TOMBSTONE and repair record for sequences at or below the cut: they are
     re-written after the cut, so no deleted message comes back and no repaired one is lost.
  2. Nothing read as damage stays between the last kept natural record and the cut (`_cut_point`), so the
     next append does not follow damage that hid no sequence — a false `tombstone` fault at the next full
     scan — unless a real `tombstone` fault is listed, whose evidence stays.
  3. The cut block ends at the cut: when no slot of it remains (damage hid its first sequences), it starts
     after the cut (recovery invariant 6), never ending above the store.
  4. Records the cut reads are verified first, read again past the cache when they do not verify
     (`fs_ops.clean_buffer`).
  5. A repair record at or below the cut that the cut takes away is carried when it reads back, else its
     sequence becomes a `corrupt` fault (detached unreadable) before its block goes: no `moved` entry
     ever names a removed block (a read of it raised `KeyError`).

Imports: L0, L1 (`codec`), `store` siblings. Reference: DESIGN §3 (block files), §8 (repair).
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from jsraft.codec.records import FILE_HEADER_BYTES, HEADER_BYTES, Kind, encode_record, scan_records
from jsraft.errors import BadRequest
from jsraft.store import fs_remove, fs_unreadable
from jsraft.store.base import FaultKind
from jsraft.store.blocks import Block, block_name
from jsraft.store.fs_index import INDEX_NAME
from jsraft.store.fs_ops import clean_buffer
from jsraft.store.fs_remove import live_seqs_between

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore

log = logging.getLogger("jsraft.store")

_RANGE = struct.Struct("<QQ")
_NATURAL = (Kind.MSG, Kind.MSG_ZSTD, Kind.ERASED, Kind.SKIP)


def truncate(store: "FileStore", seq: int) -> None:
    """Remove everything above `seq`, physically, keeping deletes and repairs at or below it."""
    first = fs_remove.first_live(store) or store.last_seq + 1
    low = max(0, first - 1)
    if not isinstance(seq, int) or not low <= seq <= store.last_seq:
        raise BadRequest(f"truncate to {seq!r} outside [{low}, {store.last_seq}]")
    if seq == store.last_seq:
        return
    for victim in live_seqs_between(store, seq + 1, store.last_seq):
        fs_remove.remove(store, victim)
    store.fault_map.remove(seq + 1, store.last_seq)
    cut_block = next((b for b in store.blocks if b.last_seq > seq and b.first_seq <= b.last_seq), None)
    keep_records: list[bytes] = []
    if cut_block is not None:
        later = [b for b in store.blocks if b.number > cut_block.number]
        cut_offset, carried = _cut_point(store, cut_block, seq)
        keep_records += carried
        for block in later:
            keep_records += _carry(store, clean_buffer(store, block), FILE_HEADER_BYTES, seq)
        _lose_uncarried(store, keep_records, cut_block, cut_offset, later)
        for block in later:
            fs_unreadable.settle(store, block.number)  # no live record left in it: what it owes leaves with it
            store.files.forget(block.number)
            store.disk.remove(block_name(block.number))
            store.blocks.remove(block)
            del store.files.by_number[block.number]
        store.disk.sync_dir("")
        store.files.handle(cut_block.number).truncate(cut_offset)
        store.files.forget(cut_block.number)
        cut_block.size = cut_offset
        cut_block.sealed = False
        keep_count = max(seq - cut_block.first_seq + 1, 0)
        for name in ("offsets", "lengths", "crcs"):
            del getattr(cut_block, name)[keep_count:]
        if keep_count == 0:  # damage hid its first sequences and none below the cut remains in it: it
            cut_block.first_seq = seq + 1  # holds no slot and starts after them (recovery invariant 6)
        cut_block.last_seq = cut_block.first_seq + keep_count - 1
    store.last_seq = seq
    for moved_seq in [s for s in store.moved if s > seq]:
        del store.moved[moved_seq]
    _rewrite_carried(store, keep_records)
    store._dirty = True
    store.sync()
    if store.disk.exists(INDEX_NAME):
        store.disk.remove(INDEX_NAME)  # it describes blocks that no longer exist as they were


def _cut_point(store: "FileStore", block: Block, seq: int) -> tuple[int, list[bytes]]:
    """Where to cut `block` so nothing above `seq` stays, and what to carry (rewrite after the cut).

    The cut is right after the last natural record at or below `seq` (after the preamble when there is
    none), so damaged bytes between it and the first natural record above `seq` go too: they hid
    sequences above `seq` (recovery counted them as those sequences' `corrupt` gap), and left behind they
    would precede the next append as damage that hid no sequence — a false `tombstone` fault over
    everything before them at the next full scan. The one exception keeps today's evidence: while the
    store lists a `tombstone` fault (damage that hid no sequence, perhaps a lost TOMBSTONE), the cut is at
    the first natural record above `seq`, so the damaged bytes stay to be read again."""
    buffer = clean_buffer(store, block)
    natural_max, natural_end = block.first_seq - 1, FILE_HEADER_BYTES
    keep_damage = any(fault.kind is FaultKind.tombstone for fault in store.fault_map.faults())
    for view in scan_records(buffer, FILE_HEADER_BYTES).records:
        if view.kind == Kind.BLOCK_HEADER and view.offset == FILE_HEADER_BYTES:
            natural_end = view.offset + view.length
            continue
        if view.kind not in _NATURAL or view.ident_a <= natural_max:
            continue
        last = view.ident_a + view.ident_b - 1 if view.kind == Kind.SKIP else view.ident_a
        cut = view.offset if keep_damage else natural_end
        if view.ident_a > seq:
            return cut, _carry(store, buffer, cut, seq)
        if last > seq:  # a SKIP that straddles the cut: keep its lower part
            carried = _carry(store, buffer, cut, seq, before=view.offset)
            carried.append(encode_record(Kind.SKIP, view.ident_a, seq - view.ident_a + 1))
            return cut, carried + _carry(store, buffer, view.offset + view.length, seq)
        natural_max, natural_end = last, view.offset + view.length
    if block.last_seq > seq and natural_max == seq:  # damage hides all above `seq`: cut (left, a lost TOMBSTONE)
        return natural_end, _carry(store, buffer, natural_end, seq)
    return len(buffer), []


def _carry(store: "FileStore", buffer: bytes, start: int, seq: int, *, before: int | None = None) -> list[bytes]:
    """TOMBSTONE, FIRST_SEQ and repair records from `start` on (up to `before`) that still matter at or
    below `seq`."""
    carried: list[bytes] = []
    for view in scan_records(buffer, start).records:
        if before is not None and view.offset >= before:
            break
        record = bytes(buffer[view.offset : view.offset + view.length])
        if view.kind == Kind.TOMBSTONE:
            body = record[HEADER_BYTES:]
            ranges = [_RANGE.unpack_from(body, p) for p in range(0, len(body), _RANGE.size)]
            kept = [(lo, min(hi, seq)) for lo, hi in ranges if lo <= seq]
            if kept:
                data = b"".join(_RANGE.pack(lo, hi) for lo, hi in kept)
                carried.append(encode_record(Kind.TOMBSTONE, kept[0][0], len(kept), data))
        elif view.kind == Kind.FIRST_SEQ:
            carried.append(record)
        elif view.kind in (Kind.MSG, Kind.MSG_ZSTD) and store.moved.get(view.ident_a, (None,))[1:2] == (view.offset,):
            carried.append(record)
    return carried


def _lose_uncarried(store: "FileStore", carried: list[bytes], cut_block: Block, cut_offset: int,
                    later: list[Block]) -> None:
    """Invariant 5: a repair record at or below the cut that the cut takes away (it lies after `cut_offset`
    in the cut block, or in a later block) and that was not carried — it does not read back — leaves its
    sequence as a `corrupt` fault, detached unreadable, before its block goes."""
    kept = {struct.unpack_from("<Q", record, 9)[0] for record in carried if record[8] in (Kind.MSG, Kind.MSG_ZSTD)}
    removed = {block.number for block in later}
    for moved_seq, (number, offset, length, crc) in sorted(store.moved.items()):
        if moved_seq in kept or not (number in removed or (number == cut_block.number and offset >= cut_offset)):
            continue
        store.detach(moved_seq, (store.files.by_number[number], offset, length, crc), readable=False)
        store.fault_map.add(moved_seq, moved_seq, FaultKind.corrupt)
        log.warning("store %s: the repair record of seq %d, cut away by a truncate, does not read back: a "
                    "corrupt fault, repaired from a peer", store.config.name, moved_seq)


def _rewrite_carried(store: "FileStore", records: list[bytes]) -> None:
    block = store.newest()
    for record in records:
        offset = store.write_records(record)
        if record[8] in (Kind.MSG, Kind.MSG_ZSTD):
            seq = struct.unpack_from("<Q", record, 9)[0]
            _, _, length, crc = store.moved[seq]
            store.moved[seq] = (block.number, offset, length, crc)
