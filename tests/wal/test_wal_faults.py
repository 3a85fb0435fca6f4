"""Tests for the WAL's recovery rules (DESIGN.md §4; rules R1-R5 in `jsraft.wal.scan`).

Method: a log is written and synced, then damaged through the `Disk` protocol while the WAL is closed —
a cut-off tail, garbage after the tail, a flipped bit, a deleted segment, a damaged hard-state slot or
snapshot, an old record written back over a newer one — on both `OsDisk` and `SimDisk`. Each test states
which rule applies and checks all of `Recovered`: which entries come back, which indexes are faulty,
whether the replica is repairing and why, and what (if anything) was cut. Repair tests then hand the
original entries to `replace` and check that both the open WAL and a fresh reopen see a clean log.
"""

from __future__ import annotations

import attrs
import pytest
from wal_helpers import append_raw, build, cut, flip, flip_entry, locate, make_entries, reopen, segments

from jsraft.disk import Disk
from jsraft.errors import BadFileFormat, CorruptRecord, InvariantViolation
from jsraft.raft.types import ConfState, HardState, SnapshotMeta
from jsraft.wal import Recovered, Wal
from jsraft.wal.format import HARD_STATE_FILE, HARD_STATE_SLOT_OFFSETS, WAL_DIR

CONF = ConfState(voters=("n1", "n2", "n3"))
LOG = make_entries(1, 30, term=2)


def assert_repairing(recovered: Recovered, fragment: str) -> None:
    assert recovered.repairing, recovered.reasons
    assert any(fragment in reason for reason in recovered.reasons), recovered.reasons


# --- R1: torn tail ---------------------------------------------------------------------------------


def _build_unvouched(disk: Disk, vouched: int, watermark: int) -> None:
    """LOG, with a hard state saved after entry `vouched` only: the entries after it are a cycle whose
    hard-state record never became durable, as a crash in its fsync leaves them (R1 may tear them)."""
    build(disk, LOG[:vouched], watermark=watermark)
    wal, _ = reopen(disk)
    wal.append(LOG[vouched:])
    wal.sync()
    wal.close()


def test_torn_tail_above_watermark_is_cut(disk: Disk) -> None:
    _build_unvouched(disk, vouched=26, watermark=20)
    name, offset, length = locate(disk, 29)
    cut(disk, f"{WAL_DIR}/{name}", offset + length - 7)
    wal, recovered = reopen(disk)
    assert recovered.entries == LOG[:28] and recovered.faulty == frozenset()
    assert not recovered.repairing and recovered.torn_tail_bytes_cut == length - 7
    assert disk.file_size(f"{WAL_DIR}/{name}") == offset  # physically cut, so appends follow good bytes
    wal.append(make_entries(29, 31, term=3))
    wal.sync()
    wal.close()
    assert reopen(disk)[1].entries == LOG[:28] + make_entries(29, 31, term=3)


def test_a_tail_lost_below_the_vouched_log_end_is_cut_to_the_watermark(disk: Disk) -> None:
    """R7b (`vouch`): the hard state was saved with entry 29 durable, so a tail cut inside 29 is damage at
    rest, not a torn write. What is left above the watermark cannot be trusted (a rolled-back chunk may
    have left a stale version there), and none of it was acknowledged: the log keeps 1..20, not repairing."""
    build(disk, LOG, watermark=20)
    name, offset, length = locate(disk, 29)
    cut(disk, f"{WAL_DIR}/{name}", offset + length - 7)
    wal, recovered = reopen(disk)
    assert recovered.entries == LOG[:20] and recovered.faulty == frozenset() and not recovered.repairing
    assert any(reason.startswith("stale tail cut") and "entries 21..28" in reason for reason in recovered.reasons)
    assert recovered.damage_findings() == (), recovered.reasons
    assert wal.last_index() == 20
    wal.append(make_entries(21, 23, term=2))  # after the cut: kept with no hard state saved after them
    wal.sync()
    wal.close()
    _, again = reopen(disk)
    assert again.entries == LOG[:20] + make_entries(21, 23, term=2) and again.reasons == [], again.reasons


