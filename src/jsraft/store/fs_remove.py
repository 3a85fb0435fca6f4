"""FileStore removals: deletes, head cuts, dead-block removal and limit enforcement.

Owns: everything that takes messages out of a FileStore. Interior deletes are written as `TOMBSTONE`
records; a head cut away (limits, compact, purge, expiry) as a `FIRST_SEQ` marker, made durable before
any block file is removed.

Invariants:
  1. A block file is removed only when every sequence in it is below the first live message, it is not
     the newest block, and it holds no repair record still in use.
  2. A removal updates the digest, counts and subject index in the same call as the maps.
  3. A compact past `last_seq + 1` holds no slot for the sequences it jumps over (`jump`): whatever
     its distance, it costs one new block.

Imports: L0, L1 (`codec`), siblings but `fs_ops` (which imports this module; its searches are reached
through the `FileStore`).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from jsraft.errors import invariant
from jsraft.codec.records import Kind, encode_record
from jsraft.store.base import UNLIMITED, Discard, msg_size
from jsraft.store import fs_unreadable
from jsraft.store.blocks import Block

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jsraft.store.filestore import FileStore

_RANGE = struct.Struct("<QQ")


def first_live(store: "FileStore") -> int:
    """Lowest live sequence, or 0 when the store holds no message."""
    if store.msgs <= 0:
        return 0
    hint = store._first_live_hint
    if hint and hint >= store.head and store.locate(hint) is not None:
        return hint
    seq = store.head
    for block in store.files.blocks:
        if block.last_seq < seq:
            continue
        start = max(seq, block.first_seq) - block.first_seq
        offsets = block.offsets
        for index in range(start, len(offsets)):
            if offsets[index]:
                store._first_live_hint = block.first_seq + index
                return first_live_first_of(store, block.first_seq + index)
    return first_live_first_of(store, min(store.moved) if store.moved else 0)


def last_live(store: "FileStore") -> int:
    """Highest live sequence, or 0 when the store holds no message: the newest natural slot in use, or a
    repaired record's (`moved`) above it — as `first_live`, from the slots, reading no record."""
    if store.msgs <= 0:
        return 0
    natural = 0
    for block in reversed(store.files.blocks):
        offsets = block.offsets
        index = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i]), -1)
        if index >= 0:
            natural = block.first_seq + index
            break
    return max([natural, *(s for s in store.moved if s >= store.head)])


def first_live_first_of(store: "FileStore", natural: int) -> int:
    candidates = [s for s in store.moved if s >= store.head]
    best = min([natural] + candidates) if natural else min(candidates, default=0)
    store._first_live_hint = best
    return best


def remove(store: "FileStore", seq: int) -> bool:
    """Remove one live message from memory (the caller writes the durable record)."""
    where = store.locate(seq)
    if where is None:
        return False
    store.detach(seq, where)
    return True


def write_tombstones(store: "FileStore", seqs: list[int], kind: int = Kind.TOMBSTONE) -> None:
    if not seqs:
        return
    ranges: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if ranges and ranges[-1][1] + 1 == seq:
            ranges[-1] = (ranges[-1][0], seq)
        else:
            ranges.append((seq, seq))
    body = b"".join(_RANGE.pack(lo, hi) for lo, hi in ranges)
    store.write_records(encode_record(kind, ranges[0][0], len(ranges), body))


def delete_many(store: "FileStore", seqs: list[int]) -> int:
    removed = [seq for seq in seqs if remove(store, seq)]
    damaged = [s for s in seqs if s not in removed and store.fault_map.kind_of(s) is not None]
    for seq in damaged:
        store.fault_map.remove(seq, seq)  # deleting a damaged sequence needs no repair
    write_tombstones(store, removed + damaged)
    drop_dead_head(store)
    return len(removed)


def compact(store: "FileStore", seq: int) -> int:
    """Remove every message below `seq`; past `last_seq + 1` the skipped sequences are consumed."""
    mark_touched(store)
    if seq <= store.last_seq + 1:
        return cut_head(store, seq)
    removed = cut_head(store, store.last_seq + 1)
    jump(store, seq)
    return removed


def jump(store: "FileStore", seq: int) -> None:
    """Move an emptied store's next sequence to `seq` in a new block that starts there (invariant 3).

    The old blocks are made durable first, then the new block records the jump as its `FIRST_SEQ(seq)`
    marker (recovery reads one as "the store reached `seq - 1`"), and `cut_head` removes the old block
    files once that marker is synced. A `SKIP` over the jumped range in the old newest block made it hold
    one slot per jumped sequence, in memory and again at every recovery: a purge to a far sequence
    exhausted memory."""
    store.sync()
    store.newest().sealed = True
    store.last_seq = seq - 1
    store.new_block()
    cut_head(store, seq)


