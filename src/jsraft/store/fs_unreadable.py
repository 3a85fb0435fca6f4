"""Detaching a live record from a FileStore, and settling what a record that no longer reads back counted for
(layer L2).

Owns: `detach` (a live record leaves the in-memory maps, `FileStore.detach`), and the accounting of one
detached unreadable: without its record its subject and size are unknown, so which subject count and how
many bytes leave the totals is found from what is still readable beside it (`settle`).

Every live message record belongs to one *group*: its block (a natural record, key: the block number) or the
repair records (`moved`, key `MOVED`). A group keeps the nats-server bytes and per-subject counts of its
records: `Block.bytes` and `Block.subjects`, `FileStore.moved_bytes` and `FileStore.moved_subjects`.

Invariants:
  1. `store.bytes` is the sum of the groups' bytes and `store.psim[s][0]` the sum of their counts of `s`.
  2. A group's totals are those of its live records plus the ones it *owes*: records detached unreadable
     and not yet settled (`FileStore.unaccounted[key]`, their sequences, one entry per record). A detached record's count and
     digest terms leave at once (`Accounting` invariant 1); its bytes and subject count leave when its
     group is settled, so once settled the totals cover exactly the live messages, as an undamaged replica
     holding the same messages counts them (whatever becomes of the sequence: repaired, deleted, cut).
  3. `settle` reads every live record of the group (verified, read again past the cache); only when all
     of them verify are the group's totals set to theirs and the difference taken from the store's: it is
     then exactly what the owed records counted. It detaches nothing (its callers walk live records). A
     group with another live record that does not read back stays owed until the next detach in it (that
     record's, when a read trips over it, the verifier finds it or a removal detaches it), or until its
     block file is removed (`fs_remove.drop_dead_head`, `fs_truncate`), which settles it first.
  4. No subject's first/last hint (`psim`) names a sequence detached unreadable: they are cleared at the
     detach (the record's subject is one of its group's).
  5. The owed sets are in the index (`fs_index`), so a store opened from it owes what the store owed.

Imports: L0, L1 (codec), store siblings (`base`, `blocks`). Reference: DESIGN.md §3 (state tuple), §8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.codec.records import message_digest
from jsraft.errors import CorruptRecord, invariant
from jsraft.store.base import msg_size
from jsraft.store.blocks import Block, message_record_verifies, message_subject

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore

MOVED = 0  # the group of repair records; blocks are numbered from 1

Where = tuple[Block, int, int, int]


def detach(store: "FileStore", seq: int, where: Where, readable: bool) -> None:
    """Drop `seq` from the in-memory maps (not from disk), reading its record (verified) for the accounting;
    `readable=False`, or no read verifying, makes its group owe its bytes and subject count (invariant 2)."""
    block, offset, _, crc = where
    # A block's `msgs`, `bytes` and `subjects` count its natural records only: a repair record it holds is
    # found through `moved` and counted in that group (and removing one must not take a subject from the
    # block's filter hint, or a scan by subject would skip the block's own live messages of that subject).
    natural = block is not None and block.covers(seq) and block.offsets[seq - block.first_seq] == offset
    record = store.checked_record(seq, where) if readable and block is not None else None
    if record is not None:
        name, headers_len, payload_len = message_subject(record, record[8])
        size = msg_size(len(name.encode()), headers_len, payload_len)
        store.account_remove(seq, name, size, crc)
        if natural:
            block.msgs -= 1
            block.bytes -= size
            block.drop_subject(name)
        else:
            store.moved_bytes -= size
            _drop(store.moved_subjects, name, 1)
    else:
        store.msgs -= 1
        if natural:
            block.msgs -= 1
        store._remove_term(seq, message_digest(seq, crc))
        key = block.number if natural else MOVED
        # A list: a sequence truncated away while owed and appended again can be owed twice by its block.
        store.unaccounted.setdefault(key, []).append(seq)
        _clear_hints(store, seq, block.subjects if natural else store.moved_subjects)  # invariant 4
    if natural:
        block.offsets[seq - block.first_seq] = 0
    else:
        store.moved.pop(seq, None)
    if seq == store._first_live_hint:
        store._first_live_hint = 0
    if record is None:
        settle(store, key)


def settle(store: "FileStore", key: int) -> bool:
    """Settle what group `key` owes, if every live record of it reads back (invariant 3); return whether
    it owes nothing now."""
    owed = store.unaccounted.get(key)
    if not owed:
        store.unaccounted.pop(key, None)
        return True
    if key == MOVED:
        counted_bytes, counted_subjects = store.moved_bytes, store.moved_subjects
    else:
        block = store.files.by_number.get(key)
        invariant(block is not None, f"store {store.config.name}: block {key} removed while it owed {owed}")
        counted_bytes, counted_subjects = block.bytes, block.subjects
    held = _held(store, key)
    if held is None:
        return False
    size_total, subjects = held
    lost = {name: count - subjects.get(name, 0) for name, count in counted_subjects.items()}
    # Each owed record counted one subject and its size: anything else is accounting broken elsewhere.
    invariant(set(subjects) <= set(counted_subjects) and min(lost.values(), default=0) >= 0
              and sum(lost.values()) == len(owed) and counted_bytes - size_total >= len(owed),
              f"store {store.config.name}: group {key} counts {counted_bytes} bytes, {counted_subjects}, "
              f"its readable records {size_total}, {subjects}, owing {sorted(owed)}")
    store.bytes -= counted_bytes - size_total
    for name, count in lost.items():
        if count:
            _uncount(store, name, count)
    if key == MOVED:
        store.moved_bytes, store.moved_subjects = size_total, subjects
    else:
        block.bytes, block.subjects = size_total, subjects
    del store.unaccounted[key]
    return True


def settle_all(store: "FileStore") -> None:
    """Try every owed group again (after a verification pass: a read error that kept one owed is gone)."""
    for key in list(store.unaccounted):
        settle(store, key)


def _held(store: "FileStore", key: int) -> tuple[int, dict[str, int]] | None:
    """Bytes and subject counts of group `key`'s live records, each read and verified; None when one does
    not read back (or a read fails)."""
    if key == MOVED:
        records = []
        for seq, (number, offset, length, crc) in store.moved.items():
            holder = store.files.by_number.get(number)
            if holder is None:  # its block is gone (`recovery.scan_live` detaches it next)
                return None
            records.append((seq, (holder, offset, length, crc)))
        buffer = None
    else:
        block = store.files.by_number[key]
        base, offsets, lengths, crcs = block.first_seq, block.offsets, block.lengths, block.crcs
        records = [(base + i, (block, offsets[i], lengths[i], crcs[i])) for i in range(len(offsets)) if offsets[i]]
        buffer = None
    size_total, subjects = 0, {}
    try:
        if key != MOVED and records:
            buffer = store.files.buffer(block)  # one read of the block (scans cache whole blocks)
        for seq, where in records:
            record = None
            if buffer is not None:
                record = buffer[where[1] : where[1] + where[2]]
                if not message_record_verifies(record, where[2], seq):
                    record = None
            if record is None:
                record = store.checked_record(seq, where)
            if record is None:
                return None
            name, headers_len, payload_len = message_subject(record, record[8])
            size_total += msg_size(len(name.encode()), headers_len, payload_len)
            subjects[name] = subjects.get(name, 0) + 1
    except (OSError, CorruptRecord):  # a read that failed, a compressed body that does not decompress
        return None
    return size_total, subjects


def count_moved(store: "FileStore", subject: str, size: int) -> None:
    """A repair record joins the `MOVED` group."""
    store.moved_bytes += size
    store.moved_subjects[subject] = store.moved_subjects.get(subject, 0) + 1


def _drop(counts: dict[str, int], name: str, count: int) -> None:
    left = counts.get(name, 0) - count
    if left > 0:
        counts[name] = left
    else:
        counts.pop(name, None)


def _uncount(store: "FileStore", subject: str, count: int) -> None:
    entry = store.psim.get(subject)
    invariant(entry is not None and entry[0] >= count,
              f"subject {subject!r} counts {entry and entry[0]} messages, {count} owed records had it")
    entry[0] -= count
    if entry[0] <= 0:
        del store.psim[subject]


def _clear_hints(store: "FileStore", seq: int, subjects: dict[str, int]) -> None:
    for name in subjects:
        entry = store.psim.get(name)
        if entry is not None:
            if entry[1] == seq:
                entry[1] = 0  # recomputed lazily by `subject_first`
            if entry[2] == seq:
                entry[2] = 0
