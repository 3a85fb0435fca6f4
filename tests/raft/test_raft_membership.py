"""Single-server membership changes with learners.

Method: encode/decode and `apply_to_conf` as pure functions; proposals and their effects through a real
`Cluster` (a new node starts empty and learns the whole membership history from the log).
"""

from __future__ import annotations

import pytest
from raft_network import Cluster

from jsraft.raft import (
    BadConfChange, ConfChange, ConfChangeType, ConfState, ProposalDropped, RequestVoteResponse,
)
from jsraft.raft.membership import apply_to_conf, decode_conf_change, encode_conf_change

A = ConfChangeType


def change(kind: ConfChangeType, node_id: str) -> ConfChange:
    return ConfChange(type=kind, node_id=node_id)


@pytest.mark.parametrize("kind", list(ConfChangeType))
def test_conf_change_round_trips(kind):
    assert decode_conf_change(encode_conf_change(change(kind, "node-7"))) == change(kind, "node-7")


def test_apply_to_conf():
    conf = ConfState(voters=("n1", "n2"))
    conf = apply_to_conf(conf, change(A.ADD_LEARNER, "n3"))
    assert conf == ConfState(voters=("n1", "n2"), learners=("n3",))
    conf = apply_to_conf(conf, change(A.PROMOTE_LEARNER, "n3"))
    assert conf == ConfState(voters=("n1", "n2", "n3"))
    conf = apply_to_conf(conf, change(A.REMOVE_NODE, "n1"))
    assert conf == ConfState(voters=("n2", "n3"))


@pytest.mark.parametrize("conf, bad, words", [
    (ConfState(voters=("n1",)), change(A.ADD_VOTER, "n1"), "already"),
    (ConfState(voters=("n1",), learners=("n2",)), change(A.ADD_VOTER, "n2"), "promote"),
    (ConfState(voters=("n1",)), change(A.PROMOTE_LEARNER, "n2"), "not a learner"),
    (ConfState(voters=("n1",)), change(A.REMOVE_NODE, "n1"), "last voter"),
    (ConfState(voters=("n1",)), change(A.REMOVE_NODE, "n9"), "not a member"),
])
def test_changes_that_do_not_apply_are_refused(conf, bad, words):
    with pytest.raises(BadConfChange, match=words):
        apply_to_conf(conf, bad)


def grown_cluster() -> Cluster:
    cluster = Cluster(["n1", "n2", "n3"], config={"learner_catchup_entries_max": 2})
    cluster.elect("n1")
    cluster.add_node("n4")
    return cluster


def test_a_new_node_learns_the_membership_from_the_log_and_never_votes_as_a_learner():
    cluster = grown_cluster()
    cluster.nodes["n1"].propose_conf_change(change(A.ADD_LEARNER, "n4"))
    cluster.stabilize()
    assert all(n.conf == ConfState(voters=("n1", "n2", "n3"), learners=("n4",)) for n in cluster.nodes.values())
    cluster.partition = [{"n1"}, {"n2", "n3", "n4"}]
    cluster.run(60)
    assert cluster.nodes["n4"].role == "follower" and cluster.leader() in ("n2", "n3")


def test_promotion_waits_until_the_learner_caught_up():
    cluster = grown_cluster()
    leader = cluster.nodes["n1"]
    leader.propose_conf_change(change(A.ADD_LEARNER, "n4"))
    cluster.stabilize()
    cluster.partition = [{"n1", "n2", "n3"}, {"n4"}]
    for i in range(5):
        leader.propose(f"v{i}".encode())
    cluster.stabilize()
    with pytest.raises(ProposalDropped, match="not caught up"):
        leader.propose_conf_change(change(A.PROMOTE_LEARNER, "n4"))
    cluster.partition = None
    cluster.run(3)
    leader.propose_conf_change(change(A.PROMOTE_LEARNER, "n4"))
    cluster.stabilize()
    assert cluster.nodes["n4"].conf.voters == ("n1", "n2", "n3", "n4")


def test_one_membership_change_at_a_time():
    cluster = grown_cluster()
    leader = cluster.nodes["n1"]
    leader.propose_conf_change(change(A.ADD_LEARNER, "n4"))
    with pytest.raises(ProposalDropped, match="already in progress"):
        leader.propose_conf_change(change(A.REMOVE_NODE, "n3"))
    cluster.stabilize()
    leader.propose_conf_change(change(A.REMOVE_NODE, "n4"))


def test_a_new_leader_changes_membership_only_after_committing_in_its_term():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.nodes["n1"].campaign()
    cluster.deliver_until(lambda: cluster.nodes["n1"].role == "leader")
    assert cluster.nodes["n1"].role == "leader"
    with pytest.raises(ProposalDropped, match="not committed an entry of its term"):
        cluster.nodes["n1"].propose_conf_change(change(A.ADD_LEARNER, "n4"))


