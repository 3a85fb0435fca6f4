"""Storage-fault rules 2–7: entering repairing on restore, what a repairing replica may not do, how it is
repaired without truncating good data, when it leaves, halting, and the operator's override.

Method: real RaftNodes, on the in-memory `Cluster` (whose `MemStorage` loses unsynced writes on crash and
can corrupt or truncate its durable WAL) or fed hand-made messages. Each test names the rule it checks
(DESIGN.md §4, `jsraft.raft.rules`).
"""

from __future__ import annotations

import random

import attrs

import pytest
from raft_network import Cluster

from jsraft.errors import InvariantViolation
from jsraft.raft import (
    AppendEntries, AppendEntriesResponse, Entry, EntryType, HardState, RaftConfig, RaftNode, RequestVote,
    RequestVoteResponse, RestoredState, Snapshot, SnapshotMeta, StatusProbe, TimeoutNow, encode_conf_change,
)
from jsraft.raft import snapshot as snapshot_module
from jsraft.raft import vote_fence
from jsraft.raft.membership import ConfChange, ConfChangeType


def _log(terms: list[int]) -> list[Entry]:
    entries = [Entry(index=i, term=1, type=EntryType.CONF_CHANGE,
                     data=encode_conf_change(ConfChange(type=ConfChangeType.ADD_VOTER, node_id=v)))
               for i, v in enumerate(("n1", "n2", "n3"), start=1)]
    for term in terms:
        entries.append(Entry(index=len(entries) + 1, term=term, data=f"e{len(entries) + 1}".encode()))
    return entries


def restored_node(node_id="n2", *, terms=(2, 2, 2), faulty=(), hard_state=None, **kwargs) -> RaftNode:
    hard_state = hard_state or HardState(current_term=2, commit_index=3, acked_watermark=3 + len(terms))
    restored = RestoredState(hard_state=hard_state, entries=_log(list(terms)), faulty=frozenset(faulty), **kwargs)
    return RaftNode(RaftConfig(node_id=node_id), random.Random(3), restored)


def leader_append(term: int, entries: list[Entry], *, leader_commit: int, prev: int = 0) -> AppendEntries:
    """The leader's entries from `prev + 1` (a repairing follower trusts only what it verified)."""
    sent = tuple(e for e in entries if e.index > prev)
    prev_term = next((e.term for e in entries if e.index == prev), 0)
    return AppendEntries(from_id="n1", to_id="n2", term=term, leader_id="n1", prev_log_index=prev,
                         prev_log_term=prev_term, entries=sent, leader_commit=leader_commit)


def cluster_with_entries(count: int = 5) -> Cluster:
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    for i in range(count):
        cluster.nodes["n1"].propose(f"v{i}".encode())
    cluster.stabilize()
    return cluster


# --- Rule 2: entering repairing on restore -----------------------------------------------------------


@pytest.mark.parametrize("kwargs, reason", [
    ({"faulty": {5}}, "1 faulty entry from index 5"),
    ({"hard_state": HardState(current_term=2, acked_watermark=9)}, "below acked watermark 9"),
    ({"hard_state": HardState(current_term=2, commit_index=8)}, "below commit index 8"),
    ({"hard_state": HardState(current_term=2, repairing=True)}, "hard state says repairing"),
    ({"storage_uuid_changed": True}, "storage UUID changed"),
    ({"applied_index": 8}, "below applied index 8"),
    ({"repair_reasons": ["segment 3: rolled-back stretch"]}, "segment 3: rolled-back stretch"),
])
def test_restore_makes_a_damaged_replica_repairing_and_persists_it(kwargs, reason):
    node = restored_node(**kwargs)
    assert node.repairing and reason in node.repair_reason
    rd = node.ready()
    if not node.persisted_hard_state.repairing:
        assert rd.hard_state is not None and rd.hard_state.repairing and rd.must_sync
    assert node.hard_state().repairing


