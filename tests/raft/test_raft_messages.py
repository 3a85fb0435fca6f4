"""The message gateway: `RaftNode.step()` checks every message before any handler sees it.

Method: feed malformed messages to a node and expect `PeerProtocolError` (the driver drops the link),
with the node's state unchanged.
"""

from __future__ import annotations

import random

import pytest

from jsraft.raft import (
    AppendEntries, ConfState, Entry, InstallSnapshot, PeerProtocolError, RaftConfig, RaftNode, RequestVote,
    RestoredState, SnapshotMeta,
)


@pytest.fixture
def node() -> RaftNode:
    return RaftNode(RaftConfig(node_id="n1"), random.Random(0), RestoredState.bootstrap(("n1", "n2", "n3")))


def _append(**changes):
    fields = dict(from_id="n2", to_id="n1", term=2, leader_id="n2", prev_log_index=3, prev_log_term=1,
                  entries=(Entry(index=4, term=2),), leader_commit=3)
    fields.update(changes)
    return AppendEntries(**fields)


@pytest.mark.parametrize("message, words", [
    (_append(to_id="n9"), "delivered"),
    (_append(from_id="n1", leader_id="n1"), "own node id"),
    (_append(leader_id="n3"), "leader_id"),
    (_append(term=-1), "negative term"),
    (_append(prev_log_index=-1), "negative"),
    (_append(entries=(Entry(index=5, term=2),)), "contiguous"),
    (_append(entries=(Entry(index=4, term=3),)), "out of order"),
    (_append(entries=(Entry(index=4, term=2), Entry(index=5, term=1))), "out of order"),
    (_append(prev_log_term=3), "prev_log_term"),
    (RequestVote(from_id="n2", to_id="n1", term=2, last_log_index=3, last_log_term=5), "impossible"),
    (InstallSnapshot(from_id="n2", to_id="n1", term=2, leader_id="n2",
                     meta=SnapshotMeta(index=5, term=2, conf=ConfState(voters=("n1",))),
                     offset=0, data=b"xx", total_bytes=1, done=False), "outside"),
    (InstallSnapshot(from_id="n2", to_id="n1", term=2, leader_id="n2",
                     meta=SnapshotMeta(index=5, term=2, conf=ConfState(voters=("n1",))),
                     offset=0, data=b"x", total_bytes=2, done=True), "announced size"),
    (InstallSnapshot(from_id="n2", to_id="n1", term=2, leader_id="n2",
                     meta=SnapshotMeta(index=5, term=2, conf=ConfState(voters=("n1",))),
                     offset=0, data=b"", total_bytes=2 << 30, done=False), "snapshot_bytes_max"),
    ("not a message", "unknown message"),
])
def test_malformed_messages_are_refused(node, message, words):
    before = node.status()
    with pytest.raises(PeerProtocolError, match=words):
        node.step(message)
    assert node.status() == before
    assert not node.outbox


def test_well_formed_append_is_accepted(node):
    node.step(_append())
    assert node.leader_id == "n2" and node.current_term == 2


def test_an_acknowledgement_beyond_the_leader_log_is_a_protocol_error():
    from raft_network import Cluster

    from jsraft.raft import AppendEntriesResponse

    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    leader = cluster.nodes["n1"]
    with pytest.raises(PeerProtocolError, match="beyond our log"):
        leader.step(AppendEntriesResponse(from_id="n2", to_id="n1", term=2, success=True, match_index=99))
    assert leader.log.commit_index == 4 and leader.role == "leader"
