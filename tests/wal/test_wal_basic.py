"""Tests for `jsraft.wal.Wal` without faults: what is written and synced is what a reopen finds.

Method: every test runs on `OsDisk` and on `SimDisk` (fixture `disk`). A test drives the public API
(append, sync, truncate_from, save_hard_state, save_snapshot, compact), closes the WAL, reopens it from
the same directory, and compares `Recovered` with the entries it wrote. Segments are made small so that
rolling, truncation across segments and compaction are exercised with a few dozen entries. A counting
disk wrapper checks the group-commit shape: one write per append call, one fsync per touched file.
"""

from __future__ import annotations

import pytest
from wal_helpers import SMALL_SEGMENT_BYTES, build, make_entries, reopen, segments

from jsraft.disk import Disk
from jsraft.errors import InvariantViolation
from jsraft.raft.types import ConfState, Entry, EntryType, HardState, SnapshotMeta
from jsraft.wal import Wal
from jsraft.wal.format import encode_entry, segment_name

CONF = ConfState(voters=("n1", "n2", "n3"), learners=("n4",))


def test_fresh_wal_is_empty_and_clean(disk: Disk) -> None:
    wal, recovered = Wal.open(disk)
    assert recovered.entries == [] and recovered.snapshot is None and not recovered.repairing
    assert recovered.hard_state == HardState() and recovered.reasons == []
    assert wal.first_index() == 1 and wal.last_index() == 0 and wal.term(0) == 0


def test_append_sync_reopen_round_trip(disk: Disk) -> None:
    written = make_entries(1, 40, term=1) + make_entries(40, 60, term=3)
    written[5] = Entry(6, 1, EntryType.NOOP, b"")
    build(disk, written, watermark=59)
    wal, recovered = reopen(disk)
    assert recovered.entries == written
    assert not recovered.repairing and recovered.faulty == frozenset() and recovered.reasons == []
    assert recovered.hard_state == HardState(current_term=3, voted_for="n1", acked_watermark=59)
    assert wal.entries(1, 60) == written and wal.entries(7, 7) == []
    assert [wal.term(i) for i in (0, 39, 40, 59, 60)] == [0, 1, 3, 3, None]


def test_segments_roll_at_the_configured_size(disk: Disk) -> None:
    written = make_entries(1, 50)
    build(disk, written)
    names = segments(disk)
    assert len(names) > 5 and names[0] == segment_name(1)
    firsts = [int(name[:20]) for name in names]
    assert firsts == sorted(firsts)
    for name in names:
        # Overshoot by at most one record (a hard-state record: 25-byte frame, 67-byte body (format 4), a short vote).
        assert disk.file_size(f"wal/{name}") < SMALL_SEGMENT_BYTES + 96
    assert reopen(disk)[1].entries == written


def test_appends_continue_across_reopen(disk: Disk) -> None:
    build(disk, make_entries(1, 10))
    wal, _ = reopen(disk)
    wal.append(make_entries(10, 30, term=2))
    wal.sync()
    wal.close()
    assert reopen(disk)[1].entries == make_entries(1, 10) + make_entries(10, 30, term=2)


def test_truncate_then_append_then_reopen(disk: Disk) -> None:
    build(disk, make_entries(1, 40, term=1), watermark=39)
    wal, _ = reopen(disk)
    wal.truncate_from(12)  # across several segments
    assert wal.last_index() == 11
    wal.append(make_entries(12, 20, term=2))
    wal.sync()
    wal.close()
    _, recovered = reopen(disk)
    assert recovered.entries == make_entries(1, 12) + make_entries(12, 20, term=2)
    assert not recovered.repairing, recovered.reasons
    assert recovered.hard_state.acked_watermark == 11  # lowered: the truncated entries were never committed


def test_truncate_at_a_segment_boundary_and_at_the_start(disk: Disk) -> None:
    build(disk, make_entries(1, 30))
    first_of_third = int(segments(disk)[2][:20])
    wal, _ = reopen(disk)
    wal.truncate_from(first_of_third)
    wal.append(make_entries(first_of_third, 35, term=2))
    wal.truncate_from(1)
    # Every entry is gone; the one segment left holds only the hard state put back after the cut.
    assert wal.last_index() == 0 and segments(disk) == ["00000000000000000001.log"]
    wal.append(make_entries(1, 5, term=3))
    wal.sync()
    wal.close()
    assert reopen(disk)[1].entries == make_entries(1, 5, term=3)


def test_truncate_refuses_committed_entries(disk: Disk) -> None:
    wal, _ = Wal.open(disk)
    wal.append(make_entries(1, 10))
    wal.save_hard_state(HardState(current_term=1, commit_index=5))
    with pytest.raises(InvariantViolation):
        wal.truncate_from(5)
    wal.truncate_from(6)
    assert wal.last_index() == 5