def test_an_intact_replica_is_not_repairing():
    node = restored_node()
    assert not node.repairing and node.repair_reason is None


# --- Rule 3: a repairing replica neither votes nor campaigns -----------------------------------------


@pytest.mark.parametrize("pre_vote", [True, False])
def test_a_repairing_replica_refuses_votes_and_says_why(pre_vote):
    node = restored_node(faulty={5})
    node.step(RequestVote(from_id="n1", to_id="n2", term=3, last_log_index=99, last_log_term=3,
                          pre_vote=pre_vote))
    (answer,) = [m for m in node.ready().messages if isinstance(m, RequestVoteResponse)]
    assert not answer.vote_granted and answer.repairing
    assert node.voted_for != "n1"


def test_a_repairing_replica_never_campaigns():
    node = restored_node(faulty={5})
    node.campaign()
    assert node.role == "follower"
    for _ in range(100):
        node.tick()
    assert node.role == "follower" and node.current_term == 3
    messages = node.ready().messages
    assert messages and all(isinstance(m, StatusProbe) for m in messages)  # it only asks around (rule 4)
    node.step(TimeoutNow(from_id="n1", to_id="n2", term=3))
    assert node.role == "follower" and node.current_term == 3


def test_a_repairing_replica_trusts_only_its_verified_prefix():
    """Rule 3: past what a leader confirmed, a matching term proves nothing (copies may be stale)."""
    node = restored_node(faulty={5})
    rd = node.ready()
    assert rd.committed_entries == ()  # its commit hint is 3, but nothing is applied unconfirmed
    node.advance(rd)
    node.step(AppendEntries(from_id="n1", to_id="n2", term=3, leader_id="n1", prev_log_index=4,
                            prev_log_term=2, leader_commit=6, heartbeat=True))
    (answer,) = node.ready().messages
    assert not answer.success and (answer.reject_hint_index, answer.reject_hint_term) == (0, 0)


def test_a_faulty_index_fails_the_consistency_check_with_a_hint_before_it():
    node = restored_node(faulty={5})
    node.step(leader_append(3, _log([2]), leader_commit=3))  # entries 1-4 confirmed
    node.advance(node.ready())
    node.step(AppendEntries(from_id="n1", to_id="n2", term=3, leader_id="n1", prev_log_index=6,
                            prev_log_term=2, leader_commit=6, heartbeat=True))
    (answer,) = node.ready().messages
    assert isinstance(answer, AppendEntriesResponse) and not answer.success and answer.repairing
    assert (answer.reject_hint_index, answer.reject_hint_term) == (4, 2)


def test_faulty_entry_is_replaced_in_place_and_nothing_after_it_is_truncated():
    cluster = cluster_with_entries(5)  # entries 1-3 bootstrap, 4 no-op, 5-9 data
    cluster.crash("n2")
    cluster.storages["n2"].corrupt(6)
    cluster.restart("n2")
    assert cluster.nodes["n2"].repairing
    # Restored in its fence term (vote_fence invariant 4), n2 deposes n1; the next term's leader repairs it.
    cluster.run_until(lambda: not cluster.nodes["n2"].repairing)
    node, storage = cluster.nodes["n2"], cluster.storages["n2"]
    assert not node.repairing and not node.log.faulty
    assert storage.rewrites == [6] and storage.truncations == []
    assert cluster.apps["n2"].values == ["v0", "v1", "v2", "v3", "v4"]


def test_a_damaged_recorded_term_does_not_cause_a_truncation():
    cluster = cluster_with_entries(5)
    cluster.crash("n3")
    cluster.storages["n3"].corrupt(6, term=7)  # the flip hit the header: the identity lies
    cluster.restart("n3")
    cluster.run_until(lambda: not cluster.nodes["n3"].repairing)  # repaired by the next term's leader
    assert cluster.storages["n3"].truncations == [] and cluster.storages["n3"].rewrites == [6]
    assert not cluster.nodes["n3"].repairing


