"""An observer (`raft.core` invariant 6, lame duck mode): it never stands for election — no pre-vote,
campaign or TimeoutNow of its own — in a group with another voter, and still votes, replicates and
acknowledges; a single voter keeps campaigning; a leadership it holds stays until handed over.

Method: `raft_network.Cluster` (real RaftNodes on an in-memory network, seeded), with the observer flag
set as `NodeRuntime.stand_aside` sets it. Over 30 seeds the leader is lost while an observer and one
other voter remain: without the rule the observer wins some of those elections (it is as eligible as
the other), with it the other wins every one, with the observer's vote.
"""

from __future__ import annotations

import pytest
from raft_network import Cluster

from jsraft.raft import RequestVote

SEEDS = range(30)


def stood(cluster: Cluster, node_id: str) -> list[str]:
    """What the node did that only a node standing for election does."""
    return [event for event in cluster.events if event.startswith(f"{node_id}: ")
            and event.split()[1] in ("pre-candidate", "candidate", "leader")] + [
        f"sent {message!r}" for message in cluster.delivered
        if isinstance(message, RequestVote) and message.from_id == node_id]


@pytest.mark.parametrize("seed", SEEDS)
def test_with_the_leader_gone_the_other_voter_wins_with_the_observers_vote(seed):
    cluster = Cluster(["n1", "n2", "n3"], seed=seed)
    cluster.elect("n1")
    cluster.nodes["n2"].observer = True
    cluster.events.clear()
    cluster.delivered.clear()
    cluster.crash("n1")
    cluster.run_until(lambda: cluster.leader() == "n3")
    cluster.run(5 * cluster.nodes["n2"].config.election_ticks)  # and it stays so
    assert cluster.leader() == "n3" and stood(cluster, "n2") == []
    assert cluster.nodes["n2"].voted_for == "n3"  # n3 had no majority without it
    index = cluster.nodes["n3"].propose(b"after")  # the observer still acknowledges: commit needs it
    cluster.stabilize()
    assert cluster.nodes["n3"].log.commit_index >= index and cluster.nodes["n2"].log.last_index >= index


def test_without_the_rule_the_observer_would_have_won_some_of_those_elections():
    """The check above can fail: the same runs with the flag unset elect n2 in some seeds."""
    won = 0
    for seed in SEEDS:
        cluster = Cluster(["n1", "n2", "n3"], seed=seed)
        cluster.elect("n1")
        cluster.crash("n1")
        cluster.run_until(lambda cluster=cluster: cluster.leader() in ("n2", "n3"))
        won += cluster.leader() == "n2"
    assert 0 < won < len(SEEDS)


def test_an_observer_ignores_a_transfer_to_it_and_the_leader_keeps_leading():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n2"].observer = True
    cluster.events.clear()
    cluster.delivered.clear()
    leader = cluster.nodes["n1"]
    leader.transfer_leadership("n2")  # its TimeoutNow is not acted on; the transfer lapses
    cluster.run(2 * leader.config.election_ticks)
    assert cluster.leader() == "n1" and leader.lead_transferee is None and stood(cluster, "n2") == []
    leader.propose(b"accepted again")


def test_an_observing_leader_leads_until_it_hands_over_and_never_comes_back():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].observer = True
    cluster.run(3 * cluster.nodes["n1"].config.election_ticks)
    assert cluster.leader() == "n1"  # observing takes nothing away from a leader by itself
    cluster.nodes["n1"].transfer_leadership("n2")
    cluster.stabilize()
    assert cluster.leader() == "n2"
    cluster.events.clear()
    cluster.delivered.clear()
    cluster.crash("n2")
    cluster.run_until(lambda: cluster.leader() == "n3")
    cluster.run(5 * cluster.nodes["n1"].config.election_ticks)
    assert cluster.leader() == "n3" and stood(cluster, "n1") == []


def test_a_single_voter_observer_still_campaigns_and_leads():
    cluster = Cluster(["n1"])
    cluster.nodes["n1"].observer = True
    cluster.run_until(lambda: cluster.leader() == "n1")
    assert cluster.nodes["n1"].status().observer
