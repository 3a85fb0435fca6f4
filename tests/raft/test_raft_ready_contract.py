"""The `Ready` contract: persist (fsync when `must_sync`) before sending; rule 1 (term and vote durable
before use) and rule 2 (acks covered by a durable watermark) follow from it.

Method: inspect the Readies a node produces for the events that change durable state, and drive a
cluster whose storage keeps unsynced writes in a page cache (lost on crash) while `check_ready_contract`
verifies, for every message leaving a node, that the durable state backs it.
"""

from __future__ import annotations

import random

import pytest
from raft_network import Cluster, MemStorage, check_ready_contract

from jsraft.errors import InvariantViolation
from jsraft.raft import (
    AppendEntries, AppendEntriesResponse, Entry, RaftConfig, RaftNode, RequestVote, RequestVoteResponse,
    RestoredState,
)
from jsraft.replica import Work, sync_work, write_work


def fresh(node_id="n1") -> RaftNode:
    node = RaftNode(RaftConfig(node_id=node_id), random.Random(1), RestoredState.bootstrap(("n1", "n2", "n3")))
    node.advance(node.ready())
    return node


def test_a_granted_vote_travels_with_the_durable_vote_that_backs_it():
    node = fresh()
    node.step(RequestVote(from_id="n2", to_id="n1", term=2, last_log_index=3, last_log_term=1))
    rd = node.ready()
    (vote,) = rd.messages
    assert isinstance(vote, RequestVoteResponse) and vote.vote_granted
    assert (rd.hard_state.current_term, rd.hard_state.voted_for) == (2, "n2") and rd.must_sync


def test_a_candidate_persists_its_term_and_self_vote_before_asking():
    node = RaftNode(RaftConfig(node_id="n1", pre_vote=False), random.Random(1),
                    RestoredState.bootstrap(("n1", "n2", "n3")))
    node.advance(node.ready())
    node.campaign()
    rd = node.ready()
    assert all(isinstance(m, RequestVote) and m.term == 2 for m in rd.messages)
    assert (rd.hard_state.current_term, rd.hard_state.voted_for) == (2, "n1") and rd.must_sync


def test_an_ack_travels_with_its_entries_and_the_watermark_covering_it():
    node = fresh("n2")
    node.step(AppendEntries(from_id="n1", to_id="n2", term=2, leader_id="n1", prev_log_index=3,
                            prev_log_term=1, entries=(Entry(index=4, term=2), Entry(index=5, term=2)),
                            leader_commit=3))
    rd = node.ready()
    (ack,) = rd.messages
    assert isinstance(ack, AppendEntriesResponse) and ack.success and ack.match_index == 5
    assert [e.index for e in rd.entries] == [4, 5] and rd.hard_state.acked_watermark == 5 and rd.must_sync


def test_a_commit_index_change_alone_needs_no_fsync():
    node = fresh("n2")
    node.step(AppendEntries(from_id="n1", to_id="n2", term=2, leader_id="n1", prev_log_index=3,
                            prev_log_term=1, entries=(Entry(index=4, term=2),), leader_commit=3))
    node.advance(node.ready())
    node.step(AppendEntries(from_id="n1", to_id="n2", term=2, leader_id="n1", prev_log_index=4,
                            prev_log_term=2, leader_commit=4, heartbeat=True))
    rd = node.ready()
    assert rd.hard_state.commit_index == 4 and not rd.must_sync and not rd.entries


def test_the_leader_watermark_covers_its_own_entries_in_the_same_ready():
    cluster = Cluster(["n1"])
    cluster.elect("n1")
    node = cluster.nodes["n1"]
    node.propose(b"x")
    rd = node.ready()
    assert rd.entries[-1].index == 3 and rd.hard_state.acked_watermark == 3 and rd.must_sync


def test_ready_and_advance_alternate():
    node = fresh()
    rd = node.ready()
    with pytest.raises(InvariantViolation, match="before advance"):
        node.ready()
    node.advance(rd)
    with pytest.raises(InvariantViolation, match="without an outstanding"):
        node.advance(rd)


def test_messages_to_self_are_never_emitted():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    for _ in range(5):
        cluster.nodes["n1"].propose(b"x")
    cluster.run(30)
    assert cluster.delivered and all(m.from_id != m.to_id for m in cluster.delivered)


def test_the_checker_rejects_a_message_sent_before_its_state_is_durable():
    """The contract has teeth: the same Ready after the production cycle's writes but before its fsync and
    hard-state save (`replica.persist.sync_work`) fails the check; after them it passes."""
    node = fresh("n2")
    node.step(RequestVote(from_id="n1", to_id="n2", term=2, last_log_index=3, last_log_term=1))
    rd = node.ready()
    assert rd.must_sync and rd.hard_state is not None
    storage = MemStorage(None)
    work = Work(ready=rd, hard_state=rd.hard_state)
    write_work(storage, None, work)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="not durable"):
        check_ready_contract("n2", rd, storage)
    sync_work(storage, None, work)  # type: ignore[arg-type]
    check_ready_contract("n2", rd, storage)


def test_a_crash_loses_only_what_no_message_vouched_for():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    for i in range(5):
        cluster.nodes["n1"].propose(f"v{i}".encode())
    cluster.stabilize()
    before = {n: node.status() for n, node in cluster.nodes.items()}
    for node_id in ("n1", "n2", "n3"):
        cluster.crash(node_id)
        cluster.restart(node_id)
        restored = cluster.nodes[node_id].status()
        assert restored.current_term == before[node_id].current_term
        assert restored.voted_for == before[node_id].voted_for
        assert restored.last_index == before[node_id].last_index and not restored.repairing
    cluster.run(30)
    leader = cluster.leader()
    assert leader is not None and cluster.apps[leader].values == [f"v{i}" for i in range(5)]
