"""Elections: randomized timeouts, pre-vote, one vote per term, election restriction, check-quorum,
leader stickiness, the no-op entry, leadership transfer.

Method: drive `Cluster` (real RaftNodes on the in-memory network of `raft_network`) or single nodes fed
hand-made messages, and check roles, terms and votes against the Raft paper (§5.2, §5.4.1) and the
thesis (§3.10 transfer, §9.6 pre-vote, §6.2 check-quorum).
"""

from __future__ import annotations

import random

import pytest
from raft_network import Cluster

from jsraft.raft import (
    AppendEntries, BadConfChange, EntryType, NotLeader, ProposalDropped, RaftConfig, RaftNode, RequestVote,
    RequestVoteResponse, RestoredState,
)


def three() -> Cluster:
    return Cluster(["n1", "n2", "n3"])


def fresh_node(node_id: str = "n1", **config) -> RaftNode:
    node = RaftNode(RaftConfig(node_id=node_id, **config), random.Random(7),
                    RestoredState.bootstrap(("n1", "n2", "n3")))
    node.advance(node.ready())
    return node


def test_randomized_election_timeout_is_in_range():
    seen = set()
    for seed in range(200):
        node = RaftNode(RaftConfig(node_id="n1", election_ticks=10), random.Random(seed),
                        RestoredState.bootstrap(("n1", "n2", "n3")))
        seen.add(node.randomized_election_ticks)
    assert seen == set(range(10, 20))


def test_follower_campaigns_after_its_timeout_and_not_before():
    node = fresh_node()
    for _ in range(node.randomized_election_ticks - 1):
        node.tick()
    assert node.role == "follower"
    node.tick()
    assert node.role == "pre-candidate" and node.current_term == 1  # pre-vote keeps the term


def test_single_voter_elects_itself_and_commits_its_noop():
    cluster = Cluster(["n1"])
    cluster.elect("n1")
    node = cluster.nodes["n1"]
    assert node.current_term == 2 and node.log.entry_at(node.log.last_index).type is EntryType.NOOP
    assert node.log.commit_index == node.log.last_index


def test_new_leader_appends_and_commits_a_noop_of_its_term():
    cluster = three()
    cluster.elect("n1")
    leader = cluster.nodes["n1"]
    last = leader.log.entry_at(leader.log.last_index)
    assert last.type is EntryType.NOOP and last.term == leader.current_term
    assert all(n.log.commit_index == last.index for n in cluster.nodes.values())


def test_failed_prevote_changes_no_term():
    cluster = three()
    cluster.elect("n1")
    cluster.partition = [{"n1", "n2"}, {"n3"}]
    cluster.run(100)
    assert cluster.nodes["n3"].current_term == cluster.nodes["n1"].current_term == 2


def test_without_prevote_an_isolated_node_raises_its_term():
    cluster = Cluster(["n1", "n2", "n3"], config={"pre_vote": False})
    cluster.elect("n1")
    cluster.partition = [{"n1", "n2"}, {"n3"}]
    cluster.run(100)
    assert cluster.nodes["n3"].current_term > 3


def test_one_vote_per_term():
    node = fresh_node()
    node.step(RequestVote(from_id="n2", to_id="n1", term=2, last_log_index=3, last_log_term=1))
    node.step(RequestVote(from_id="n3", to_id="n1", term=2, last_log_index=3, last_log_term=1))
    granted = [m for m in node.ready().messages if isinstance(m, RequestVoteResponse) and m.vote_granted]
    assert [m.to_id for m in granted] == ["n2"] and node.voted_for == "n2"


def test_the_same_vote_may_be_granted_again():
    node = fresh_node()
    for _ in range(2):
        node.step(RequestVote(from_id="n2", to_id="n1", term=2, last_log_index=3, last_log_term=1))
    assert all(m.vote_granted for m in node.ready().messages)


def test_election_restriction_rejects_a_less_up_to_date_candidate():
    cluster = three()
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"x")
    cluster.stabilize()
    voter = cluster.nodes["n2"]
    voter.step(RequestVote(from_id="n3", to_id="n2", term=5, last_log_index=4, last_log_term=2,
                           leadership_transfer=True))
    (response,) = [m for m in voter.ready().messages if isinstance(m, RequestVoteResponse)]
    assert not response.vote_granted