def mark_touched(store: "FileStore") -> None:
    """End the brand-new state (first_seq 0 -> last_seq + 1), durably if nothing else records it."""
    if store.touched:
        return
    store.touched = True
    if store.last_seq == 0:
        store.write_records(encode_record(Kind.FIRST_SEQ, store.head, store.lowest_block))


def cut_head(store: "FileStore", new_head: int) -> int:
    """Remove every live message below `new_head` and record it with a `FIRST_SEQ` marker."""
    mark_touched(store)
    if new_head <= store.head:
        return 0
    removed = 0
    for seq in live_seqs_between(store, store.head, new_head - 1):
        removed += remove(store, seq)
    store.fault_map.remove(0, new_head - 1)
    store.head = new_head
    for seq in [s for s in store.moved if s < new_head]:
        del store.moved[seq]
    store.write_records(encode_record(Kind.FIRST_SEQ, new_head, store.lowest_block))
    drop_dead_head(store)
    return removed


def drop_dead_head(store: "FileStore") -> None:
    """Remove head block files that hold no live message, after a durable `FIRST_SEQ` marker."""
    first = first_live(store) or store.last_seq + 1
    holding_repairs = moved_blocks(store)
    dead: list[Block] = []
    for block in store.files.blocks[:-1]:  # the newest block is never removed
        if block.last_seq >= first or block.number in holding_repairs:
            break
        dead.append(block)
    if not dead:
        return
    new_head = max(store.head, dead[-1].last_seq + 1)
    store.head = new_head
    store.lowest_block = dead[-1].number + 1
    store.write_records(encode_record(Kind.FIRST_SEQ, new_head, store.lowest_block))
    store.sync()  # the marker must be durable before a file it accounts for disappears
    for block in dead:
        fs_unreadable.settle(store, block.number)  # it holds no live record: what it owes leaves with it
        store.files.remove(block)
    store.disk.sync_dir("")


def moved_blocks(store: "FileStore") -> set[int]:
    return {number for number, _, _, _ in store.moved.values()}


def limits_interleave(store: "FileStore", msgs: Sequence[tuple[int, str, bytes, bytes, int]]) -> bool:
    """Whether enforcing the limits once after `msgs` could keep more than enforcing them after each
    message does (the rule: limits apply per message, as nats-server's stores and `MemStore` do).

    Only a per-subject limit together with `max_msgs`/`max_bytes` under `discard: old` can differ: a
    message that a later one of its subject replaces still pushed the totals over the budget while it
    was live, which evicts older messages. Without a per-subject limit, or without a global one, the
    final state bounds every intermediate one and one pass removes the same messages. So the answer is
    "yes" exactly when the totals, counting every message of the batch as live, pass a global limit.
    """
    config = store.config
    if config.max_msgs_per_subject == UNLIMITED or config.discard != Discard.old:
        return False
    if config.max_msgs == UNLIMITED and config.max_bytes == UNLIMITED:
        return False
    count = store.msgs + len(msgs)
    size = store.bytes + sum(msg_size(len(subject.encode()), len(headers), len(payload))
                             for _, subject, headers, payload, _ in msgs)
    return (config.max_msgs != UNLIMITED and count > config.max_msgs) or (
        config.max_bytes != UNLIMITED and size > config.max_bytes)


def enforce_limits(store: "FileStore", touched_subjects: set[str]) -> None:
    """Per-subject limits first (either discard policy), then max_msgs/max_bytes under `discard: old`."""
    config = store.config
    if config.max_msgs_per_subject != UNLIMITED:
        extra: list[int] = []
        for subject in sorted(touched_subjects):  # a set of str: its order changes with the hash seed
            entry = store.psim.get(subject)
            while entry is not None and entry[0] > config.max_msgs_per_subject:
                first = store.subject_first(subject)
                # A count above the subject's live messages is broken accounting: fail, never spin for ever.
                invariant(bool(first) and remove(store, first),
                          f"subject {subject!r} counts {entry[0]} messages but its first live one is missing")
                extra.append(first)
                entry = store.psim.get(subject)
        if extra:
            write_tombstones(store, extra)
    if config.discard == Discard.old:
        cut = 0
        while (config.max_msgs != UNLIMITED and store.msgs > config.max_msgs) or (
            config.max_bytes != UNLIMITED and store.bytes > config.max_bytes
        ):
            first = first_live(store)
            if not first:
                break
            remove(store, first)
            cut = first
        if cut:
            cut_head(store, cut + 1)
    drop_dead_head(store)

def live_seqs_between(store: "FileStore", lo: int, hi: int) -> list[int]:
    """Live sequences in `lo..hi`, in order."""
    found: list[int] = []
    for block in store.blocks:
        if block.last_seq < lo or block.first_seq > hi:
            continue
        start = max(lo, block.first_seq) - block.first_seq
        stop = min(hi, block.last_seq) - block.first_seq
        offsets = block.offsets
        found.extend(block.first_seq + i for i in range(start, stop + 1) if offsets[i])
    found.extend(seq for seq in store.moved if lo <= seq <= hi)
    found.sort()
    return found
