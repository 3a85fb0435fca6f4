"""`Status.reachable_followers`: where a leader that must hand over can send its leadership.

Method: a real five-voter `Cluster` (raft_network) ticked in rounds. After a check-quorum window a
follower cut off from the leader is no longer listed, the others are, the most caught-up first; a
follower lists nobody. Used by the stream repair worker so a leader whose store cannot serve hands over
to a live peer, not round-robin to a paused one (issue 14).
"""

from __future__ import annotations

from raft_network import Cluster

VOTERS = ["n1", "n2", "n3", "n4", "n5"]


def test_a_cut_off_follower_is_not_reachable_and_followers_list_nobody():
    cluster = Cluster(VOTERS)
    cluster.elect("n1")
    window = cluster.nodes["n1"].config.election_ticks
    cluster.run(window)
    assert cluster.nodes["n1"].status().reachable_followers == ("n2", "n3", "n4", "n5")
    assert cluster.nodes["n2"].status().reachable_followers == ()
    cluster.partition = [{"n1", "n2", "n3", "n5"}, {"n4"}]
    # Answers received before the cut count for the window in progress: two windows make sure.
    cluster.run(2 * window)
    assert cluster.leader() == "n1"
    assert cluster.nodes["n1"].status().reachable_followers == ("n2", "n3", "n5")


def test_the_most_caught_up_follower_comes_first():
    cluster = Cluster(VOTERS)
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"x")
    cluster.stabilize()
    # As if n3 answered this window but had not taken the last entry yet (the moment a lagging peer
    # is seen between two heartbeats).
    leader = cluster.nodes["n1"]
    leader.progress["n3"].recent_active = True
    leader.progress["n3"].match_index = leader.log.last_index - 1
    assert leader.status().reachable_followers[-1] == "n3"
    assert set(leader.status().reachable_followers) == {"n2", "n3", "n4", "n5"}