def test_leader_stickiness_ignores_votes_while_the_leader_is_alive():
    cluster = three()
    cluster.elect("n1")
    follower = cluster.nodes["n2"]
    for pre_vote in (True, False):
        follower.step(RequestVote(from_id="n3", to_id="n2", term=9, last_log_index=99, last_log_term=2,
                                  pre_vote=pre_vote))
    assert follower.current_term == 2 and follower.voted_for == "n1"
    # Refused in the follower's own term (nobody's term changes), with its commit for the candidate to learn.
    answers = [(m.term, m.vote_granted, m.commit_index) for m in follower.outbox]
    assert answers == [(2, False, follower.log.commit_index)] * 2
    follower.outbox.clear()
    # A transfer asked by the leader itself is the exception.
    follower.step(RequestVote(from_id="n3", to_id="n2", term=9, last_log_index=99, last_log_term=2,
                              leadership_transfer=True))
    # (The vote, seven terms above the durable one, waits until term 9 is durable: `vote_fence` inv. 2.)
    assert follower.current_term == 9 and follower.voted_for is None
    cluster.process_ready("n2")
    assert follower.voted_for == "n3"


def test_check_quorum_steps_down_a_leader_cut_off_from_its_majority():
    cluster = three()
    cluster.elect("n1")
    cluster.partition = [{"n1"}, {"n2", "n3"}]
    # Answers received before the cut count for the round in progress, so it takes at most two rounds.
    cluster.run(2 * cluster.nodes["n1"].config.election_ticks)
    assert cluster.nodes["n1"].role == "follower"


def test_without_check_quorum_a_cut_off_leader_stays():
    cluster = Cluster(["n1", "n2", "n3"], config={"check_quorum": False})
    cluster.elect("n1")
    cluster.partition = [{"n1"}, {"n2", "n3"}]
    cluster.run(50)
    assert cluster.nodes["n1"].role == "leader"


def test_a_stale_leader_learns_the_new_term_from_any_answer():
    cluster = three()
    cluster.elect("n1")
    cluster.partition = [{"n1"}, {"n2", "n3"}]
    for _ in range(30):  # n2 and n3 elect a new leader; n1 is not ticked, so it still thinks it leads
        for node_id in ("n2", "n3"):
            cluster.tick(node_id)
        cluster.stabilize()
    new_leader = "n2" if cluster.nodes["n2"].role == "leader" else "n3"
    assert cluster.nodes[new_leader].role == "leader" and cluster.nodes["n1"].role == "leader"
    cluster.partition = None
    cluster.tick("n1", cluster.nodes["n1"].config.heartbeat_ticks)  # a heartbeat from the old leader
    cluster.stabilize()
    assert cluster.nodes["n1"].role == "follower"
    cluster.run(2)
    assert cluster.nodes["n1"].leader_id == new_leader


def test_a_lower_term_prevote_is_answered_with_our_term():
    node = fresh_node()
    node.step(AppendEntries(from_id="n2", to_id="n1", term=5, leader_id="n2", prev_log_index=3,
                            prev_log_term=1, leader_commit=3))
    node.ready()
    node.step(RequestVote(from_id="n3", to_id="n1", term=3, last_log_index=3, last_log_term=1, pre_vote=True))
    (response,) = node.outbox
    assert isinstance(response, RequestVoteResponse) and response.term == 5 and not response.vote_granted


def test_transfer_leadership_catches_the_target_up_then_hands_over():
    cluster = three()
    cluster.elect("n1")
    cluster.partition = [{"n1", "n3"}, {"n2"}]
    cluster.nodes["n1"].propose(b"a")
    cluster.stabilize()
    cluster.partition = None
    cluster.nodes["n1"].transfer_leadership("n2")
    with pytest.raises(ProposalDropped, match="transferred"):
        cluster.nodes["n1"].propose(b"b")
    cluster.stabilize()
    assert cluster.leader() == "n2" and cluster.nodes["n2"].current_term == 3


def test_transfer_is_aborted_after_an_election_timeout():
    cluster = three()
    cluster.elect("n1")
    cluster.down.add("n2")  # the target never answers
    leader = cluster.nodes["n1"]
    leader.transfer_leadership("n2")
    cluster.run(leader.config.election_ticks)
    assert leader.role == "leader" and leader.lead_transferee is None
    leader.propose(b"accepted again")


def test_transfer_needs_a_voter_and_a_leader():
    cluster = three()
    cluster.elect("n1")
    with pytest.raises(BadConfChange, match="not a voter"):
        cluster.nodes["n1"].transfer_leadership("n9")
    with pytest.raises(NotLeader):
        cluster.nodes["n2"].transfer_leadership("n3")


def test_transfer_to_a_voter_known_to_be_repairing_is_refused():
    cluster = three()
    cluster.elect("n1")
    cluster.nodes["n1"].progress["n3"].repairing = True
    with pytest.raises(BadConfChange, match="repairing"):
        cluster.nodes["n1"].transfer_leadership("n3")


def test_propose_on_a_follower_names_the_leader():
    cluster = three()
    cluster.elect("n1")
    with pytest.raises(NotLeader) as raised:
        cluster.nodes["n2"].propose(b"x")
    assert raised.value.leader_id == "n1"