def test_a_provably_divergent_suffix_after_a_faulty_entry_is_truncated_above_commit():
    # n2's entry 5 is faulty; its entries 6-7 are of term 2, but the leader's entry 5 is of term 3:
    # terms never decrease in one log, so 6-7 cannot follow the leader's 5.
    node = restored_node(terms=(2, 2, 2, 2), faulty={5},
                         hard_state=HardState(current_term=3, commit_index=4, acked_watermark=7))
    leader_entries = _log([2]) + [Entry(index=5, term=3, data=b"L")]
    # Restored in its fence term 4 (vote_fence invariant 4), n2 refuses a term-3 leader; a term-4 one
    # (elected, perhaps, with the vote n2 may have lost) repairs it.
    node.step(leader_append(4, leader_entries, leader_commit=5))
    assert node.log.last_index == 5 and node.log.entry_at(5).data == b"L"
    rd = node.ready()
    assert rd.repaired_entries == (Entry(index=5, term=3, data=b"L"),)  # in place
    assert rd.truncate_from == 6 and rd.entries == ()  # and the divergent suffix goes
    # A repairing replica keeps its watermark: the removed copies might hide acknowledged entries.
    assert node.acked_watermark == 7 and node.repairing


def test_a_divergent_suffix_behind_a_run_of_faulty_entries_is_truncated():
    # Simulator seed 10598 (consumer app): n2's entries 5-6 are faulty, entry 7 reads fine with term 2.
    # The leader replaces 5 with a term-3 entry and sends nothing past it. Entry 6's placeholder proves
    # nothing, but 7 (term 2) cannot follow the leader's 5 (term 3) in one log: keeping it left a log
    # whose terms decrease, which the next restart refused (InvariantViolation in RestoredState.validate).
    node = restored_node(terms=(2, 2, 2, 2, 2), faulty={5, 6},
                         hard_state=HardState(current_term=3, commit_index=4, acked_watermark=8))
    leader_entries = _log([2]) + [Entry(index=5, term=3, data=b"L")]
    # Restored in its fence term 4 (vote_fence invariant 4), n2 refuses a term-3 leader; a term-4 one
    # (elected, perhaps, with the vote n2 may have lost) repairs it.
    node.step(leader_append(4, leader_entries, leader_commit=5))
    assert node.log.last_index == 5 and not node.log.faulty
    rd = node.ready()
    assert rd.repaired_entries == (Entry(index=5, term=3, data=b"L"),)
    assert rd.truncate_from == 6 and rd.entries == ()
    assert node.acked_watermark == 8 and node.repairing


def test_a_snapshot_does_not_keep_a_lower_term_suffix_behind_faulty_entries():
    # The same shape through InstallSnapshot: the snapshot ends at our faulty 5 with term 3; after the
    # faulty 6 our 7 has term 2, so the suffix is not the leader's and goes with the old log.
    node = restored_node(terms=(2, 2, 2, 2, 2), faulty={5, 6},
                         hard_state=HardState(current_term=3, commit_index=4, acked_watermark=8))
    meta = SnapshotMeta(index=5, term=3, conf=node.conf)
    snapshot_module.install(node, Snapshot(meta=meta, data=b"s"))
    assert node.log.snapshot_index == 5 and node.log.last_index == 5 and not node.log.faulty
    assert node.ready().truncate_from == 6


