"""`wal.repaired.put_repaired`: the one step every Raft driver uses to write a repairing replica's repaired
entries (the runtime's persistence step and the simulator's node driver both call it)."""

from __future__ import annotations

import random

import pytest

from jsraft.errors import InvariantViolation
from jsraft.raft.types import Entry, HardState
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Wal
from jsraft.wal.format import WAL_DIR, encode_entry, segment_name, segment_preamble
from jsraft.wal.repaired import put_repaired

LOG = [Entry(index=i, term=1 if i < 4 else 2, data=b"z%d" % i) for i in range(1, 6)]


def _record_offset(index: int) -> int:
    offset, prev_term = len(segment_preamble(1)), 0
    for entry in LOG:
        if entry.index == index:
            return offset
        offset += len(encode_entry(entry, prev_term))
        prev_term = entry.term
    raise AssertionError(index)


def _wal_with_faulty_4() -> Wal:
    """Entry 4 is corrupt; entry 5's record claims term 2 for it."""
    disk = SimDisk(random.Random(5))
    wal, _ = Wal.open(disk, segment_bytes=1 << 20)
    wal.append(LOG)
    wal.save_hard_state(HardState(current_term=2, acked_watermark=5, commit_index=5))
    wal.sync()
    wal.close()
    disk.flip_bit(f"{WAL_DIR}/{segment_name(1)}", _record_offset(4) + 20)
    wal, recovered = Wal.open(disk, segment_bytes=1 << 20)
    assert recovered.faulty == {4} and wal.term(4) == 2
    return wal


def test_a_copy_with_the_claimed_term_is_written_in_place_and_nothing_is_cut():
    wal = _wal_with_faulty_4()
    assert put_repaired(wal, [LOG[3]], repairing=True) is None
    assert wal.faulty() == frozenset() and wal.entries(1, 6) == LOG


def test_a_copy_with_another_term_cuts_the_successor_that_claimed_it_first():
    wal = _wal_with_faulty_4()
    leaders_copy = Entry(index=4, term=1, data=b"leader's 4")
    with pytest.raises(InvariantViolation):
        wal.replace([leaders_copy])  # the WAL alone refuses: a conflict with the claimed term
    assert put_repaired(wal, [leaders_copy], repairing=True) == 5
    assert wal.last_index() == 4 and wal.entries(4, 5) == [leaders_copy]
    assert wal.hard_state.repairing  # recorded before the cut below the commit hint


def test_a_healthy_replica_never_cuts():
    wal = _wal_with_faulty_4()
    with pytest.raises(InvariantViolation):
        put_repaired(wal, [Entry(index=4, term=1, data=b"x")], repairing=False)
    assert wal.last_index() == 5


def test_an_entry_the_wal_already_holds_is_not_rewritten():
    wal = _wal_with_faulty_4()
    put_repaired(wal, [LOG[3]], repairing=True)
    before = wal.entries(1, 6)
    assert put_repaired(wal, [LOG[0], LOG[3]], repairing=True) is None
    assert wal.entries(1, 6) == before
