"""A faulty entry's claimed term goes with the record that claimed it, wherever recovery cuts that record.

A faulty entry's term is known only as its successor's record claims it (`prev_term`). `Wal.truncate_from`
already drops the claim when it removes the successor. Recovery's two other cuts did not:

- the stale tail cut (`vouch.cut_log`, rule R7b): simulator register seed 36245, where the cut took entry 23
  and left faulty 22 claiming term 13;
- the stale entries before a hard-state record (`scan.stale_before`, rule R7a).

The leader's copy of that entry, of another term, was then refused by `replace` ("term conflict, use
truncate_from"), and the node went down in the middle of its repair: there was no successor left for
`put_repaired` to cut.

Method: real files and `SimDisk` (the `disk` fixture). The first test scans a WAL whose entry 4 is damaged at
rest, so its term is entry 5's claim, then has `cut_log` cut 5. The second writes by hand a WAL that recovery
must read with R7a: entries 1..3, junk where 4 was, a stale 5 of term 1, then a hard-state record saying the
log ended at 4. The new last entry, faulty 4, must come back with its term unknown, and the leader's 4 of
term 2 must go in.
"""

from __future__ import annotations

from wal_helpers import append_raw, build, flip, locate, make_entries, segments

from jsraft.disk import Disk
from jsraft.raft.types import Entry, HardState
from jsraft.wal import Wal
from jsraft.wal.format import SEGMENT_FILE_TYPE, WAL_DIR, LogEnd, encode_entry, encode_wal_hard_state, read_checked
from jsraft.wal.recovery import list_segments
from jsraft.wal.repaired import put_repaired
from jsraft.wal.scan import scan_log
from jsraft.wal.vouch import cut_log

SEGMENT_BYTES = 1 << 20
LEADERS_4 = Entry(4, 2, data=b"the leader's 4, of term 2")


def test_the_stale_tail_cut_drops_the_claim_its_cut_record_made(disk: Disk) -> None:
    build(disk, make_entries(1, 4, term=1) + make_entries(4, 6, term=7), watermark=5, segment_bytes=SEGMENT_BYTES)
    name, offset, length = locate(disk, 4)
    flip(disk, f"{WAL_DIR}/{name}", offset + length - 1)  # 4 damaged at rest: its term is 5's claim, 7
    files = [(name, first, read_checked(disk.read_file, f"{WAL_DIR}/{name}", SEGMENT_FILE_TYPE))
             for first, name in list_segments(disk)]
    scan = scan_log(files, snap_index=0, snap_term=0, watermark=5, allow_torn=True)
    assert scan.faulty == {4} and scan.term_at(4) == 0 and scan.segments[-1].terms[3] == 7
    cut_log(disk, scan, 4)  # 5 goes (what R7b does with a stale tail)
    assert scan.last_index == 4 and scan.faulty == {4}
    assert scan.segments[-1].terms[3] == 0  # before: 7, the removed 5's claim


def test_stale_entries_before_a_record_take_their_claim_with_them(disk: Disk) -> None:
    build(disk, make_entries(1, 4, term=1), watermark=3, segment_bytes=SEGMENT_BYTES)
    (name,) = segments(disk)
    stale = make_entries(5, 6, term=1)[0]
    sequence = 1000  # newer than anything the WAL wrote: this record is the newest hard state
    record = encode_wal_hard_state(HardState(current_term=2, acked_watermark=3), sequence, 1,
                                   LogEnd(4, 0, sequence))
    junk = b"\x5a" * 40  # where 4 was: damaged beyond reading
    append_raw(disk, f"{WAL_DIR}/{name}", junk + encode_entry(stale, 1) + record)
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.faulty == frozenset({4}) and wal.last_index() == 4, recovered.reasons
    assert any("stale entries 5..5" in reason for reason in recovered.reasons), recovered.reasons
    assert wal.term(4) is None  # before: 1, the cut stale 5's claim
    put_repaired(wal, [LEADERS_4], repairing=True)  # before: InvariantViolation "term conflict"
    assert wal.faulty() == frozenset() and wal.entries(4, 5) == [LEADERS_4]
    wal.close()
