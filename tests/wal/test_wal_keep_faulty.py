"""A faulty entry stays faulty until it is repaired: a re-read of the open log never un-faults it (`Wal` invariant 6).

Method: on real files and on `SimDisk` (the `disk` fixture), a WAL holds entries 1..5 of term 1, acknowledged,
in segments of a few entries. Entry 3's record is damaged at rest (a flipped byte), and entry 5's is misread
once — the first read of its segment at recovery sees a flipped byte, every later read the true bytes (a
transient misread, as the simulator's `read_flip`). Recovery reports both faulty and the Raft core is told so.
Repairing 3 (`replace`) re-reads every segment with recovery's rules, and 5 now reads good. Before the rule
the WAL then believed 5 good under its old term while the core still held it faulty and repaired it with the
leader's copy — of another term when the replica's 5 was an uncommitted entry the cluster replaced — and
`put_repaired` hit `replace`'s "only faulty entries are replaced" (simulator register seed 31003: a node that
crashed in the middle of its repair). Now 5 stays faulty with its term unknown until the leader's copy is
put in its place, and then reads back as that copy, also after a restart.

Control: an entry the core repairs with the same term it had is written back as it was.
"""

from __future__ import annotations

from wal_helpers import build, flip, locate, make_entries

from jsraft.disk import Disk
from jsraft.raft.types import Entry
from jsraft.wal import Wal
from jsraft.wal.format import WAL_DIR
from jsraft.wal.repaired import put_repaired

SEGMENT_BYTES = 200  # a few entries a segment
LOG = make_entries(1, 6, term=1)


class MisreadOnce:
    """`disk`, except that the first `read_file` of `path` sees byte `offset` flipped."""

    def __init__(self, disk: Disk, path: str, offset: int) -> None:
        self._disk, self._path, self._offset, self.misread = disk, path, offset, False

    def read_file(self, path: str) -> bytes:
        data = self._disk.read_file(path)
        if path != self._path or self.misread:
            return data
        self.misread = True
        damaged = bytearray(data)
        damaged[self._offset] ^= 0x10
        return bytes(damaged)

    def __getattr__(self, name: str) -> object:
        return getattr(self._disk, name)


def _opened(disk: Disk) -> tuple[Wal, object, MisreadOnce]:
    build(disk, LOG, watermark=5, segment_bytes=SEGMENT_BYTES)
    (name3, offset3, length3), (name5, offset5, length5) = locate(disk, 3), locate(disk, 5)
    assert name3 != name5  # 3 and 5 in different segments: repairing 3 rewrites only 3's
    flip(disk, f"{WAL_DIR}/{name3}", offset3 + length3 - 1)  # 3: damaged at rest
    misreading = MisreadOnce(disk, f"{WAL_DIR}/{name5}", offset5 + length5 - 1)  # 5: misread once
    wal, recovered = Wal.open(misreading, segment_bytes=SEGMENT_BYTES)  # type: ignore[arg-type]
    assert misreading.misread and recovered.faulty == frozenset({3, 5}), recovered.reasons
    return wal, recovered, misreading


def test_a_misread_entry_stays_faulty_after_another_repair_and_takes_the_leaders_copy(disk: Disk) -> None:
    wal, _, _ = _opened(disk)
    put_repaired(wal, [LOG[2]], repairing=True)  # the leader's 3, same term: the re-read finds 5 intact now
    assert wal.faulty() == frozenset({5}) and wal.term(5) is None  # still faulty, its term unknown
    leaders = Entry(5, 2, data=b"the leader's 5, of term 2")
    assert put_repaired(wal, [leaders], repairing=True) is None  # before the rule: InvariantViolation
    assert wal.faulty() == frozenset() and wal.entries(1, 6) == LOG[:4] + [leaders]
    wal.close()
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.entries == LOG[:4] + [leaders] and recovered.faulty == frozenset()
    wal.close()


def test_control_a_repair_with_the_same_term_writes_the_entry_back(disk: Disk) -> None:
    wal, _, _ = _opened(disk)
    put_repaired(wal, [LOG[2]], repairing=True)
    put_repaired(wal, [LOG[4]], repairing=True)
    assert wal.faulty() == frozenset() and wal.entries(1, 6) == LOG
    wal.close()
