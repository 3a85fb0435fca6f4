"""`deleted_ranges`: a `FileStore`'s interior deletes from its block summaries, reading no record (layer L2).

Owns: the runs of sequences in `[first, last]` that hold no live message, as a stream snapshot's group
state needs them (`stream.snapshot.group_state_of`), and `count_live`, how many live messages such a range
holds, as a consumer's `num_pending` needs it on every pull pass (`consumer.position`). Before, that walked every live message with
`load_next` (a read, a CRC check and a decode each): 12 s for 200,000 messages under load, on the event
loop, for every snapshot of a stream with a single interior delete — and snapshots come every 32,768
messages since they are bounded by messages (replica/snapshot_pace.py).

Invariants:
  1. A sequence is live exactly when `load_next` would return it: its natural block's `offsets` slot is
     non-zero (blocks invariant 1), or it is in `moved` (a repair wrote its record into a later block).
     Sequences no block covers (a block emptied and removed) hold nothing.
  2. Faults: a sequence the fault map holds has unknown content; rather than guess, `DamagedSequence`
     is raised for the first such one in the range (what the walk raised on reading it), and the caller
     refuses the snapshot as before.
  3. Ranges are sorted, disjoint, maximal, inside `[first, last]`. Cost: a C-speed count per block with
     no hole, a Python pass over the slots of a block that has one.
  4. `count_live(first, last)` is the number of sequences in `[first, last]` that invariant 1 calls live,
     which is what walking `load_next` over the range counts; with a fault in the range it raises as
     `deleted_ranges` does (2). Cost: one C-speed count of the range's slots per block, whatever the holes
     (a walk read, checked and decoded every message: a pull pass over a stream with one interior delete
     cost ~250 µs of server CPU per delivered message, for a consumer halfway through 30,000 messages).

Imports: L0 (`errors`), store siblings (`blocks`). Must not read block files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.errors import DamagedSequence

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore

Ranges = list[tuple[int, int]]


def deleted_ranges(store: "FileStore", first: int, last: int) -> Ranges:
    """The maximal runs of sequences in `[first, last]` holding no live message."""
    if last < first:
        return []
    fault = next((f for f in store.fault_map.faults() if f.last >= first and f.first <= last), None)
    if fault is not None:  # invariant 2
        raise DamagedSequence(max(fault.first, first), str(fault.kind))
    holes: Ranges = []
    expected = first  # the lowest sequence not classified yet
    for block in store.blocks:
        if block.last_seq < first or block.last_seq < block.first_seq:
            continue
        if block.first_seq > last:
            break
        lo, hi = max(block.first_seq, first), min(block.last_seq, last)
        if lo > expected:
            _add(holes, expected, lo - 1)  # no block covers these (invariant 1)
        _block_holes(holes, block.offsets, block.first_seq, lo, hi)
        expected = hi + 1
    if expected <= last:
        _add(holes, expected, last)
    return _without(holes, sorted(s for s in store.moved if first <= s <= last)) if store.moved else holes


def count_live(store: "FileStore", first: int, last: int) -> int:
    """The live messages with a sequence in `[first, last]` (invariant 4)."""
    if last < first:
        return 0
    fault = next((f for f in store.fault_map.faults() if f.last >= first and f.first <= last), None)
    if fault is not None:  # invariant 2
        raise DamagedSequence(max(fault.first, first), str(fault.kind))
    count = 0
    for block in store.blocks:
        if block.last_seq < first or block.last_seq < block.first_seq:
            continue
        if block.first_seq > last:
            break
        offsets, base = block.offsets, block.first_seq
        start, stop = max(base, first) - base, min(block.last_seq, last) - base + 1
        window = offsets if stop - start == len(offsets) else offsets[start:stop]
        count += len(window) - window.count(0)
    if store.moved:
        count += sum(1 for seq in store.moved if first <= seq <= last)
    return count


def _block_holes(holes: Ranges, offsets, base: int, lo: int, hi: int) -> None:  # type: ignore[no-untyped-def]
    start, stop = lo - base, hi - base + 1
    if stop - start == len(offsets):
        if not offsets.count(0):
            return
    elif 0 not in offsets[start:stop]:
        return
    for index in range(start, stop):
        if not offsets[index]:
            _add(holes, base + index, base + index)


def _add(holes: Ranges, lo: int, hi: int) -> None:
    if holes and holes[-1][1] == lo - 1:
        holes[-1] = (holes[-1][0], hi)
    else:
        holes.append((lo, hi))


def _without(holes: Ranges, live: list[int]) -> Ranges:
    """`holes` with the sorted sequences `live` taken out (moved records: invariant 1)."""
    result: Ranges = []
    position = 0
    for lo, hi in holes:
        while position < len(live) and live[position] < lo:
            position += 1
        start = lo
        while position < len(live) and live[position] <= hi:
            if live[position] > start:
                result.append((start, live[position] - 1))
            start = live[position] + 1
            position += 1
        if start <= hi:
            result.append((start, hi))
    return result
