"""The hard state in the WAL's own records (segment format 2, issue #18): each storage-fault case.

Method: each test writes cycles the way the runtime does (entries, then the hard state, then one `sync`),
damages the files through the `Disk` protocol the way a crash or rot would, reopens the WAL and checks what
recovery decided against DESIGN §4: a torn last record is a crash artefact (cut, the cycle before it is
used, no damage finding); a bad record followed by valid ones is damage (repairing); a hard state newer
than the entries it vouches for is damage; a vote survives restarts and crashes. Every test runs on
`OsDisk` and on `SimDisk` (the `disk` fixture); the crash test uses SimDisk's crash, which drops what was
never synced.
"""

from __future__ import annotations

import random

from wal_helpers import cut, flip, make_entries, segments

from jsraft.codec.records import Kind, scan_records
from jsraft.disk import Disk
from jsraft.raft.types import Entry, HardState
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Wal
from jsraft.wal.format import SEGMENT_KINDS, WAL_DIR

SEGMENT_BYTES = 1 << 20


def cycle(wal: Wal, entries: list[Entry], hs: HardState, *, sync: bool = True) -> None:
    """One Ready cycle as `replica.persist` runs it."""
    wal.append(entries)
    wal.save_hard_state(hs)
    if sync:
        wal.sync()


def hard_state_records(disk: Disk) -> list[tuple[str, int, int]]:
    """`(segment, offset, length)` of every valid hard-state record, in log order."""
    found = []
    for name in sorted(segments(disk)):
        buffer = disk.read_file(f"{WAL_DIR}/{name}")
        found += [(name, r.offset, r.length) for r in scan_records(buffer, 0, SEGMENT_KINDS).records
                  if r.kind == Kind.WAL_HARD_STATE]
    return found


FIRST = HardState(current_term=2, voted_for="n2", commit_index=3, acked_watermark=5)
SECOND = HardState(current_term=3, voted_for="n3", commit_index=5, acked_watermark=8)


def two_cycles(disk: Disk, *, sync_second: bool = True) -> None:
    wal, _ = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    cycle(wal, make_entries(1, 6, term=2), FIRST)
    # Entries of term 2 still (a follower that moved to term 3 and then got the old leader's entries), so
    # a torn second cycle leaves no entry of a term above the first cycle's hard state.
    cycle(wal, make_entries(6, 9, term=2), SECOND, sync=sync_second)
    wal.close()


def test_each_cycle_puts_its_hard_state_after_its_entries_in_the_segment(disk: Disk) -> None:
    two_cycles(disk)
    records = hard_state_records(disk)
    assert len(records) == 2
    _, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.hard_state == SECOND and recovered.reasons == []
    assert [e.index for e in recovered.entries] == list(range(1, 9))


def test_torn_last_hard_state_record_is_cut_and_the_previous_cycle_used(disk: Disk) -> None:
    # The second cycle's write tore inside its hard-state record before the fsync returned: nothing of
    # that cycle was used (the cycle sends only after the sync), so it is a crash artefact, not damage.
    two_cycles(disk, sync_second=False)
    name, offset, length = hard_state_records(disk)[-1]
    cut(disk, f"{WAL_DIR}/{name}", offset + length - 9)
    _, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.torn_tail_bytes_cut == length - 9
    assert recovered.hard_state == FIRST and not recovered.repairing
    assert recovered.damage_findings() == ()
    # The torn cycle's entries verify and lie above the watermark the surviving record vouches for.
    assert [e.index for e in recovered.entries] == list(range(1, 9))


def test_damaged_hard_state_record_followed_by_valid_ones_is_damage(disk: Disk) -> None:
    two_cycles(disk)
    name, offset, length = hard_state_records(disk)[0]
    flip(disk, f"{WAL_DIR}/{name}", offset + length - 2)
    _, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.repairing
    assert any("before a hard-state record" in reason or "corrupt" in reason for reason in recovered.reasons)
    assert recovered.hard_state.current_term == SECOND.current_term  # the newer record (and witness) kept


def test_damaged_entry_before_its_hard_state_record_keeps_its_identity(disk: Disk) -> None:
    # The last entry is rotted; the cycle's hard-state record after it vouches for index 8, so index 8 is
    # known to exist and is faulty (to be fetched from a peer), never silently dropped.
    two_cycles(disk)
    wal, _ = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    wal.close()
    name, offset, _ = hard_state_records(disk)[-1]
    flip(disk, f"{WAL_DIR}/{name}", offset - 3)
    _, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.repairing and 8 in recovered.faulty


def test_hard_state_newer_than_the_entries_it_vouches_for_is_damage(disk: Disk) -> None:
    # A cut at rest took the last cycle's entries *and* its record; the witness, fsynced after the
    # segment, still says 8 entries were acknowledged: the shorter log is a loss, so repairing.
    two_cycles(disk)
    name, offset, _ = hard_state_records(disk)[0]
    cut(disk, f"{WAL_DIR}/{name}", offset + 10)
    _, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.repairing
    assert any("below acked watermark 8" in reason for reason in recovered.reasons)


def test_a_vote_only_cycle_after_entries_is_the_newest_hard_state(disk: Disk) -> None:
    two_cycles(disk)
    wal, _ = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    voted = HardState(current_term=4, voted_for="n1", commit_index=5, acked_watermark=8)
    cycle(wal, [], voted)
    wal.close()
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.hard_state == voted and recovered.reasons == []
    wal.close()


def test_vote_survives_restarts_and_a_crash() -> None:
    disk = SimDisk(random.Random(11))
    group = disk.sub("g")
    wal, _ = Wal.open(group, segment_bytes=SEGMENT_BYTES)
    cycle(wal, make_entries(1, 4, term=5), HardState(current_term=5, voted_for="n2", acked_watermark=3))
    # A later cycle whose fsync never ran: its vote was never sent, and the crash drops it.
    cycle(wal, [], HardState(current_term=6, voted_for="n3", acked_watermark=3), sync=False)
    disk.crash(torn=True)
    for _ in range(3):
        wal, recovered = Wal.open(group, segment_bytes=SEGMENT_BYTES)
        assert recovered.hard_state.current_term == 5 and recovered.hard_state.voted_for == "n2"
        assert recovered.damage_findings() == ()
        wal.close()
        disk.crash(torn=True)