def test_garbage_after_the_last_record_above_watermark_is_cut(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    append_raw(disk, f"{WAL_DIR}/{segments(disk)[-1]}", b"\x00" * 100)
    _, recovered = reopen(disk)
    assert recovered.entries == LOG and recovered.torn_tail_bytes_cut == 100 and not recovered.repairing


def test_torn_new_segment_with_only_a_partial_header_is_removed(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    handle = disk.open(f"{WAL_DIR}/00000000000000000030.log", create=True)
    handle.append(b"JSRF\x01")
    handle.sync()
    handle.close()
    _, recovered = reopen(disk)
    assert recovered.entries == LOG and not recovered.repairing, recovered.reasons
    assert "00000000000000000030.log" not in segments(disk)


def test_torn_first_record_leaves_an_empty_segment_that_appends_reuse(disk: Disk) -> None:
    _build_unvouched(disk, vouched=15, watermark=10)
    last = segments(disk)[-1]
    first = int(last[:20])
    assert first > 15, "the torn segment holds only entries no hard state vouched for"
    name, offset, _ = locate(disk, first)
    cut(disk, f"{WAL_DIR}/{name}", offset + 5)
    wal, recovered = reopen(disk)
    assert recovered.torn_tail_bytes_cut == 5 and wal.last_index() == first - 1
    # A snapshot at exactly the end of the log, then compaction: appends continue in the empty segment.
    wal.save_snapshot(SnapshotMeta(index=first - 1, term=2, conf=CONF), b"snap")
    wal.compact(first - 1)
    wal.append(make_entries(first, first + 3, term=3))
    wal.sync()
    wal.close()
    _, again = reopen(disk)
    assert again.entries == make_entries(first, first + 3, term=3) and not again.repairing, again.reasons


def test_same_bad_tail_below_watermark_is_corruption_not_cut(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    name, offset, length = locate(disk, 29)
    cut(disk, f"{WAL_DIR}/{name}", offset + length - 7)
    damaged = disk.read_file(f"{WAL_DIR}/{name}")
    wal, recovered = reopen(disk)
    assert_repairing(recovered, "corrupt record at index 29")
    assert recovered.entries == LOG[:28] and recovered.faulty == {29} and recovered.torn_tail_bytes_cut == 0
    # Nothing truncated (the hard state is appended again after it: its record went with the cut, R7).
    assert disk.read_file(f"{WAL_DIR}/{name}")[: len(damaged)] == damaged
    assert wal.last_index() == 29 and wal.term(29) is None
    # Appending after the damage keeps its identity: index 29 is still faulty after the next restart.
    wal.append(make_entries(30, 33, term=2))
    wal.sync()
    wal.close()
    _, again = reopen(disk)
    assert again.faulty == {29} and again.entries == LOG[:28] + make_entries(30, 33, term=2)


def test_bad_tail_of_a_non_last_segment_is_corruption(disk: Disk) -> None:
    build(disk, LOG, watermark=0)
    middle = segments(disk)[2]
    size = disk.file_size(f"{WAL_DIR}/{middle}")
    cut(disk, f"{WAL_DIR}/{middle}", size - 5)
    _, recovered = reopen(disk)
    lost = int(segments(disk)[3][:20]) - 1  # the last index of the damaged segment
    assert_repairing(recovered, f"corrupt record at index {lost}")
    assert recovered.faulty == {lost}
    assert recovered.entries == [entry for entry in LOG if entry.index != lost]


# --- R2: corruption keeps identity ------------------------------------------------------------------


def test_bit_flip_in_a_middle_record_marks_only_that_index(disk: Disk) -> None:
    build(disk, LOG, watermark=10)
    flip_entry(disk, 12)
    wal, recovered = reopen(disk)
    assert_repairing(recovered, "corrupt record at index 12")
    assert recovered.faulty == {12} and recovered.torn_tail_bytes_cut == 0
    assert recovered.entries == LOG[:11] + LOG[12:]  # everything after the damage is kept
    assert wal.term(12) == 2  # known from the next entry's prev_term
    with pytest.raises(CorruptRecord):
        wal.entries(10, 14)
    assert wal.entries(13, 30) == LOG[12:]


def test_flipped_length_field_keeps_the_following_records(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    name, offset, _ = locate(disk, 8)
    flip(disk, f"{WAL_DIR}/{name}", offset + 1, 0x40)
    _, recovered = reopen(disk)
    assert recovered.faulty == {8} and recovered.entries == LOG[:7] + LOG[8:]


def test_replace_repairs_faulty_entries_durably(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    for index in (3, 12, 29):
        flip_entry(disk, index)
    wal, recovered = reopen(disk)
    assert recovered.faulty == {3, 12, 29}
    wal.replace([LOG[2], LOG[11]])
    assert wal.faulty() == {29} and wal.entries(1, 29) == LOG[:28]
    wal.replace([LOG[28]])
    assert wal.faulty() == frozenset() and wal.entries(1, 30) == LOG
    wal.append(make_entries(30, 32, term=2))
    wal.sync()
    wal.close()
    wal, again = reopen(disk)
    assert again.faulty == frozenset() and again.entries == LOG + make_entries(30, 32, term=2)
    assert again.repairing  # persisted until the Raft core decides it is repaired
    wal.save_hard_state(attrs.evolve(again.hard_state, repairing=False))
    wal.sync()
    wal.close()
    assert not reopen(disk)[1].repairing


def test_replace_in_the_last_segment_keeps_a_still_faulty_tail(disk: Disk) -> None:
    build(disk, LOG, watermark=29, segment_bytes=1 << 20)
    flip_entry(disk, 12)
    flip_entry(disk, 29)  # the damaged tail is below the watermark: faulty, not cut
    wal, recovered = reopen(disk, segment_bytes=1 << 20)
    assert recovered.faulty == {12, 29}
    wal.replace([LOG[11]])  # rewrites the segment that also holds the damaged tail
    assert wal.faulty() == {29}
    wal.close()
    wal, again = reopen(disk, segment_bytes=1 << 20)
    assert again.faulty == {29} and again.torn_tail_bytes_cut == 0
    wal.replace([LOG[28]])
    assert wal.faulty() == frozenset() and wal.entries(1, 30) == LOG


def test_replace_contract(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    flip_entry(disk, 12)
    wal, _ = reopen(disk)
    with pytest.raises(InvariantViolation):
        wal.replace([LOG[10]])  # not faulty
    with pytest.raises(InvariantViolation):
        wal.replace(make_entries(12, 13, term=3))  # conflicts with the term its neighbour names


def test_stale_record_written_back_is_detected_by_the_chain(disk: Disk) -> None:
    build(disk, make_entries(1, 11, term=1), watermark=10, segment_bytes=1 << 20)
    name, offset, length = locate(disk, 8)
    stale = disk.read_file(f"{WAL_DIR}/{name}")[offset : offset + length]
    wal, _ = reopen(disk)
    wal.truncate_from(8)
    wal.append(make_entries(8, 11, term=2))
    wal.save_hard_state(HardState(current_term=2, voted_for="n1", acked_watermark=10))  # acknowledged
    wal.sync()
    wal.close()
    handle = disk.open(f"{WAL_DIR}/{name}")  # a lost write: the old record reappears, CRC and all
    handle.pwrite(offset, stale)
    handle.sync()
    handle.close()
    wal, recovered = reopen(disk)
    assert_repairing(recovered, "log matching broken between 8 and 9")
    assert recovered.faulty == {8, 9}
    assert recovered.entries == make_entries(1, 8, term=1) + make_entries(10, 11, term=2)
    wal.replace(make_entries(8, 10, term=2))
    assert wal.faulty() == frozenset()
    assert wal.entries(1, 11) == make_entries(1, 8, term=1) + make_entries(8, 11, term=2)


def test_whole_log_rolled_back_to_a_consistent_old_version_is_detected(disk: Disk) -> None:
    build(disk, make_entries(1, 11, term=1), watermark=10, segment_bytes=1 << 20)
    name = segments(disk)[0]
    old_version = disk.read_file(f"{WAL_DIR}/{name}")
    wal, _ = reopen(disk, segment_bytes=1 << 20)
    wal.truncate_from(5)
    wal.append(make_entries(5, 11, term=2))
    wal.sync()
    wal.save_hard_state(HardState(current_term=2, acked_watermark=10))
    wal.sync()
    wal.close()
    # The old version: every record verifies and chains, so only the watermark term can tell.
    handle = disk.open(f"{WAL_DIR}/{name}")
    handle.pwrite(0, old_version)
    handle.sync()
    handle.close()
    _, recovered = reopen(disk)
    assert_repairing(recovered, "entry at acked watermark 10 has term 1, but term 2 was acknowledged")
    assert recovered.faulty == frozenset()


def test_crc_failure_found_while_running_becomes_faulty(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    wal, _ = reopen(disk)
    flip_entry(disk, 5)
    with pytest.raises(CorruptRecord):
        wal.entries(1, 10)
    assert wal.faulty() == {5}
    wal.replace([LOG[4]])
    assert wal.entries(1, 30) == LOG


def test_damaged_segment_header_is_corruption_but_entries_survive(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    flip(disk, f"{WAL_DIR}/{segments(disk)[1]}", 12)
    _, recovered = reopen(disk)
    assert recovered.repairing and recovered.entries == LOG and recovered.faulty == frozenset()


def test_newer_format_version_is_refused(disk: Disk) -> None:
    build(disk, LOG)
    handle = disk.open(f"{WAL_DIR}/{segments(disk)[0]}")
    handle.pwrite(4, b"\x09")
    handle.close()
    with pytest.raises(BadFileFormat):
        reopen(disk)


# --- R3: missing segments and short logs -------------------------------------------------------------


def test_missing_middle_segment_is_repairing_with_identity(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    names = segments(disk)
    lo, hi = int(names[2][:20]), int(names[3][:20])
    disk.remove(f"{WAL_DIR}/{names[2]}")
    wal, recovered = reopen(disk)
    assert_repairing(recovered, f"indexes {lo}..{hi - 1} missing before segment {names[3]}")
    assert recovered.faulty == set(range(lo, hi))
    assert recovered.entries == [entry for entry in LOG if not lo <= entry.index < hi]
    wal.replace(LOG[lo - 1 : hi - 1])
    wal.close()
    _, again = reopen(disk)
    assert again.faulty == frozenset() and again.entries == LOG


def test_missing_first_segment_is_repairing_and_repairable(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    first = segments(disk)[0]
    second = int(segments(disk)[1][:20])
    disk.remove(f"{WAL_DIR}/{first}")
    wal, recovered = reopen(disk)
    assert_repairing(recovered, "missing")
    assert recovered.faulty == set(range(1, second))
    wal.replace(LOG[: second - 1])
    wal.close()
    assert reopen(disk)[1].entries == LOG


def test_log_shorter_than_watermark_is_repairing(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    last = segments(disk)[-1]
    lost_from = int(last[:20])
    disk.remove(f"{WAL_DIR}/{last}")
    _, recovered = reopen(disk)
    assert_repairing(recovered, f"log recovered to {lost_from - 1} below acked watermark 29")
    assert recovered.entries == LOG[: lost_from - 1] and recovered.faulty == frozenset()


# --- Hard state ------------------------------------------------------------------------------------


def hs_slot_flip(disk: Disk, slot: int) -> None:
    flip(disk, HARD_STATE_FILE, HARD_STATE_SLOT_OFFSETS[slot] + 30)


def save_two(disk: Disk) -> None:
    """Two durable hard states: the second, (5, n3), is in the log's last record and in witness slot 1."""
    wal, _ = Wal.open(disk)
    wal.save_hard_state(HardState(current_term=4, voted_for="n2"))  # record 2; witness sequence 4, slot 0
    wal.sync()
    wal.save_hard_state(HardState(current_term=5, voted_for="n3"))  # record 5; witness sequence 7, slot 1
    wal.sync()
    wal.close()


def test_bad_newest_slot_covered_by_the_log_loses_nothing(disk: Disk) -> None:
    # A power cut mid-write of the witness, or rot after it: the log's record, fsynced before the witness
    # write began, holds the same hard state, so this is neither damage nor a lost vote (issue #14).
    save_two(disk)
    hs_slot_flip(disk, 1)
    wal, recovered = Wal.open(disk)
    assert recovered.hard_state == HardState(current_term=5, voted_for="n3")
    assert not recovered.repairing and recovered.damage_findings() == ()
    assert any("slot 1" in reason for reason in recovered.reasons)
    wal.close()
    _, again = Wal.open(disk)  # the bad slot was rewritten at open
    assert again.hard_state == HardState(current_term=5, voted_for="n3") and again.reasons == []


def test_bad_newest_slot_the_log_does_not_cover_is_damage(disk: Disk) -> None:
    # The witness's newest slot is unreadable and the log's last record, which held the same hard state,
    # is gone too (cut at rest): the older slot may have forgotten a vote, so it is damage, which makes
    # the replica repairing and fences its vote (`Recovered.damage_findings`).
    save_two(disk)
    hs_slot_flip(disk, 1)
    name = segments(disk)[-1]
    cut(disk, f"{WAL_DIR}/{name}", disk.file_size(f"{WAL_DIR}/{name}") - 5)
    _, recovered = Wal.open(disk)
    assert recovered.hard_state == HardState(current_term=4, voted_for="n2")
    assert any("slot 1" in reason for reason in recovered.damage_findings())


def test_damage_in_a_slot_stays_visible_until_the_replica_answers_it(disk: Disk) -> None:
    # The simulator (consumer app, seed 9 with commits announced lazily) found the open healing such a slot
    # with the older slot's state: a crash before the replica's first cycle made its answer durable (the
    # repairing flag, the vote fenced through the node record's ceiling) left two good slots, the next open
    # found nothing wrong, and the replica voted again in the term whose vote it had lost (`double-vote`).
    save_two(disk)
    hs_slot_flip(disk, 1)
    name = segments(disk)[-1]
    cut(disk, f"{WAL_DIR}/{name}", disk.file_size(f"{WAL_DIR}/{name}") - 5)
    for _ in range(3):  # open, write what an open writes (the restate), crash: the damage is still there
        wal, recovered = Wal.open(disk)
        assert any("slot 1" in reason for reason in recovered.damage_findings()), recovered.reasons
        assert recovered.hard_state == HardState(current_term=4, voted_for="n2")
        wal.save_hard_state(attrs.evolve(recovered.hard_state, commit_index=0))  # no vote field changed
        wal.sync()
        wal.close()
    wal, _ = Wal.open(disk)
    answer = HardState(current_term=9, vote_fence_term=9, repairing=True)  # the core's, fenced
    wal.save_hard_state(answer)
    wal.sync()
    wal.close()
    _, after = Wal.open(disk)
    assert after.hard_state == answer and after.damage_findings() == ()


def test_damaged_hard_state_header_is_noted_and_rewritten(disk: Disk) -> None:
    wal, _ = Wal.open(disk)
    wal.save_hard_state(HardState(current_term=3, voted_for="n2"))
    wal.sync()
    wal.close()
    flip(disk, HARD_STATE_FILE, 1)
    wal, recovered = Wal.open(disk)
    assert recovered.hard_state == HardState(current_term=3, voted_for="n2") and not recovered.repairing
    assert any("header" in reason for reason in recovered.reasons)
    wal.close()
    assert Wal.open(disk)[1].reasons == []


def test_both_hard_state_slots_bad_is_repairing_with_a_safe_fallback(disk: Disk) -> None:
    build(disk, make_entries(1, 10, term=3) + make_entries(10, 15, term=7), watermark=14, term=9)
    hs_slot_flip(disk, 0)
    hs_slot_flip(disk, 1)
    _, recovered = reopen(disk)
    assert_repairing(recovered, "hard state lost")
    # The log's hard-state records carry the term too (term 9, above every entry's).
    # The vote in it is unknown: no vote recorded, and the term fenced (no vote in it again).
    assert recovered.hard_state.current_term == 9 and recovered.hard_state.voted_for is None
    assert recovered.hard_state.vote_fence_term == 9
    assert recovered.hard_state.acked_watermark == 14
    assert len(recovered.entries) == 14
    _, again = reopen(disk)  # the fallback, with repairing, was persisted
    assert again.repairing and again.hard_state.vote_fence_term == 9 and again.hard_state.voted_for is None


def test_lost_hard_state_never_cuts_a_tail(disk: Disk) -> None:
    build(disk, LOG, watermark=0)
    name, offset, length = locate(disk, 29)
    cut(disk, f"{WAL_DIR}/{name}", offset + length - 3)
    disk.remove(HARD_STATE_FILE)
    _, recovered = reopen(disk)
    assert recovered.repairing and recovered.torn_tail_bytes_cut == 0 and recovered.faulty == {29}


# --- Snapshots ------------------------------------------------------------------------------------


def test_corrupt_snapshot_is_repairing_and_falls_back_to_an_older_one(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    wal, _ = reopen(disk)
    wal.save_snapshot(SnapshotMeta(index=10, term=2, conf=CONF), b"ten")
    wal.save_snapshot(SnapshotMeta(index=20, term=2, conf=CONF), b"twenty")
    wal.close()
    newest = sorted(disk.listdir("snapshots"))[-1]
    flip(disk, f"snapshots/{newest}", disk.file_size(f"snapshots/{newest}") - 2)
    _, recovered = reopen(disk)
    assert_repairing(recovered, f"snapshot {newest} unreadable")
    assert recovered.snapshot is not None and recovered.snapshot[1] == b"ten"
    assert recovered.entries == LOG[10:]


def test_only_snapshot_unreadable_is_never_silently_nothing(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    wal, _ = reopen(disk)
    wal.save_snapshot(SnapshotMeta(index=20, term=2, conf=CONF), b"twenty")
    wal.compact(20)
    wal.close()
    name = disk.listdir("snapshots")[0]
    cut(disk, f"snapshots/{name}", disk.file_size(f"snapshots/{name}") - 1)
    _, recovered = reopen(disk)
    assert_repairing(recovered, "unreadable")
    assert recovered.snapshot is None
    first_kept = int(segments(disk)[0][:20])
    assert recovered.faulty == set(range(1, first_kept))  # the compacted head is known to be missing
