"""FileStore operations that walk many records: filtered reads, purge, repair (truncate: `fs_truncate`).

Owns: the multi-record algorithms, kept apart from `filestore` (the per-message write path) so each
module stays one concept. Functions take the store as their first argument and use its maps.

Invariants:
  1. (`fs_truncate`.)
  2. Every record a decision rests on (a subject, a size, a timestamp, a record to carry or cut at) is
     verified first, read again past the cache when it does not verify (`checked_record`,
     `clean_buffer`): a read error is never taken for content. (Compression: `fs_compress`.)
  3. `repair` only fills sequences listed as faults.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jsraft import subjects as subjectlib
from jsraft.codec.records import (
    FILE_HEADER_BYTES,
    HEADER_BYTES,
    encode_message,
    scan_records,
)
from jsraft.errors import BadRequest
from jsraft.store.base import FaultKind, msg_size
from jsraft.store.blocks import Block, content_crc, message_record_verifies, message_subject
from jsraft.store.limits_check import check_message, check_purge_args
from jsraft.store import fs_remove, fs_unreadable
from jsraft.store.fs_remove import live_seqs_between

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore

REREADS_MAX = 2  # reads of what did not verify, past the cache, before it counts as damaged


# --- Subject queries ------------------------------------------------------------------------------


def checked_record(store: "FileStore", seq: int) -> bytes | None:
    """The verified record of live `seq` (FileStore invariant 4), read through its block's cached buffer
    when it is in one. A record no read verifies is a fault from now on and None is returned: nothing is
    ever decided on a record's unverified bytes."""
    where = store.locate(seq)
    block, offset, length, _ = where
    if block.covers(seq) and block.offsets[seq - block.first_seq] == offset:
        record = store.files.buffer(block)[offset : offset + length]  # scans read whole blocks, cached
        if message_record_verifies(record, length, seq):
            return record
    record = store.checked_record(seq, where)
    if record is None:
        store.detach(seq, where, readable=False)
        store.fault_map.add(seq, seq, FaultKind.corrupt)
    return record


def clean_buffer(store: "FileStore", block: Block) -> bytes:
    """`block`'s whole file, read again past the cache while a scan finds damage in it (a read error the
    file does not hold); damage that every read shows is the file's, and is returned as it is."""
    buffer = store.files.buffer(block)
    for _ in range(REREADS_MAX):
        result = scan_records(buffer, FILE_HEADER_BYTES)
        if not result.damaged and result.torn_tail is None:
            break
        store.files.drop_cached(block.number)
        buffer = store.files.buffer(block)
    return buffer


def _subject_at(store: "FileStore", seq: int) -> str | None:
    """Live `seq`'s subject, or None when its record never reads back (a fault now, no longer live)."""
    record = checked_record(store, seq)
    return None if record is None else message_subject(record, record[8])[0]


def _matches(store: "FileStore", match, seq: int) -> bool:
    subject = _subject_at(store, seq)
    return subject is not None and match(subject)


def _live_in_block(store: "FileStore", block: Block, start: int, reverse: bool = False) -> list[int]:
    lo = max(start, block.first_seq) if not reverse else block.first_seq
    hi = block.last_seq if not reverse else min(start, block.last_seq)
    seqs = live_seqs_between_block(block, lo, hi)
    return seqs[::-1] if reverse else seqs


def live_seqs_between_block(block: Block, lo: int, hi: int) -> list[int]:
    if hi < lo:
        return []
    offsets = block.offsets
    base = block.first_seq
    return [base + i for i in range(lo - base, hi - base + 1) if offsets[i]]


def _moved_matching(store: "FileStore", match, lo: int, hi: int) -> list[int]:
    return sorted(s for s in store.moved if lo <= s <= hi and _matches(store, match, s))


def subject_first(store: "FileStore", subject: str) -> int:
    entry = store.psim.get(subject)
    if entry is None:
        return 0
    if entry[1] <= 0:  # unknown: from the head (0) or from a bound below which it has nothing (< 0)
        entry[1] = _find(store, lambda s: s == subject, max(store.head, -entry[1]), subject_hint=subject)
    return entry[1]