def test_a_follower_that_lost_what_it_acknowledged_deposes_that_leader_and_the_next_one_repairs_it():
    # Before vote_fence invariant 4 the leader n2 acknowledged to (match 9) resent what n2 lost below that
    # match. Now n2 restores in its fence term (its restored term + 1), so the term-2 leader it acknowledged
    # to is refused and steps down; the next term's leader starts with no match for n2 and sends it
    # everything it lacks.
    cluster = cluster_with_entries(5)
    term = cluster.nodes["n1"].current_term
    cluster.crash("n2")
    cluster.storages["n2"].truncate_log(5)  # lost 6..9, which it had acknowledged
    n2 = cluster.restart("n2")
    assert n2.repairing and n2.current_term == term + 1 and n2.voted_for is None
    assert cluster.nodes["n1"].progress["n2"].match_index == 9
    cluster.tick("n1")
    cluster.stabilize()
    assert cluster.nodes["n1"].role == "follower" and cluster.nodes["n1"].current_term == term + 1
    cluster.run_until(lambda: cluster.leader() is not None and not cluster.nodes["n2"].repairing)
    leader = cluster.nodes[cluster.leader()]
    assert leader.current_term >= term + 2  # no vote in the fenced term + 1
    assert cluster.nodes["n2"].log.last_index == leader.log.last_index >= 9
    assert leader.progress["n2"].match_index == leader.log.last_index


def test_repair_does_not_end_below_the_watermark():
    """Rule 3: the leader's commit is reached, but the replica acknowledged more before: not yet."""
    node = restored_node(terms=(2, 2), hard_state=HardState(current_term=2, commit_index=3, acked_watermark=8))
    node.step(leader_append(3, _log([2, 2, 2]), leader_commit=6))
    node.advance(node.ready())
    assert node.repairing  # log ends at 6 < watermark 8
    node.step(AppendEntries(from_id="n1", to_id="n2", term=3, leader_id="n1", prev_log_index=6,
                            prev_log_term=2, entries=(Entry(index=7, term=2), Entry(index=8, term=2),
                                                      Entry(index=9, term=3, type=EntryType.NOOP)),
                            leader_commit=9))
    assert node.repairing  # not before the entries are durable
    rd = node.ready()
    node.advance(rd)
    assert not node.repairing
    rd = node.ready()
    assert rd.hard_state is not None and not rd.hard_state.repairing and rd.must_sync


def test_repair_does_not_end_before_the_leader_committed_in_its_own_term():
    """Rule 3 (sim register seed 1602): a replica that lost everything, its watermark too, matched the
    leader through its commit index 6 — of an older term. The leader's log may hold, above 6, an entry an
    older leader committed with this replica's lost acknowledgement: the repair ends only once the leader
    committed an entry of its own term, which commits everything before it."""
    node = restored_node(terms=(2, 2), hard_state=HardState(current_term=2, commit_index=3, repairing=True))
    node.step(leader_append(3, _log([2, 2, 2]), leader_commit=6))
    node.advance(node.ready())
    assert node.repairing and node.log.last_index == 6  # the leader's commit reached, but it is of term 2
    node.step(AppendEntries(from_id="n1", to_id="n2", term=3, leader_id="n1", prev_log_index=6,
                            prev_log_term=2, entries=(Entry(index=7, term=2, data=b"acked before"),
                                                      Entry(index=8, term=3, type=EntryType.NOOP)),
                            leader_commit=6))
    node.advance(node.ready())
    assert node.repairing  # holds 7 and 8 now, but the leader has not committed 8 yet
    node.step(AppendEntries(from_id="n1", to_id="n2", term=3, leader_id="n1", prev_log_index=8,
                            prev_log_term=3, entries=(), leader_commit=8))
    node.advance(node.ready())
    assert not node.repairing and node.log.term_at(7) == 2


def test_repair_does_not_end_before_matching_the_leader_through_its_commit():
    node = restored_node(faulty={5}, hard_state=HardState(current_term=2, commit_index=3, acked_watermark=4))
    node.step(leader_append(3, _log([2, 2]), leader_commit=9))
    node.advance(node.ready())
    assert node.repairing and not node.log.faulty  # matched through 5 only; the leader committed 9


# --- Rule 4: halting, and the operator's override -------------------------------------------------