def test_append_contract_is_enforced(disk: Disk) -> None:
    wal, _ = Wal.open(disk)
    wal.append(make_entries(1, 3, term=2))
    with pytest.raises(InvariantViolation):
        wal.append(make_entries(4, 5, term=2))  # gap
    with pytest.raises(InvariantViolation):
        wal.append(make_entries(3, 4, term=1))  # term goes back


def test_hard_state_round_trip(disk: Disk) -> None:
    wal, _ = Wal.open(disk)
    for term in range(1, 6):
        wal.save_hard_state(HardState(current_term=term, voted_for=f"n{term}", commit_index=term))
        wal.sync()
    wal.close()
    _, recovered = Wal.open(disk)
    assert recovered.hard_state == HardState(current_term=5, voted_for="n5", commit_index=5)


def test_snapshot_save_load_and_log_after_it(disk: Disk) -> None:
    build(disk, make_entries(1, 30), watermark=29)
    wal, _ = reopen(disk)
    meta = SnapshotMeta(index=20, term=1, conf=CONF)
    wal.save_snapshot(meta, b"state at 20")
    wal.close()
    wal, recovered = reopen(disk)
    assert recovered.snapshot == (meta, b"state at 20")
    assert recovered.entries == make_entries(21, 30) and not recovered.repairing
    assert wal.first_index() == 21 and wal.term(20) == 1 and wal.term(19) is None


def test_snapshot_past_the_log_restarts_it(disk: Disk) -> None:
    build(disk, make_entries(1, 10), watermark=9)
    wal, _ = reopen(disk)
    wal.save_snapshot(SnapshotMeta(index=100, term=4, conf=CONF), b"")
    assert wal.last_index() == 100
    wal.append(make_entries(101, 105, term=4))
    wal.sync()
    wal.compact(100)
    assert segments(disk) == [segment_name(101)]
    wal.close()
    wal, recovered = reopen(disk)
    assert recovered.entries == make_entries(101, 105, term=4) and not recovered.repairing, recovered.reasons


def test_compaction_removes_only_covered_segments(disk: Disk) -> None:
    build(disk, make_entries(1, 60), watermark=59)
    wal, _ = reopen(disk)
    before = segments(disk)
    with pytest.raises(InvariantViolation):
        wal.compact(30)  # no snapshot covers it yet
    wal.save_snapshot(SnapshotMeta(index=30, term=1, conf=CONF), b"s")
    wal.compact(30)
    after = segments(disk)
    assert len(after) < len(before)
    assert int(after[0][:20]) <= 31 and int(after[1][:20]) > 31  # the straddling segment is kept
    wal.close()
    _, recovered = reopen(disk)
    assert recovered.entries == make_entries(31, 60) and not recovered.repairing, recovered.reasons


def test_only_two_snapshots_are_kept(disk: Disk) -> None:
    build(disk, make_entries(1, 40), watermark=39)
    wal, _ = reopen(disk)
    for index in (10, 20, 30):
        wal.save_snapshot(SnapshotMeta(index=index, term=1, conf=CONF), b"x")
    assert len(disk.listdir("snapshots")) == 2


def test_encoder_matches_the_codec(disk: Disk) -> None:
    from jsraft.codec.records import Kind, encode_record

    entry = Entry(7, 3, EntryType.CONF_CHANGE, b"payload")
    body = bytes([EntryType.CONF_CHANGE]) + (2).to_bytes(8, "little") + b"payload"
    assert encode_entry(entry, 2) == encode_record(Kind.WAL_ENTRY, 7, 3, body)


class CountingDisk:
    """Wraps a disk and counts writes and fsyncs, to check the shape of group commit."""

    def __init__(self, inner: Disk) -> None:
        self.inner, self.writes, self.syncs = inner, 0, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def open(self, path: str, *, create: bool = False) -> object:
        handle = self.inner.open(path, create=create)
        outer = self

        class Counted:
            def __getattr__(self, name: str) -> object:
                return getattr(handle, name)

            def append(self, data: bytes) -> int:
                outer.writes += 1
                return handle.append(data)

            def sync(self) -> None:
                outer.syncs += 1
                handle.sync()

        return Counted()


def test_group_commit_one_write_per_append_one_fsync_per_file(disk: Disk) -> None:
    counting = CountingDisk(disk)
    wal, _ = Wal.open(counting, segment_bytes=1 << 20)  # type: ignore[arg-type]
    wal.append(make_entries(1, 2))
    wal.sync()
    counting.writes = counting.syncs = 0
    for lo in range(2, 1002, 100):
        wal.append(make_entries(lo, lo + 100))
    wal.sync()
    assert counting.writes == 10 and counting.syncs == 1
