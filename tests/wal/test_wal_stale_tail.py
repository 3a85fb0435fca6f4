"""A rolled-back chunk that brings back an entry a truncation removed is not served as current log (#14).

Method: on real files (`OsDisk`) and on `SimDisk` (the `disk` fixture), a WAL writes entries 1..3 and a
hard state acknowledging them, then entry 4 (term 1), and the segment's bytes are copied at that moment.
A conflict truncation then removes entry 4 (`truncate_from(4)`: the witness checkpoint, the cut, the hard
state appended again at the cut), and a cycle of term 2 saves a hard state that still acknowledges 1..3.
The segment's first 4 KiB chunk is then put back as it was in the copy, zero-filled to the file's size (a
lost write: SimDisk's `rollback_chunk`), so entry 4 (term 1), whose record verifies and whose chain to entry
3 verifies, lies again where the newer hard-state records were, followed by zeros that look like a torn tail.
This is seeds 115 and 245 of `test_wal_corruption.py`, byte for byte in kind. Entry 4 was never acknowledged
after the truncation and the newest hard state says the log ended at 3 when it was saved: reopening must
not return entry 4, must keep 1..3 and the term-2 hard state, must lose nothing acknowledged (not
repairing), must say what it cut, and must have cut it durably (a second reopen finds a clean log).

Also: a stale stretch that still reaches the log end the hard state names, but with another term there (the
truncated entries 4..5 of term 2 rolled back over their term-3 replacements), is cut to the watermark
(R7b); and a stale entry followed by an intact hard-state record whose log end is below it (R7a, bytes
written by hand) is reported as corruption and left out, the log resuming after the record.

A power cut tearing the hard-state write that follows the cut (recovery persists it) is no damage either:
the next open finds the same clean log (on SimDisk, the tear inside the witness write). When the cut takes
the newest hard state's own record (its witness write never happened), a power cut right after the cut
must not lose that hard state's term and vote: recovery puts it in the witness before cutting.

Controls: the same history without the rollback reopens clean; entries appended after the newest
hard-state record and never vouched for by a later one (a cycle whose record was torn) are kept, because
they lie after the record the newest hard state was saved after.
"""

from __future__ import annotations

import random

import pytest
from wal_helpers import TearInsideTheWrite, append_raw, build, make_entries, segments

from jsraft.disk import Disk
from jsraft.raft.types import HardState
from jsraft.wal import Wal
from jsraft.testing.simdisk import SimDisk, SimPowerCut
from jsraft.wal.format import HARD_STATE_FILE, WAL_DIR, LogEnd, encode_entry, encode_wal_hard_state
from jsraft.wal.recovery import TORN_TAIL_REASON

SEGMENT_BYTES = 1 << 20  # one segment: the rolled-back chunk is its first
CHUNK_BYTES = 4096


def _history(disk: Disk) -> tuple[str, bytes]:
    """Entries 1..3 acknowledged, entry 4 written then truncated away, a term-2 hard state; returns the
    segment's name and its bytes from when entry 4 was durable."""
    wal, _ = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    wal.append(make_entries(1, 4, term=1))
    wal.save_hard_state(HardState(current_term=1, acked_watermark=3))
    wal.sync()
    wal.append(make_entries(4, 5, term=1, size=30))
    wal.sync()
    (name,) = segments(disk)
    old = disk.read_file(f"{WAL_DIR}/{name}")
    wal.truncate_from(4)
    wal.save_hard_state(HardState(current_term=2, acked_watermark=3))
    wal.sync()
    wal.close()
    return name, old


def _roll_back_first_chunk(disk: Disk, name: str, old: bytes) -> None:
    handle = disk.open(f"{WAL_DIR}/{name}")
    size = handle.size()
    assert len(old) <= size <= CHUNK_BYTES, "the scenario needs the whole segment in its first chunk"
    handle.pwrite(0, old + bytes(size - len(old)))
    handle.sync()
    handle.close()


def test_rolled_back_truncated_entry_is_cut_not_served(disk: Disk) -> None:
    name, old = _history(disk)
    _roll_back_first_chunk(disk, name, old)
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.entries == make_entries(1, 4, term=1), recovered.reasons
    assert wal.last_index() == 3
    assert not recovered.repairing and not recovered.faulty, recovered.reasons
    assert recovered.hard_state.current_term == 2 and recovered.hard_state.acked_watermark == 3
    assert any("entry 4" in reason or "4..4" in reason for reason in recovered.reasons), recovered.reasons
    assert recovered.damage_findings() == (), recovered.reasons
    wal.close()
    wal, again = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert again.entries == make_entries(1, 4, term=1) and again.reasons == [], again.reasons
    wal.close()


@pytest.mark.parametrize("seed", range(10))
def test_a_power_cut_tearing_the_persist_after_the_cut_is_no_damage(seed: int) -> None:
    root = SimDisk(TearInsideTheWrite(seed), corruption_allowed=False)
    disk = root.sub("g")
    name, old = _history(disk)
    _roll_back_first_chunk(disk, name, old)
    disk.arm_power_cut(HARD_STATE_FILE)
    with pytest.raises(SimPowerCut):
        Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    root.crash(torn=True)
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.entries == make_entries(1, 4, term=1), recovered.reasons
    assert not recovered.repairing and recovered.damage_findings() == (), recovered.reasons
    assert recovered.hard_state.current_term == 2 and recovered.hard_state.acked_watermark == 3
    wal.close()