def subject_last(store: "FileStore", subject: str) -> int:
    entry = store.psim.get(subject)
    if entry is None:
        return 0
    if not entry[2]:
        entry[2] = _find_last(store, lambda s: s == subject, subject_hint=subject)
    return entry[2]


def _block_may_match(block: Block, match, subject_hint: str | None) -> bool:
    if subject_hint is not None:
        return subject_hint in block.subjects
    return any(match(s) for s in block.subjects)


def _find(store: "FileStore", match, start: int, subject_hint: str | None = None) -> int:
    """The first live sequence at or after `start` whose subject satisfies `match`, or 0."""
    found = 0
    for block in store.blocks:
        if block.last_seq < start or not _block_may_match(block, match, subject_hint):
            continue
        # Lazily, stopping at the first match: a filtered consumer reading in order asks once per
        # message, and listing the rest of the block each time made that quadratic.
        offsets, base = block.offsets, block.first_seq
        found = next((base + i for i in range(max(start, base) - base, block.last_seq - base + 1)
                      if offsets[i] and _matches(store, match, base + i)), 0)
        if found:
            break
    moved = _moved_matching(store, match, start, found - 1 if found else store.last_seq)
    return moved[0] if moved else found


def _find_last(store: "FileStore", match, subject_hint: str | None = None) -> int:
    found = 0
    for block in reversed(store.blocks):
        if not _block_may_match(block, match, subject_hint):
            continue
        for seq in _live_in_block(store, block, store.last_seq, reverse=True):
            if _matches(store, match, seq):
                found = seq
                break
        if found:
            break
    moved = _moved_matching(store, match, found + 1, store.last_seq)
    return moved[-1] if moved else found


def last_matching(store: "FileStore", subject_filter: str) -> int:
    if subject_filter in store.psim:  # a stored subject: literal and valid (a last_per_subject pass asks per message)
        return subject_last(store, subject_filter)
    subjectlib.validate(subject_filter, wildcards=True)
    if subjectlib.is_literal(subject_filter):
        return subject_last(store, subject_filter)
    lasts = [subject_last(store, s) for s in list(store.psim) if subjectlib.matches(subject_filter, s)]
    return max(lasts, default=0)


def _filter_set(filters: str | Sequence[str] | None) -> subjectlib.FilterSet | None:
    if filters is None:
        return None
    items = [filters] if isinstance(filters, str) else list(filters)
    if not items or ">" in items:
        return None
    return subjectlib.FilterSet(items)


def next_matching(store: "FileStore", filters: str | Sequence[str] | None, start_seq: int) -> int:
    start = max(start_seq, store.head, 1)
    filter_set = _filter_set(filters)
    if filter_set is None:
        seqs = live_seqs_between_first(store, start)
        return seqs
    # One literal subject (a KV key's watch, a consumer on one subject): a block is skipped by one lookup in
    # its subject counts, not by matching each of its subjects (thousands in a KV bucket's block).
    items = [filters] if isinstance(filters, str) else list(filters)
    hint = items[0] if len(items) == 1 and subjectlib.is_literal(items[0]) else None
    return _find(store, filter_set.matches, start, hint)


def live_seqs_between_first(store: "FileStore", start: int) -> int:
    """The first live sequence at or after `start`, or 0. Stops at the first: a consumer reading a stream in
    order asks once per message, and listing the rest of the block each time made that quadratic."""
    natural = 0
    for block in store.blocks:
        if block.last_seq < start:
            continue
        offsets, base = block.offsets, block.first_seq
        natural = next((base + i for i in range(max(start, base) - base, block.last_seq - base + 1) if offsets[i]), 0)
        if natural:
            break
    moved = [s for s in store.moved if s >= start and (not natural or s < natural)]
    return min(moved) if moved else natural


def timestamp_of(store: "FileStore", seq: int) -> int:
    """Live `seq`'s timestamp from its record's header alone: for display (`state()`), never a decision."""
    where = store.locate(seq)
    if where is None:
        return 0
    header = store.read_record(where[0], where[1], HEADER_BYTES)
    return struct.unpack_from("<Q", header, 17)[0]


