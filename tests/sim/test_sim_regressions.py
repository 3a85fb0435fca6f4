"""Regressions the simulator found in the WAL, pinned as small deterministic tests.

Method: rebuild, on a `SimDisk`, the storage state the failing seed reached — found with the first
version of the simulator, whose seed numbering later changed — and make the call that used to trip an
`invariant()`; then check the WAL still refuses what it must.

  1. `truncate_from` left a faulty entry's *claimed* term (named by its successor's record) in place after
     cutting that successor; `replace` then refused the leader's copy of the entry as a "term conflict".
     (Seed 129, first version: a repairing node installs a snapshot, its faulty 62 loses successor 63.)
  2. `truncate_from` refused to cut at or below the stored commit hint even on a repairing replica, whose
     hint may cover stale copies the Raft core replaces (raft `append` invariant 5). (Seed 965, first
     version: a rolled-back segment under the commit hint, then a new leader's entries.)
  3. A bit flip at rest in the *newest* hard-state slot: the WAL falls back to the older slot and, by design,
     does not call that repairing, so a driver that passed the WAL's findings to the core only when the
     WAL said repairing restarted a node that had forgotten its vote: it voted twice in one term
     (`double-vote`, seed 15 of a run with flips aimed at hard-state slots). The driver now passes every
     finding but a torn-tail cut (`Recovered.damage_findings`), as `RestoredState.repair_reasons` documents,
     and the replica refuses to vote until repaired.
  4. The core replaces a faulty entry in place with the leader's copy even when the WAL knows (from the
     successor's record) another term for it; the WAL refuses that ("use truncate_from"). The successor is
     then provably not in the leader's log, so the cycle cuts it (`replica.persist.write_work`, through
     `wal.repaired.put_repaired`). (Seed 3632 of
     the 5000-seed run: `crash`, replace(400): term conflict.)
"""

from __future__ import annotations

import random

import pytest

from jsraft.errors import InvariantViolation
from jsraft.raft import (
    Entry, HardState, RaftConfig, RaftNode, Ready, RequestVote, RequestVoteResponse, RestoredState,
)
from jsraft.replica import Work, write_work
from jsraft.testing.sim import SafetyChecker, SimNetwork
from jsraft.testing.sim.node import NodeDriver, NodeSetup
from jsraft.testing.sim.trace import Trace
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Wal
from jsraft.wal.format import (
    HARD_STATE_FILE, HARD_STATE_SLOT_OFFSETS, WAL_DIR, encode_entry, segment_name, segment_preamble,
)


def _log(disk: SimDisk, entries: list[Entry], hard_state: HardState) -> None:
    wal, _ = Wal.open(disk, segment_bytes=1 << 20)
    wal.append(entries)
    wal.save_hard_state(hard_state)
    wal.sync()
    wal.close()


def _record_offset(entries: list[Entry], index: int) -> int:
    offset, prev_term = len(segment_preamble(entries[0].index)), 0
    for entry in entries:
        if entry.index == index:
            return offset
        offset += len(encode_entry(entry, prev_term))
        prev_term = entry.term
    raise AssertionError(f"no entry {index}")


def test_replace_after_the_claiming_successor_was_truncated() -> None:
    disk = SimDisk(random.Random(1))
    log = [Entry(index=i, term=1 if i < 5 else 2, data=b"x%d" % i) for i in range(1, 7)]
    _log(disk, log, HardState(current_term=2, acked_watermark=6))
    disk.flip_bit(f"{WAL_DIR}/{segment_name(1)}", _record_offset(log, 5) + 20)
    wal, recovered = Wal.open(disk, segment_bytes=1 << 20)
    assert recovered.faulty == {5} and recovered.repairing
    assert wal.term(5) == 2  # claimed by entry 6's record
    wal.truncate_from(6)  # the claimant is gone ...
    assert wal.term(5) is None  # ... and so is its claim
    wal.replace([Entry(index=5, term=3, data=b"leader's")])  # used to raise "term conflict"
    wal.sync()
    wal.close()
    _, again = Wal.open(disk, segment_bytes=1 << 20)
    assert again.entries[-1] == Entry(index=5, term=3, data=b"leader's") and not again.faulty


