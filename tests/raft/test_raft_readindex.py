"""Read index: a read barrier answered after the leader confirms its leadership with a quorum.

Method: a real `Cluster`; read states come out of Readies, recorded by the application helper.
"""

from __future__ import annotations

import pytest
from raft_network import Cluster

from jsraft.raft import NotLeader, ProposalDropped


def test_a_read_is_answered_after_a_quorum_confirms_leadership():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].read_index(b"r1")
    cluster.process_ready("n1")
    assert cluster.apps["n1"].read_states == []  # not before a heartbeat round
    cluster.stabilize()
    assert cluster.apps["n1"].read_states == [(4, b"r1")]


def test_a_read_without_a_quorum_is_never_answered():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.partition = [{"n1"}, {"n2", "n3"}]
    cluster.nodes["n1"].read_index(b"r1")
    cluster.stabilize()
    assert cluster.apps["n1"].read_states == []


def test_a_read_waits_for_the_first_commit_of_the_term():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.nodes["n1"].campaign()
    cluster.deliver_until(lambda: cluster.nodes["n1"].role == "leader")
    assert cluster.nodes["n1"].log.commit_index == 3  # its no-op (4) is not committed yet
    cluster.nodes["n1"].read_index(b"early")
    cluster.stabilize()
    # Answered at the no-op's index, never at a commit index inherited from an earlier term.
    assert cluster.apps["n1"].read_states == [(4, b"early")]


def test_a_single_voter_answers_at_once():
    cluster = Cluster(["n1"])
    cluster.elect("n1")
    cluster.nodes["n1"].read_index(b"solo")
    cluster.stabilize()
    assert cluster.apps["n1"].read_states == [(2, b"solo")]


def test_reads_need_the_leader_and_are_bounded():
    cluster = Cluster(["n1", "n2", "n3"], config={"pending_reads_max": 2})
    cluster.elect("n1")
    with pytest.raises(NotLeader):
        cluster.nodes["n2"].read_index(b"x")
    cluster.partition = [{"n1"}, {"n2", "n3"}]
    cluster.nodes["n1"].read_index(b"a")
    cluster.nodes["n1"].read_index(b"b")
    with pytest.raises(ProposalDropped, match="pending reads"):
        cluster.nodes["n1"].read_index(b"c")
