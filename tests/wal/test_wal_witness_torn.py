"""A hard-state witness write torn by a power cut inside its fsync is not damage (issue #14).

Method: on `SimDisk`, a WAL (hard-state file version 2) runs a few synced cycles; then `arm_power_cut` makes
the next fsync of `hardstate` raise before anything of that write is durable, and a torn crash keeps a
random prefix of the slot being written. The write never returned, so nothing it held was acknowledged:
reopening must report no damage (`damage_findings()` empty) and not repairing, and keep every entry and the
hard state of the last synced cycle. Three writes are cut, each over many seeds (different torn prefixes):
  1. the first slot write after the file was created (the first cycle's witness);
  2. the next slot write of a later cycle (its witness, after the cycle's segment record);
  3. the checkpoint `compact()` took before removing segments (seed 5 of the register simulator with
     `--faults all` found this one: the checkpoint carried no state the log lacked, so no newer log record
     covered the torn slot and the replica restarted repairing).
A bad slot the log does not cover is still damage (a rotted slot: `test_wal_corruption.py`); the last test
here checks that a torn write to the witness when it is *behind* the log is covered by the log record.
"""

from __future__ import annotations

import pytest
from wal_helpers import TearInsideTheWrite, make_entries

from jsraft.raft.types import ConfState, HardState, SnapshotMeta
from jsraft.testing.simdisk import SimDisk, SimPowerCut
from jsraft.wal import Wal
from jsraft.wal.format import HARD_STATE_FILE

SEGMENT_BYTES = 600
CONF = ConfState(voters=("n1", "n2", "n3"), learners=())


def _disk(seed: int) -> SimDisk:
    return SimDisk(TearInsideTheWrite(seed), corruption_allowed=False)


def _cycle(wal: Wal, lo: int, count: int, term: int = 1) -> HardState:
    wal.append(make_entries(lo, lo + count, term=term))
    hs = HardState(current_term=term, voted_for="n1", acked_watermark=lo + count - 1)
    wal.save_hard_state(hs)
    return hs


def _synced_cycles(seed: int, count: int) -> tuple[SimDisk, Wal, int]:
    """`count` synced cycles of 4 entries on a fresh WAL; returns the disk, the open WAL and the next index."""
    root = _disk(seed)
    wal, _ = Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)
    lo = 1
    for _ in range(count):
        _cycle(wal, lo, 4)
        wal.sync()
        lo += 4
    return root, wal, lo


def _cut_and_reopen(root: SimDisk, action, torn: bool = True) -> tuple[Wal, object]:
    root.sub("g").arm_power_cut(HARD_STATE_FILE)
    with pytest.raises(SimPowerCut):
        action()
    root.crash(torn=torn)
    return Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)


def _assert_clean(recovered, hs: HardState, last_index: int) -> None:
    assert recovered.damage_findings() == (), recovered.reasons
    assert not recovered.repairing, recovered.reasons
    assert recovered.hard_state == hs
    snapshot_index = recovered.snapshot[0].index if recovered.snapshot is not None else 0
    assert max((entry.index for entry in recovered.entries), default=snapshot_index) >= last_index


@pytest.mark.parametrize("seed", range(20))
def test_a_torn_first_slot_write_is_not_damage(seed: int) -> None:
    root = _disk(seed)
    wal, _ = Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)
    _cycle(wal, 1, 3)
    _, recovered = _cut_and_reopen(root, wal.sync)
    # The segment record was fsynced before the witness: the cycle's hard state is durable in the log.
    _assert_clean(recovered, HardState(current_term=1, voted_for="n1", acked_watermark=3), 3)


@pytest.mark.parametrize("seed", range(20))
def test_a_torn_next_slot_write_is_not_damage(seed: int) -> None:
    root, wal, lo = _synced_cycles(seed, 2 + seed % 5)
    hs = _cycle(wal, lo, 4, term=2)
    _, recovered = _cut_and_reopen(root, wal.sync)
    _assert_clean(recovered, hs, lo + 3)


