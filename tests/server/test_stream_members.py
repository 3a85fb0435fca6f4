"""`stream_members.next_change`: the one membership step toward the assignment's peers, in a safe order."""

from __future__ import annotations

import pytest

from jsraft.raft.membership import ConfChange, ConfChangeType
from jsraft.server.groups.stream_members import Transfer, next_change

A = ConfChangeType


@pytest.mark.parametrize(("me", "desired", "voters", "learners", "step"), [
    # Scale up R1 -> R3: add each new peer as a learner, then promote it.
    ("n1", "n1 n2 n3", "n1", "", ConfChange(type=A.ADD_LEARNER, node_id="n2")),
    ("n1", "n1 n2 n3", "n1", "n2", ConfChange(type=A.ADD_LEARNER, node_id="n3")),
    ("n1", "n1 n2 n3", "n1", "n2 n3", ConfChange(type=A.PROMOTE_LEARNER, node_id="n2")),
    ("n1", "n1 n2 n3", "n1 n2 n3", "", None),
    # Scale down R3 -> R1: remove the others, the leader itself last and only by handing over first.
    ("n2", "n1", "n1 n2 n3", "", ConfChange(type=A.REMOVE_NODE, node_id="n3")),
    ("n2", "n1", "n1 n2", "", Transfer("n1")),
    ("n1", "n1", "n1 n2", "", ConfChange(type=A.REMOVE_NODE, node_id="n2")),
    # Re-placing a peer: the replacement becomes a voter before the old peer is removed.
    ("n1", "n1 n2 n4", "n1 n2 n3", "", ConfChange(type=A.ADD_LEARNER, node_id="n4")),
    ("n1", "n1 n2 n4", "n1 n2 n3", "n4", ConfChange(type=A.PROMOTE_LEARNER, node_id="n4")),
    ("n1", "n1 n2 n4", "n1 n2 n3 n4", "", ConfChange(type=A.REMOVE_NODE, node_id="n3")),
    # A learner nobody wants any more is dropped.
    ("n1", "n1", "n1", "n5", ConfChange(type=A.REMOVE_NODE, node_id="n5")),
])
def test_next_change(me, desired, voters, learners, step):
    assert next_change(me, desired.split(), voters.split(), learners.split()) == step


def test_the_leader_never_removes_itself_without_a_desired_voter_to_hand_over_to():
    assert next_change("n2", ["n1"], ["n2"], ["n1"]) == ConfChange(type=A.PROMOTE_LEARNER, node_id="n1")
    assert next_change("n2", ["n9"], ["n2"], []) == ConfChange(type=A.ADD_LEARNER, node_id="n9")