def test_two_of_three_repairing_halts_and_every_node_says_so():
    cluster = cluster_with_entries(3)
    for node_id, damage in (("n1", lambda s: s.corrupt(5)), ("n2", lambda s: s.truncate_log(4))):
        cluster.crash(node_id)
        damage(cluster.storages[node_id])
        cluster.restart(node_id)
    cluster.run(60)
    assert cluster.leader() is None
    for node in cluster.nodes.values():
        assert node.status().halted_reason.startswith("halted: 2 of 3 voters repairing (n1, n2)")
    # Term 3 is the repairing nodes' fence term (restored term 2 + 1, vote_fence invariant 4), which their
    # messages carried to n3; pre-vote kept the healthy node from inflating terms beyond it.
    assert cluster.nodes["n3"].current_term == 3


def test_accept_data_loss_keeps_the_verified_prefix_and_is_persisted():
    cluster = cluster_with_entries(3)  # 1-3 boot, 4 no-op, 5-7 data
    cluster.crash("n1")
    cluster.storages["n1"].corrupt(6)
    cluster.restart("n1")
    node = cluster.nodes["n1"]
    assert node.accept_data_loss()
    assert (node.log.last_index, node.acked_watermark) == (5, 5)
    assert node.log.commit_index <= 5
    assert not node.repairing and not node.accept_data_loss()
    rd = node.ready()
    assert rd.truncate_from == 6 and rd.hard_state.acked_watermark == 5 and not rd.hard_state.repairing
    assert rd.must_sync


def test_accept_data_loss_fences_the_vote_of_the_current_term_and_the_one_above():
    # Rule 7 for the operator's way out too: a vote this replica cast in term 2, or (a lost hard-state
    # write) in term 3, may be among what it lost.
    node = restored_node(faulty={5})
    assert node.repairing and node.voted_for is None
    assert node.accept_data_loss()
    rd = node.ready()
    # The fence is its own hard-state field, persisted with the Ready; `voted_for` holds no marker.
    assert node.vote_fence_term == 3 and rd.hard_state.vote_fence_term == 3 and rd.hard_state.voted_for is None
    node.advance(rd)
    for term in (2, 3):
        node.outbox.clear()
        node.step(RequestVote(from_id="n3", to_id="n2", term=term, last_log_index=9, last_log_term=term))
        assert node.voted_for is None, f"a second vote in fenced term {term}"
        assert not any(isinstance(m, RequestVoteResponse) and m.vote_granted for m in node.outbox)


def test_a_lower_term_refusal_from_a_repairing_voter_still_counts_for_the_halt():
    # A voter that lost its storage answers in its own term (0): its "repairing" is news all the same.
    node = restored_node("n1", hard_state=HardState(current_term=5, commit_index=3, acked_watermark=6))
    for voter in ("n2", "n3"):
        node.step(RequestVoteResponse(from_id=voter, to_id="n1", term=0, vote_granted=False, pre_vote=True,
                                      repairing=True))
    assert node.status().halted_reason is not None and "2 of 3 voters repairing" in node.status().halted_reason


# --- Rule 5: never truncate a committed entry -------------------------------------------------------


def test_a_conflict_at_a_committed_index_is_an_invariant_violation():
    node = restored_node(hard_state=HardState(current_term=3, commit_index=6, acked_watermark=6))
    with pytest.raises(InvariantViolation, match="rule 5"):
        node.step(AppendEntries(from_id="n1", to_id="n2", term=3, leader_id="n1", prev_log_index=4,
                                prev_log_term=2, entries=(Entry(index=5, term=3),), leader_commit=6))


# --- Rule 6: no snapshot from a faulty replica ------------------------------------------------------


def test_a_repairing_replica_cannot_become_leader():
    node = restored_node(faulty={5})
    from jsraft.raft import election

    with pytest.raises(InvariantViolation, match="never leads"):
        election.become_leader(node)


def test_a_leader_with_faults_never_sends_a_snapshot():
    cluster = cluster_with_entries(3)
    leader = cluster.nodes["n1"]
    leader.compact(cluster.apps["n1"].applied_index, cluster.apps["n1"].snapshot_data())
    leader.log.faulty.add(leader.log.last_index)  # as if damage appeared under a leader (a bug elsewhere)
    leader.progress["n2"].next_index = 1
    assert not leader.rule_may_send_snapshot()
    assert not snapshot_module.send_snapshot(leader, "n2")
    assert not any(type(m).__name__ == "InstallSnapshot" for m in leader.outbox)