def test_same_history_without_rollback_reopens_clean(disk: Disk) -> None:
    _history(disk)
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.entries == make_entries(1, 4, term=1) and recovered.reasons == [], recovered.reasons
    wal.close()


def test_entries_after_the_newest_record_are_kept(disk: Disk) -> None:
    """A cycle whose hard-state record never became durable leaves its entries after the record the newest
    hard state was saved after: they are the log's tail, not stale, and stay (nothing vouches for them,
    nothing needs to: they were never acknowledged)."""
    _history(disk)
    wal, _ = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    wal.append(make_entries(4, 6, term=2))
    wal.sync()  # no hard state saved: as if the cycle's record was torn off
    wal.close()
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.entries == make_entries(1, 4, term=1) + make_entries(4, 6, term=2), recovered.reasons
    assert not any(reason.startswith(TORN_TAIL_REASON) for reason in recovered.reasons)
    assert recovered.reasons == [] and not recovered.repairing
    wal.close()


def test_a_stale_version_reaching_the_log_end_is_cut_to_the_watermark(disk: Disk) -> None:
    wal, _ = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    wal.append(make_entries(1, 4, term=1))
    wal.save_hard_state(HardState(current_term=2, acked_watermark=3))
    wal.sync()
    wal.append(make_entries(4, 6, term=2))
    wal.sync()
    (name,) = segments(disk)
    old = disk.read_file(f"{WAL_DIR}/{name}")
    wal.truncate_from(4)
    wal.append(make_entries(4, 6, term=3, size=40))
    wal.save_hard_state(HardState(current_term=3, acked_watermark=3))  # 4..5 written, not acknowledged
    wal.sync()
    wal.close()
    _roll_back_first_chunk(disk, name, old)
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.entries == make_entries(1, 4, term=1), recovered.reasons
    assert not recovered.repairing and recovered.damage_findings() == (), recovered.reasons
    assert any("entry 5 is faulty or of term 2, not 3" in reason for reason in recovered.reasons)
    wal.close()


def test_a_stale_entry_before_an_intact_record_is_corruption_left_out(disk: Disk) -> None:
    build(disk, make_entries(1, 4, term=1), watermark=3, segment_bytes=SEGMENT_BYTES)
    (name,) = segments(disk)
    stale = make_entries(4, 5, term=1)[0]
    current = make_entries(4, 5, term=2)[0]
    sequence = 1000  # newer than anything the WAL wrote: this record is the newest hard state
    record = encode_wal_hard_state(HardState(current_term=2, acked_watermark=3), sequence, 1,
                                   LogEnd(3, 1, sequence))
    append_raw(disk, f"{WAL_DIR}/{name}", encode_entry(stale, 1) + record + encode_entry(current, 1))
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.entries == make_entries(1, 4, term=1) + [current], recovered.reasons
    assert recovered.repairing and not recovered.faulty
    assert any("stale entries 4..4 before a hard-state record" in reason for reason in recovered.reasons)
    assert wal.entries(4, 5) == [current]
    wal.close()


class _Stop(Exception):
    """The power goes out (raised instead of an fsync)."""


class _PowerCutAtSync:
    """`disk`, except that the `nth` fsync of the file `path` raises `_Stop` instead of syncing."""

    def __init__(self, disk: Disk, path: str, nth: int) -> None:
        self._disk, self._path, self._left = disk, path, nth

    def open(self, path: str, *, create: bool = False) -> object:
        handle = self._disk.open(path, create=create)
        if path != self._path:
            return handle
        outer = self

        class _Handle:
            def __getattr__(self, name: str) -> object:
                return getattr(handle, name)

            def sync(self) -> None:
                outer._left -= 1
                if outer._left == 0:
                    raise _Stop()
                handle.sync()

        return _Handle()

    def __getattr__(self, name: str) -> object:
        return getattr(self._disk, name)


def test_a_cut_that_takes_the_newest_record_keeps_its_hard_state() -> None:
    """R7b where the newest hard state is a log record after the stale entry (its witness write never
    happened): the cut removes that record, so recovery puts its hard state in the witness first. A power
    cut right after the cut, before the hard state is written to the log again, keeps its term and vote."""
    root = SimDisk(random.Random(3), corruption_allowed=False)
    disk = root.sub("g")
    build(disk, make_entries(1, 4, term=1), watermark=3, segment_bytes=SEGMENT_BYTES)
    (name,) = segments(disk)
    newest = HardState(current_term=5, voted_for="n3", acked_watermark=3)
    sequence = 1000  # newer than the witness: this record is the newest hard state
    record = encode_wal_hard_state(newest, sequence, 1, LogEnd(4, 2, sequence))  # entry 4 was of term 2
    append_raw(disk, f"{WAL_DIR}/{name}", encode_entry(make_entries(4, 5, term=1)[0], 1) + record)
    # fsync 1 of the segment: the cut; 2: the hard state appended again after it (the power goes out).
    with pytest.raises(_Stop):
        cutting = _PowerCutAtSync(disk, f"{WAL_DIR}/{name}", 2)
        Wal.open(cutting, segment_bytes=SEGMENT_BYTES)  # type: ignore[arg-type]
    root.crash()
    wal, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert recovered.entries == make_entries(1, 4, term=1) and recovered.hard_state == newest, recovered.reasons
    assert not recovered.repairing and recovered.damage_findings() == (), recovered.reasons
    wal.close()
