"""Terms never go down across faulty indexes in a recovered log (`wal.scan` R4b; simulator stream seed 30169).

Method: on real files and on `SimDisk` (the `disk` fixture), a WAL holds entries 1..3 of term 1 (acknowledged);
records are then written by hand after them, as damage at rest leaves them: entry 4 of term 3, junk that
hides index 5, then entries 6 and 7 of term 2 (each naming the term before it). Entry 4 and entry 6 cannot
both be current: terms in a log never go down. R4's check compares an entry with its predecessor only, which
is faulty here, so before R4b the log came back as 4@3, 5 faulty, 6@2, 7@2 and the Raft core refused it at
start (`RestoredState.validate`: "restored terms non-decreasing"), which in the simulator left a node that
could not start after a rollback and a flip of its segment. Either side of the break may be the stale one (a
new leader may overwrite an entry with one of a lower term), so both are faulty — 4 (and any accepted entry of
a term above 2) and 6 — and the log resumes with 7, whose term no longer falls. The replica is repairing (its
peers fill in 4..6), and the restored state the core is built from validates.

Control: the same records without the junk are an ordinary R4 break (4 and 5 adjacent).
"""

from __future__ import annotations

from wal_helpers import append_raw, build, make_entries, segments

from jsraft.disk import Disk
from jsraft.raft.types import Entry
from jsraft.replica.restore import restored_state
from jsraft.wal import Wal
from jsraft.wal.format import WAL_DIR, encode_entry

SEGMENT_BYTES = 1 << 20


def _entry(index: int, term: int) -> Entry:
    return make_entries(index, index + 1, term=term)[0]


def _written(disk: Disk, records: bytes) -> None:
    build(disk, make_entries(1, 4, term=1), watermark=3, segment_bytes=SEGMENT_BYTES)
    (name,) = segments(disk)
    append_raw(disk, f"{WAL_DIR}/{name}", records)


def _good_terms(recovered) -> list[tuple[int, int]]:
    return [(entry.index, entry.term) for entry in recovered.entries if entry.index not in recovered.faulty]


def test_a_term_below_one_before_a_faulty_gap_faults_both_sides(disk: Disk) -> None:
    junk = b"\x5a" * 40  # not a record: hides index 5
    _written(disk, encode_entry(_entry(4, 3), 1) + junk + encode_entry(_entry(6, 2), 2)
             + encode_entry(_entry(7, 2), 2))
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert _good_terms(recovered) == [(1, 1), (2, 1), (3, 1), (7, 2)], recovered.reasons
    assert recovered.faulty == frozenset({4, 5, 6})
    assert recovered.repairing
    assert any("term 2 at 6 below term 3" in reason for reason in recovered.reasons), recovered.reasons
    restored = restored_state(recovered, 0, voters=("n1",), formatted=True)
    restored.validate()  # before R4b: InvariantViolation "restored terms non-decreasing at 6"
    assert wal.last_index() == 7
    wal.close()


def test_a_term_that_does_not_fall_across_the_gap_is_kept(disk: Disk) -> None:
    junk = b"\x5a" * 40
    _written(disk, encode_entry(_entry(4, 2), 1) + junk + encode_entry(_entry(6, 3), 2)
             + encode_entry(_entry(7, 3), 3))
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert _good_terms(recovered) == [(1, 1), (2, 1), (3, 1), (4, 2), (6, 3), (7, 3)], recovered.reasons
    assert recovered.faulty == frozenset({5})
    restored_state(recovered, 0, voters=("n1",), formatted=True).validate()
    wal.close()


def test_control_an_adjacent_fall_is_r4(disk: Disk) -> None:
    _written(disk, encode_entry(_entry(4, 3), 1) + encode_entry(_entry(5, 2), 3) + encode_entry(_entry(6, 2), 2))
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert _good_terms(recovered) == [(1, 1), (2, 1), (3, 1), (6, 2)], recovered.reasons
    assert recovered.faulty == frozenset({4, 5})
    assert any("log matching broken between 4 and 5" in reason for reason in recovered.reasons)
    restored_state(recovered, 0, voters=("n1",), formatted=True).validate()
    wal.close()