def _cycles_then_snapshot(seed: int) -> tuple[SimDisk, Wal, HardState, int]:
    """A few synced cycles of 4 entries, then a snapshot 3 below the end (not compacted yet); returns the disk,
    the open WAL, the last hard state and the next index."""
    root = _disk(seed)
    wal, _ = Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)
    lo, hs = 1, HardState()
    for _ in range(6 + seed % 4):
        hs = _cycle(wal, lo, 4)
        wal.sync()
        lo += 4
    wal.save_snapshot(SnapshotMeta(index=lo - 3, term=1, conf=CONF), b"state")
    return root, wal, hs, lo


@pytest.mark.parametrize("seed", range(20))
def test_a_torn_compaction_checkpoint_is_not_damage(seed: int) -> None:
    root, wal, hs, lo = _cycles_then_snapshot(seed)
    wal, recovered = _cut_and_reopen_or_compact(root, wal, lo - 3)
    _assert_clean(recovered, hs, lo - 1)
    assert wal.hard_state == hs


def _cut_and_reopen_or_compact(root: SimDisk, wal: Wal, index: int):
    """Compact with a power cut armed on the witness. The witness already holds the newest hard state
    (written by the last `sync`), so compaction needs no checkpoint; if it took one, the cut tears it."""
    root.sub("g").arm_power_cut(HARD_STATE_FILE)
    try:
        wal.compact(index)
    except SimPowerCut:
        pass
    root.crash(torn=True)
    return Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)


@pytest.mark.parametrize("seed", range(20))
def test_a_torn_checkpoint_of_a_witness_behind_the_log_is_covered(seed: int) -> None:
    """A crash after a cycle's segment fsync but before its witness leaves the witness behind the log;
    compaction then must checkpoint (the removed segment may hold the only copy), and if that checkpoint
    tears, the log record it copied still covers it."""
    root = _disk(seed)
    wal, _ = Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)
    lo = 1
    for _ in range(5):
        _cycle(wal, lo, 4)
        wal.sync()
        lo += 4
    hs = _cycle(wal, lo, 4, term=2)
    lo += 4
    # Nothing of the witness write survives: both slots verify, and the witness lags the log's newest record
    # (a torn slot would not do: recovery rewrites a bad slot at once).
    wal, _ = _cut_and_reopen(root, wal.sync, torn=False)
    assert wal.hard_state == hs
    wal.save_snapshot(SnapshotMeta(index=lo - 1, term=2, conf=CONF), b"state")
    root.sub("g").arm_power_cut(HARD_STATE_FILE)
    with pytest.raises(SimPowerCut):
        wal.compact(lo - 1)
    root.crash(torn=True)
    _, recovered = Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)
    _assert_clean(recovered, hs, lo - 1)


@pytest.mark.parametrize("seed", range(20))
def test_recoverys_own_torn_witness_write_is_not_damage(seed: int) -> None:
    """A crash between a snapshot and its compaction leaves covered segments, which the next open removes
    after persisting the hard state. A power cut tearing that write must not read as damage: recovery puts
    the hard state in the log first, as every cycle does, so the log covers the torn slot."""
    root, wal, hs, lo = _cycles_then_snapshot(seed)
    wal.close()
    wal, recovered = _cut_and_reopen(root, lambda: Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES))
    _assert_clean(recovered, hs, lo - 1)
    wal.close()
    _, again = Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)
    _assert_clean(again, hs, lo - 1)


@pytest.mark.parametrize("seed", range(20))
def test_a_torn_checkpoint_of_a_conflict_truncation_is_not_damage(seed: int) -> None:
    """`truncate_from` checkpoints the lowered watermark and the cut's log end before it cuts (rule R7). That
    witness write carried a state no log record held, so a power cut tearing it left a slot nothing covered:
    damage after a crash that lost nothing acknowledged (stream simulator seed 684). The hard state now goes
    into the log first; a cut inside the witness write leaves the log record, and the entries the cut would
    have removed are only above the lowered watermark (the leader's next append truncates them again)."""
    root, wal, lo = _synced_cycles(seed, 2 + seed % 4)
    cut = lo - 2  # the last cycle's last two entries conflict with a new leader's
    _, recovered = _cut_and_reopen(root, lambda: wal.truncate_from(cut))
    assert recovered.damage_findings() == (), recovered.reasons
    assert not recovered.repairing, recovered.reasons
    assert recovered.hard_state == HardState(current_term=1, voted_for="n1", acked_watermark=cut - 1)
    assert max(entry.index for entry in recovered.entries) >= cut - 1
