"""Quiescence decisions (raft/quiesce.py): when a leader or a follower may stop being ticked.

Method: a real `raft_network.Cluster` of three `RaftNode`s driven through the production cycle; each
question is asked of the cores in states built by real traffic (elected and settled, a proposal not yet
replicated, a follower partitioned away and behind, a read pending, a leadership transfer), and the
functions are checked to change nothing in the core they read.
"""

from __future__ import annotations

from raft_network import Cluster

from jsraft.raft.quiesce import follower_may_quiesce, leader_may_quiesce, members


def _settled() -> Cluster:
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.run(3)  # heartbeats carry the commit index to both followers
    cluster.stabilize()
    return cluster


def _settle(cluster: Cluster) -> None:
    """Deliver everything, then a heartbeat round so the commit index reaches every follower."""
    cluster.stabilize()
    cluster.run(2)
    cluster.stabilize()


def test_a_settled_leader_and_its_caught_up_followers_may_quiesce():
    cluster = _settled()
    leader = cluster.nodes["n1"]
    assert members(leader) == ("n2", "n3")
    assert leader_may_quiesce(leader)
    term, last = leader.current_term, leader.log.last_index
    for follower in ("n2", "n3"):
        assert follower_may_quiesce(cluster.nodes[follower], term, "n1", last)
        assert not follower_may_quiesce(cluster.nodes[follower], term + 1, "n1", last)  # another term
        assert not follower_may_quiesce(cluster.nodes[follower], term, "n3", last)  # not its leader
        assert not follower_may_quiesce(cluster.nodes[follower], term, "n1", last + 1)  # not that log
    assert not follower_may_quiesce(leader, term, "n1", last)  # a leader is no follower


def test_the_questions_change_nothing_in_the_core():
    cluster = _settled()
    before = {n: _fingerprint(node) for n, node in cluster.nodes.items()}
    leader_may_quiesce(cluster.nodes["n1"])
    follower_may_quiesce(cluster.nodes["n2"], cluster.nodes["n1"].current_term, "n1", 0)
    assert {n: _fingerprint(node) for n, node in cluster.nodes.items()} == before


def _fingerprint(node) -> tuple:
    log = node.log
    progress = sorted((peer, p.match_index, p.next_index, p.state, p.sent_commit, p.recent_active, tuple(p.inflight))
                      for peer, p in node.progress.items())
    return (node.role, node.current_term, node.voted_for, node.leader_id, node.election_elapsed,
            node.heartbeat_elapsed, log.commit_index, log.applied_index, log.last_index, log.has_writes(),
            len(node.outbox), node.ready_outstanding, tuple(progress))


def test_a_leader_with_an_uncommitted_proposal_may_not_quiesce_until_replicated():
    cluster = _settled()
    leader = cluster.nodes["n1"]
    leader.propose(b"x")
    assert not leader_may_quiesce(leader)
    _settle(cluster)
    assert leader_may_quiesce(leader)


def test_a_leader_with_a_follower_behind_may_not_quiesce_nor_may_that_follower():
    cluster = _settled()
    leader = cluster.nodes["n1"]
    cluster.partition = [{"n1", "n2"}, {"n3"}]
    leader.propose(b"x")
    _settle(cluster)
    assert leader.log.commit_index == leader.log.last_index  # n2 made the majority
    assert not leader_may_quiesce(leader)  # n3 has not matched the last index
    # n3's node not live: not waited for, but only once check-quorum marked it inactive, so the leader's
    # status never names it reachable while the group sleeps.
    assert leader.progress["n3"].recent_active and not leader_may_quiesce(leader, live=lambda m: m != "n3")
    cluster.run(2 * leader.config.election_ticks)
    assert not leader.progress["n3"].recent_active and leader.role == "leader"
    assert leader_may_quiesce(leader, live=lambda member: member != "n3")
    assert not leader_may_quiesce(leader, live=lambda member: False)  # but never without a live majority
    assert not follower_may_quiesce(cluster.nodes["n3"], leader.current_term, "n1", leader.log.last_index)
    assert follower_may_quiesce(cluster.nodes["n2"], leader.current_term, "n1", leader.log.last_index)
    cluster.partition = None
    cluster.run(2)
    _settle(cluster)
    assert leader_may_quiesce(leader)


def test_a_pending_read_or_transfer_keeps_a_leader_awake():
    cluster = _settled()
    leader = cluster.nodes["n1"]
    leader.read_index(b"r")
    assert not leader_may_quiesce(leader)
    cluster.stabilize()
    cluster.process_ready("n1")  # the read state leaves in a Ready
    cluster.stabilize()
    assert leader_may_quiesce(leader)
    leader.transfer_leadership("n2")
    assert leader.lead_transferee is not None or leader.role != "leader"
    assert not leader_may_quiesce(leader)