# --- Rule 7: a new storage UUID is a new member -----------------------------------------------------


def test_a_replaced_data_directory_repairs_then_fences_its_vote():
    cluster = cluster_with_entries(2)
    cluster.crash("n3")
    cluster.storages["n3"].written = type(cluster.storages["n3"].written)()
    cluster.storages["n3"].durable = type(cluster.storages["n3"].durable)()
    cluster.storages["n3"].storage_uuid_changed = True
    cluster.restart("n3")
    # No hard state at all and no `term_query_voters` (the restore asks for the term query only when no
    # ceiling bounds the lost votes): fenced through term 1 (vote_fence), and restored in that term.
    assert cluster.nodes["n3"].repairing and cluster.nodes["n3"].current_term == 1
    cluster.run(3)
    node = cluster.nodes["n3"]
    assert not node.repairing and node.current_term == 2 and node.voted_for == "n3"
    node.step(RequestVote(from_id="n2", to_id="n3", term=2, last_log_index=99, last_log_term=2,
                          leadership_transfer=True))
    assert not any(m.vote_granted for m in node.outbox if isinstance(m, RequestVoteResponse))


# --- Rule 3, leader side: an idle group still repairs a follower whose watermark is beyond its log ------


def _restart_with_watermark(cluster: Cluster, node_id: str, watermark: int) -> RaftNode:
    """`node_id` acknowledged an older leader's uncommitted tail through `watermark`; the current leader
    never had it and the follower's copy is gone (crash, then restart with the watermark on disk)."""
    cluster.crash(node_id)
    storage = cluster.storages[node_id]
    for state in (storage.durable, storage.written):
        state.hard_state = attrs.evolve(state.hard_state, acked_watermark=watermark)
    return cluster.restart(node_id)


def test_the_leader_pads_with_noops_past_a_repairing_followers_watermark():
    cluster = cluster_with_entries(3)
    leader = cluster.nodes["n1"]
    last = leader.log.last_index
    follower = _restart_with_watermark(cluster, "n2", last + 3)
    assert follower.repairing and "below acked watermark" in follower.repair_reason
    # n2 restored in its fence term deposes n1 (vote_fence invariant 4); the next leader, idle (no client
    # proposes anything), pads: its election no-op and two more reach n2's watermark.
    cluster.run_until(lambda: cluster.leader() is not None and not cluster.nodes["n2"].repairing)
    leader = cluster.nodes[cluster.leader()]
    padded = [leader.log.entry_at(i) for i in range(last + 1, leader.log.last_index + 1)]
    assert [(e.type, e.term) for e in padded] == [(EntryType.NOOP, leader.current_term)] * 3
    assert cluster.nodes["n2"].log.last_index == leader.log.last_index == leader.log.commit_index


def test_the_leader_does_not_pad_for_a_watermark_no_honest_follower_can_have():
    cluster = Cluster(["n1", "n2", "n3"], config={"uncommitted_entries_max": 4})
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"v")
    cluster.stabilize()
    last = cluster.nodes["n1"].log.last_index
    # n2 deposes n1 (its fence term, vote_fence invariant 4); the next leader appends its election no-op
    # (last + 1) and pads no further: the watermark is more than the uncommitted budget (4) beyond that.
    term = cluster.nodes["n1"].current_term
    _restart_with_watermark(cluster, "n2", last + 6)
    cluster.run_until(lambda: cluster.leader() is not None and cluster.nodes[cluster.leader()].current_term > term)
    cluster.run(10)
    leader = cluster.nodes[cluster.leader()]
    assert leader.log.last_index == last + 1 and cluster.nodes["n2"].repairing
