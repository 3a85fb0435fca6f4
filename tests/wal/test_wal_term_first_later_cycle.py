"""A follower's cycle that raises the term puts term and vote in the log before its entries
(`replica.persist` invariant 5, on every cycle, not only a group's first).

Method: on `SimDisk` (loses every unsynced write at a crash, optionally tearing the last one). A WAL
holds entries 1–3 of term 1 with a synced hard state of term 1 (acked watermark 3). Then a cycle as a
follower of a new leader writes it (`persist.write_work` + `seal_work`): hard state term 2, entries 4–6 of
term 2 — and the machine dies inside that cycle's fsync, so any prefix of its writes may be kept. Reopened,
the WAL keeps entries 1–3 and a prefix of 4–6, and reports no damage: entries of term 2 that reached the log
without a hard state naming term 2 read as "term raised (seen in the log)", a damage finding that makes the
replica repairing (an R1 group halts) although nothing but an ordinary crash happened. Without the term
first, seeds whose kept prefix holds a term-2 entry but not the cycle's hard-state record fail that check.
The same with a snapshot: not covered here (a snapshot install is durable at once and comes with its own
hard state)."""

from __future__ import annotations

import random

import pytest
from wal_helpers import make_entries

from jsraft.raft.ready import Ready
from jsraft.raft.types import HardState
from jsraft.replica import persist
from jsraft.replica.persist import Work
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Wal


def _cycle(wal: Wal, entries: list, hard_state: HardState) -> None:
    work = Work(ready=Ready(entries=tuple(entries), must_sync=True), hard_state=hard_state)
    persist.write_work(wal, wal._disk, work)
    persist.seal_work(wal, work)


@pytest.mark.parametrize("seed", range(30))
def test_a_crash_inside_a_term_raising_cycle_is_not_damage(seed: int) -> None:
    root = SimDisk(random.Random(seed), corruption_allowed=False)
    disk = root.sub("g")
    wal, _ = Wal.open(disk)
    first = make_entries(1, 4, term=1)
    _cycle(wal, first, HardState(current_term=1, voted_for="n2", acked_watermark=3))
    wal.sync()
    raised = make_entries(4, 7, term=2)
    _cycle(wal, raised, HardState(current_term=2, voted_for=None, acked_watermark=6))
    root.crash(torn=bool(seed % 2))  # the cycle's fsync never returned
    _, recovered = Wal.open(disk)
    kept = recovered.entries
    assert kept[:3] == first and kept[3:] == raised[: len(kept) - 3]
    assert recovered.damage_findings() == (), recovered.reasons
    assert not recovered.repairing
    # The watermark vouches for what was kept: 3, or 6 when the crash happened to keep the whole cycle.
    assert recovered.hard_state.acked_watermark in (3, 6) and recovered.hard_state.acked_watermark <= len(kept)