def test_an_invalid_change_is_refused_before_it_reaches_the_log():
    cluster = grown_cluster()
    last = cluster.nodes["n1"].log.last_index
    with pytest.raises(BadConfChange):
        cluster.nodes["n1"].propose_conf_change(change(A.PROMOTE_LEARNER, "n4"))
    assert cluster.nodes["n1"].log.last_index == last


def test_removing_the_leader_makes_it_step_down_after_the_commit_is_spread():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].propose_conf_change(change(A.REMOVE_NODE, "n1"))
    cluster.stabilize()
    assert cluster.nodes["n1"].role == "follower"
    assert all(cluster.nodes[n].conf.voters == ("n2", "n3") for n in ("n2", "n3"))
    cluster.run(60)
    assert cluster.leader() in ("n2", "n3")
    assert not cluster.nodes["n1"].is_promotable()


def test_quorum_follows_the_membership():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].propose_conf_change(change(A.REMOVE_NODE, "n3"))
    cluster.stabilize()
    cluster.crash("n3")
    cluster.nodes["n1"].propose(b"needs n1 and n2")
    cluster.stabilize()
    assert cluster.apps["n2"].values == ["needs n1 and n2"]


def _candidate_holding_an_uncommitted_removal() -> tuple[Cluster, int, int]:
    """n2 holds n1's REMOVE_NODE n3 entry without knowing it committed; n1 is gone; n2 starts a pre-vote."""
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    index = cluster.nodes["n1"].propose_conf_change(change(A.REMOVE_NODE, "n3"))
    cluster.process_ready("n1")
    for message in [m for m in cluster.queue if m.to_id == "n2"]:
        cluster.nodes["n2"].step(message)
    cluster.queue.clear()
    cluster.process_ready("n2")
    cluster.queue.clear()
    cluster.crash("n1")
    candidate = cluster.nodes["n2"]
    while candidate.role != "pre-candidate":
        candidate.tick()
    assert candidate.log.commit_index < index and "n3" in candidate.conf.voters
    return cluster, index, candidate.log.term_at(index)


def test_a_candidate_learns_a_commit_from_a_vote_response_and_applies_the_membership_in_it():
    """A removed voter with a longer log refuses the candidate, but tells it the commit: the candidate then
    counts votes in the configuration the group is really in (else: stuck needing the removed node)."""
    cluster, index, term = _candidate_holding_an_uncommitted_removal()
    candidate = cluster.nodes["n2"]
    candidate.step(RequestVoteResponse(from_id="n3", to_id="n2", term=candidate.current_term, vote_granted=False,
                                       pre_vote=True, commit_index=index, commit_term=term))
    assert candidate.log.commit_index == index
    assert candidate.conf.voters == ("n1", "n2")


@pytest.mark.parametrize("claim", ["other-term", "beyond-log"])
def test_a_commit_claim_for_an_entry_the_candidate_does_not_hold_is_ignored(claim):
    cluster, index, term = _candidate_holding_an_uncommitted_removal()
    candidate = cluster.nodes["n2"]
    commit_before = candidate.log.commit_index
    claimed = (index, term + 1) if claim == "other-term" else (candidate.log.last_index + 1, term)
    candidate.step(RequestVoteResponse(from_id="n3", to_id="n2", term=candidate.current_term, vote_granted=False,
                                       pre_vote=True, commit_index=claimed[0], commit_term=claimed[1]))
    assert candidate.log.commit_index == commit_before and "n3" in candidate.conf.voters


def test_an_entry_the_removed_voter_alone_held_back_commits_once_its_removal_applies():
    """n1 and n2; n1 appends "remove n2" and then X. n2 acknowledges only the removal, then is gone.
    Once the removal commits and applies, n1 is the only voter and holds X: X commits without any further
    message (etcd's applyConfChange re-checks the commit for the same reason). Before the fix, nothing
    re-checked it: a stream group shrunk to one voter waited for ever on such an entry."""
    cluster = Cluster(["n1", "n2"])
    cluster.elect("n1")
    leader = cluster.nodes["n1"]
    removal = leader.propose_conf_change(change(A.REMOVE_NODE, "n2"))
    assert cluster.process_ready("n1")
    x = leader.propose(b"x")
    assert cluster.process_ready("n1")
    assert cluster.deliver_one().to_id == "n2"  # the removal's AppendEntries
    assert cluster.process_ready("n2")  # n2 persists it and answers
    assert cluster.deliver_one().to_id == "n2"  # X's AppendEntries: stepped, never persisted nor answered
    answer = cluster.deliver_one()  # n2's acknowledgement of the removal only
    assert answer is not None and answer.to_id == "n1"
    cluster.crash("n2")
    while cluster.process_ready("n1"):
        pass
    assert leader.conf.voters == ("n1",)
    assert leader.log.commit_index >= x > removal
    assert cluster.apps["n1"].values[-1] == "x"
