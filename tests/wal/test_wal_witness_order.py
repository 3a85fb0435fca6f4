"""Why the hard-state witness is a second fsync: the two failures a one-fsync cycle runs into (issue #18).

Method: the WAL makes a cycle durable in two ordered steps — one fsync of the segment (the cycle's entries,
then its `WAL_HARD_STATE` record), then the witness slot file. Any layout that makes one fsync cover both
the entries and a hard-state copy that damage at the end of the log cannot reach (the head-slot design of
`bench/README.md`, "fsyncs per sync publish") has no order between them inside that fsync, so it meets one
of two failures, and each test here pins one of them on `SimDisk`, seed by seed:

  1. The claim reaches the medium before the data (a crash inside the cycle's fsync, SimDisk's `torn`
     rule): the acked watermark is durable above a log whose last cycle tore. That cycle was never
     acknowledged, so any loss finding is false — and a replica that finds one turns repairing, so a
     coordinated power cut can leave every voter repairing and halt the group (issue #14). Checked: a
     crash between `save_hard_state` and the end of `sync` never leaves the replica repairing and keeps
     every entry of an earlier cycle.
  2. The copy outside the tail carries only an older cycle's hard state (the copy of cycle N written in
     cycle N + 1, which never outruns its data): then the last acknowledged cycle is vouched for only by
     the tail itself, and damage at rest that removes that tail — cut, lost segment, rolled-back chunk —
     leaves an older self-consistent log that looks exactly like a crash before the last fsync. Checked:
     each of those faults, aimed at the last synced cycle, leaves the replica repairing or loses nothing.

Both tests pass on the two-fsync WAL; a scratch build of each one-fsync variant failed its test (the
figures are in `bench/README.md`).
"""

from __future__ import annotations

import random

import pytest
from wal_helpers import make_entries

from jsraft.raft.types import Entry, HardState
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Recovered, Wal
from jsraft.wal.format import WAL_DIR

SEGMENT_BYTES = 6000
FAULTS = ("truncate_tail", "lose_file", "rollback_chunk")


def _cycle_writes(wal: Wal, rng: random.Random, written: list[Entry]) -> None:
    """A cycle up to its fsync: a random batch, then the hard state acknowledging it (`written` grows)."""
    lo = len(written) + 1
    batch = make_entries(lo, lo + rng.randint(1, 10), term=1, size=rng.randint(10, 400))
    wal.append(batch)
    written += batch
    wal.save_hard_state(HardState(current_term=1, voted_for="n1", acked_watermark=len(written)))


def _cycles(wal: Wal, rng: random.Random, count: int) -> list[Entry]:
    """`count` synced cycles of random batches, each acknowledged (watermark = its last index)."""
    written: list[Entry] = []
    for _ in range(count):
        _cycle_writes(wal, rng, written)
        wal.sync()
    return written


def _last_segment(disk: SimDisk) -> str:
    return f"{WAL_DIR}/{max(name for name in disk.listdir(WAL_DIR) if name.endswith('.log'))}"


def _lost_silently(recovered: Recovered, written: list[Entry], watermark: int) -> list[int]:
    """Acknowledged indexes that came back missing or different while the replica is not repairing."""
    if recovered.repairing:
        return []
    good = {entry.index: entry for entry in recovered.entries}
    return [entry.index for entry in written[:watermark] if good.get(entry.index) != entry]


@pytest.mark.parametrize("seed", range(60))
def test_a_cycle_torn_after_its_hard_state_was_saved_is_not_damage(seed: int) -> None:
    rng = random.Random(seed)
    root = SimDisk(random.Random(seed), corruption_allowed=False)
    wal, _ = Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)
    written = _cycles(wal, rng, rng.randint(2, 20))
    acked = list(written)
    _cycle_writes(wal, rng, written)
    root.crash(torn=bool(seed % 4))  # the cycle's fsync never returned: nothing of it was acknowledged
    _, recovered = Wal.open(root.sub("g"), segment_bytes=SEGMENT_BYTES)
    assert not recovered.repairing, recovered.reasons
    assert recovered.entries[: len(acked)] == acked, "an entry of an earlier, acknowledged cycle was lost"


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("seed", range(40))
def test_the_last_acknowledged_cycle_lost_at_rest_is_never_silent(seed: int, fault: str) -> None:
    rng = random.Random(seed)
    root = SimDisk(random.Random(seed))
    disk = root.sub("g")
    wal, _ = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    written = _cycles(wal, rng, rng.randint(2, 20))
    name_before, size_before = _last_segment(disk), disk.file_size(_last_segment(disk))
    _cycle_writes(wal, rng, written)
    wal.sync()
    wal.close()
    path = _last_segment(disk)
    size = disk.file_size(path)
    start = size_before if path == name_before else 0  # where the last cycle's bytes begin in this file
    if fault == "truncate_tail":
        applied = disk.truncate_tail(path, size - start)  # exactly the last cycle's bytes
    elif fault == "lose_file":
        applied = disk.lose_file(path)
    else:
        applied = disk.rollback_chunk(path, rng.choice((start, size - 1)))  # where the cycle begins or ends
    if not applied:
        assert fault == "rollback_chunk", f"{fault} must always apply"
        pytest.skip("the last chunk has no earlier synced version in this history")
    _, recovered = Wal.open(disk, segment_bytes=SEGMENT_BYTES)
    assert not _lost_silently(recovered, written, len(written)), (recovered.reasons, root.events)