def first_not_expired(store: "FileStore", cutoff_ns: int) -> int:
    """The sequence expiry stops at (the first live message not older than the cut-off), or 0. It never
    crosses a fault: a damaged or missing message's timestamp is unknown, and removing it with the head
    would lose what the group may keep; a repair settles it first."""
    first = fs_remove.first_live(store)
    if not first:
        return 0
    stop = store.last_seq + 1
    for seq in live_seqs_between(store, first, store.last_seq):
        record = checked_record(store, seq)  # verified: a decision (None: a fault from now on)
        if record is None or struct.unpack_from("<Q", record, 17)[0] >= cutoff_ns:
            stop = seq
            break
    fault = next((f for f in store.fault_map.faults() if f.last >= store.head), None)
    if fault is not None:
        stop = min(stop, max(fault.first, store.head))
    return stop if stop > first else 0


# --- Purge ------------------------------------------------------------------------------------------


def purge(store: "FileStore", subject: str | None, seq: int | None, keep: int | None) -> int:
    """JetStream purge (see `limits_check.check_purge_args` for the argument rules)."""
    subject, seq, keep = check_purge_args(subject, seq, keep)
    fs_remove.mark_touched(store)
    if subject is None and seq is not None:
        return store.compact(seq)
    if subject is None:
        live = live_seqs_between(store, store.head, store.last_seq)
        if keep is not None:
            return fs_remove.cut_head(store, live[len(live) - keep]) if keep < len(live) else 0
        return fs_remove.cut_head(store, store.last_seq + 1)
    matching = [s for s in live_seqs_between(store, store.head, store.last_seq)
                if (seq is None or s < seq) and _matches(store, lambda name: subjectlib.matches(subject, name), s)]
    if keep is not None:
        matching = matching[: max(len(matching) - keep, 0)]
    return fs_remove.delete_many(store, matching)


def subject_sizes(store: "FileStore", subject: str):
    """Sizes of `subject`'s live messages, oldest first, read lazily from the records."""
    for block in store.blocks:
        if subject not in block.subjects:
            continue
        for seq in live_seqs_between_block(block, block.first_seq, block.last_seq):
            record = checked_record(store, seq)
            if record is None:
                continue  # a fault now: repaired or removed later, its size is not this store's to guess
            name, headers_len, payload_len = message_subject(record, record[8])
            if name == subject:
                yield msg_size(len(name.encode()), headers_len, payload_len)


# --- Truncate ------------------------------------------------------------------------------------


# --- Repair ------------------------------------------------------------------------------------


def repair(store: "FileStore", seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> None:
    kind = store.fault_map.kind_of(seq)
    if kind is None:
        raise BadRequest(f"sequence {seq} is not damaged; a store never overwrites an intact message")
    check_message(store.config, subject, headers, payload, timestamp_ns)
    if kind is FaultKind.tombstone and store.locate(seq) is not None:
        store.fault_map.remove(seq, seq)  # we hold it live and the peer does too: nothing to fetch
        return
    record, crc = encode_message(seq, timestamp_ns, subject.encode(), headers, payload)
    offset = store.write_records(record)
    block = store.newest()
    store.moved[seq] = (block.number, offset, len(record), crc)
    size = msg_size(len(subject.encode()), len(headers), len(payload))
    # Counted in full: a natural record of `seq` detached unreadable left the totals when its block was settled
    # (or leaves them when it is; fs_unreadable invariant 2), never through this repair.
    store.account_add(seq, subject, size, crc)
    fs_unreadable.count_moved(store, subject, size)
    store.fault_map.remove(seq, seq)
    store._first_live_hint = 0  # a repaired sequence may now be the first live one


def repair_deleted(store: "FileStore", first: int, last: int) -> None:
    if first > last:
        raise BadRequest("repair_deleted needs first <= last")
    seqs = list(range(first, last + 1))
    if any(store.fault_map.kind_of(s) is None for s in seqs):
        raise BadRequest(f"sequences {first}..{last} are not all damaged: intact messages stay")
    live = [s for s in seqs if store.locate(s) is not None]
    for seq in live:
        fs_remove.remove(store, seq)
    store.fault_map.remove(first, last)
    fs_remove.write_tombstones(store, seqs)


__all__ = ["checked_record", "clean_buffer", "content_crc", "first_not_expired", "last_matching", "next_matching",
           "purge", "repair", "repair_deleted", "subject_first", "timestamp_of"]