def test_a_repairing_replica_may_truncate_below_its_commit_hint() -> None:
    log = [Entry(index=i, term=1, data=b"y%d" % i) for i in range(1, 11)]
    healthy = SimDisk(random.Random(2))
    _log(healthy, log, HardState(current_term=1, commit_index=8, acked_watermark=10))
    wal, _ = Wal.open(healthy)
    with pytest.raises(InvariantViolation):
        wal.truncate_from(5)  # rule 5 still holds for a healthy replica
    repairing = SimDisk(random.Random(3))
    _log(repairing, log, HardState(current_term=1, commit_index=8, acked_watermark=10, repairing=True))
    wal, recovered = Wal.open(repairing)
    assert recovered.repairing
    wal.truncate_from(5)  # used to raise "never truncate a committed entry"
    assert wal.last_index() == 4


def test_a_rotted_newest_hard_state_slot_makes_the_replica_refuse_votes() -> None:
    disk = SimDisk(random.Random(4))
    wal, _ = Wal.open(disk)
    wal.save_hard_state(HardState(current_term=4, voted_for="n2"))
    wal.sync()  # witness slot 0
    wal.save_hard_state(HardState(current_term=5, voted_for="n3"))
    wal.sync()  # witness slot 1: voted n3 in 5
    wal.close()
    disk.flip_bit(HARD_STATE_FILE, HARD_STATE_SLOT_OFFSETS[1] + 30)
    # The log's own record of (5, n3), its last, is lost too: nothing readable names the vote any more.
    disk.truncate_tail(f"{WAL_DIR}/{segment_name(1)}", 5)
    _, recovered = Wal.open(disk)
    assert recovered.hard_state.current_term == 4 and not recovered.repairing  # the WAL's fallback
    reasons = recovered.damage_findings()
    assert any("slot 1" in reason for reason in reasons)
    restored = RestoredState(hard_state=recovered.hard_state, repair_reasons=reasons)
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(0), restored)
    assert node.status().repairing
    node.step(RequestVote(from_id="n4", to_id="n1", term=5, last_log_index=0, last_log_term=0))
    answers = [m for m in node.ready().messages if isinstance(m, RequestVoteResponse)]
    assert answers and not any(m.vote_granted for m in answers)  # a second vote in term 5 is refused


def test_the_driver_cuts_a_suffix_the_wal_proves_divergent_before_a_repair() -> None:
    disk = SimDisk(random.Random(5))
    log = [Entry(index=i, term=1 if i < 4 else 2, data=b"z%d" % i) for i in range(1, 6)]
    _log(disk, log, HardState(current_term=2, acked_watermark=5))
    disk.flip_bit(f"{WAL_DIR}/{segment_name(1)}", _record_offset(log, 4) + 20)
    setup = NodeSetup(node_id="n1", raft_config=RaftConfig(node_id="n1"), node_class=RaftNode,
                      bootstrap_voters=None, corruptible=True, segment_bytes=1 << 20, compact_every_entries=1000)
    driver = NodeDriver(setup, random.Random(6), disk, SimNetwork(random.Random(7), ("n1",)), SafetyChecker(),
                        Trace())
    driver.start()
    assert driver.node is not None and driver.node.repairing and driver.wal is not None
    assert driver.wal.faulty() == {4} and driver.wal.term(4) == 2  # entry 5 claims term 2 for it
    leaders_copy = Entry(index=4, term=1, data=b"leader's 4")
    with pytest.raises(InvariantViolation):
        driver.wal.replace([leaders_copy])  # the WAL's contract: a conflict with the claimed term
    write_work(driver.wal, driver.disk, Work(ready=Ready(repaired_entries=(leaders_copy,))))  # production's step
    assert driver.wal.last_index() == 4 and driver.wal.faulty() == frozenset()
    assert driver.wal.entries(4, 5) == [leaders_copy]
