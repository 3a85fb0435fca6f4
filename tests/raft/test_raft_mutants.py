"""The rule hooks have teeth: each `rule_*` method, overridden the way a simulator mutant will, lets the
bug it prevents happen; the real method prevents it.

Method: subclass `RaftNode` overriding one rule (exactly what `jsraft.testing` mutants will do), put the
mutant in a `Cluster` next to real nodes, and replay the failure the rule exists for. The same script
with the real class must stay safe. The Jepsen story (NATS 2.12.1): a committed entry lives on two of
three nodes; one of the two loses it to disk damage; the third, which never had it, is elected with the
damaged node's vote, and the acknowledged write is gone.
"""

from __future__ import annotations

import attrs
import pytest
from raft_network import Cluster

from jsraft.raft import RaftNode, RequestVote, RequestVoteResponse
from jsraft.testing.sim.mutants import (
    AckBeforeFsync,
    ForgetVoteOnRestart,
    NoPreVote,
    NoVoteFence,
    RepairingNodeVotes,
    TruncateOnCorruption,
)


def jepsen_story(n2_class: type[RaftNode], damage: str) -> Cluster:
    """n1 and n2 hold the committed entry `precious`; n2 damages it; n1 is down; n3 campaigns."""
    cluster = Cluster(["n1", "n2", "n3"], node_class={"n2": n2_class})
    cluster.elect("n1")
    cluster.partition = [{"n1", "n2"}, {"n3"}]
    index = cluster.nodes["n1"].propose(b"precious")
    cluster.stabilize()
    assert cluster.nodes["n1"].log.commit_index == index  # acknowledged to the client
    cluster.crash("n1")
    cluster.crash("n2")
    if damage == "corrupt":
        cluster.storages["n2"].corrupt(index)
    else:
        cluster.storages["n2"].truncate_log(index - 1)
    cluster.partition = None
    cluster.restart("n2")
    cluster.run(80)
    return cluster


def _holds_precious(cluster: Cluster, node_id: str) -> bool:
    log = cluster.nodes[node_id].log
    return any(e.data == b"precious" for e in log.entries)


@pytest.mark.parametrize("damage", ["corrupt", "truncate"])
def test_real_rules_keep_the_acknowledged_write(damage):
    cluster = jepsen_story(RaftNode, damage)
    assert cluster.leader() is None  # halted rather than wrong: n2 is repairing and refuses to vote
    assert cluster.nodes["n2"].repairing
    cluster.restart("n1")
    cluster.run(80)
    assert cluster.leader() is not None
    assert all(_holds_precious(cluster, n) for n in ("n1", "n2", "n3"))


def test_mutant_truncate_on_corruption_loses_the_acknowledged_write():
    cluster = jepsen_story(TruncateOnCorruption, "corrupt")
    leader = cluster.leader()
    assert leader in ("n2", "n3") and not _holds_precious(cluster, leader)


def test_mutant_repairing_node_votes_loses_the_acknowledged_write():
    cluster = jepsen_story(RepairingNodeVotes, "truncate")
    leader = cluster.leader()
    assert leader == "n3" and not _holds_precious(cluster, leader)


def test_mutant_ack_before_fsync_is_caught_by_the_ready_contract():
    cluster = Cluster(["n1", "n2", "n3"], node_class={"n2": AckBeforeFsync})
    with pytest.raises(AssertionError, match="not durable|durably holds|watermark"):
        cluster.elect("n1")
        cluster.nodes["n1"].propose(b"x")
        cluster.stabilize()


def test_mutant_no_prevote_lets_a_partitioned_node_depose_the_leader():
    for node_class, disrupted in ((RaftNode, False), (NoPreVote, True)):
        cluster = Cluster(["n1", "n2", "n3"], node_class={"n3": node_class})
        cluster.elect("n1")
        cluster.partition = [{"n1", "n2"}, {"n3"}]
        cluster.run(60)
        cluster.partition = None
        cluster.run(5)
        assert (cluster.nodes["n1"].current_term != 2) is disrupted


def test_mutant_forget_vote_on_restart_votes_twice_in_one_term():
    for node_class, second_vote in ((RaftNode, False), (ForgetVoteOnRestart, True)):
        cluster = Cluster(["n1", "n2", "n3"], node_class={"n2": node_class})
        cluster.stabilize()
        voter = cluster.nodes["n2"]
        voter.step(RequestVote(from_id="n1", to_id="n2", term=5, last_log_index=3, last_log_term=1))
        cluster.process_ready("n2")  # term 5 durable, then the vote (vote_fence invariant 2)
        cluster.process_ready("n2")
        assert voter.voted_for == "n1"
        cluster.queue.clear()
        cluster.restart("n2")
        voter = cluster.nodes["n2"]
        voter.step(RequestVote(from_id="n3", to_id="n2", term=5, last_log_index=3, last_log_term=1))
        granted = [m for m in voter.outbox if isinstance(m, RequestVoteResponse) and m.vote_granted]
        assert bool(granted) is second_vote


def test_mutant_no_vote_fence_votes_again_one_term_above_its_restored_term():
    # n3 grants n2 in term T+1, loses that hard-state write (restored at its term-T state, repairing), is
    # repaired by n1 in term T; then n1 asks for a vote in T+1. Only the real class refuses.
    for node_class, second_vote in ((RaftNode, False), (NoVoteFence, True)):
        cluster = Cluster(["n1", "n2", "n3"], node_class={"n3": node_class})
        cluster.elect("n1")
        cluster.stabilize()
        voter = cluster.nodes["n3"]
        term = voter.current_term
        older = cluster.storages["n3"].durable.hard_state
        voter.step(RequestVote(from_id="n2", to_id="n3", term=term + 1, last_log_index=99, last_log_term=term,
                               leadership_transfer=True))
        cluster.process_ready("n3")
        assert cluster.storages["n3"].durable.hard_state.voted_for == "n2"
        cluster.crash("n3")
        for state in (cluster.storages["n3"].durable, cluster.storages["n3"].written):
            state.hard_state = attrs.evolve(older, repairing=True)
        cluster.restart("n3")
        # The real class restores in the fence term T+1 (vote_fence invariant 4) and is repaired by a
        # leader elected above it; the mutant, unfenced, stays at T and is repaired by n1.
        cluster.run_until(lambda: not cluster.nodes["n3"].repairing)
        voter = cluster.nodes["n3"]
        assert voter.current_term == term if second_vote else voter.current_term >= term + 2
        voter.outbox.clear()
        voter.step(RequestVote(from_id="n1", to_id="n3", term=term + 1, last_log_index=99, last_log_term=term,
                               leadership_transfer=True))
        granted = [m for m in voter.outbox if isinstance(m, RequestVoteResponse) and m.vote_granted]
        assert bool(granted) is second_vote
