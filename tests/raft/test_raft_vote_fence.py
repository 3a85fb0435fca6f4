"""A vote lost to hard-state damage is fenced once the replica is repaired (issue 14, hole 3).

Method: the issue's case on a real three-voter in-memory `Cluster` (raft_network). n3 grants its vote to
n2 in the current term (n1 hands its leadership over); then its newest hard-state slot is lost: recovery
falls back to the older slot, which holds that term with no vote, and persists `repairing` (wal recovery
decision 2). n3 restarts in its fence term (the restored term + 1, `vote_fence` invariant 4) with no vote:
a delayed RequestVote of the lost vote's term, or of the fence term, is refused, before the repair, after
it (by a leader elected above the fence) and after another restart; before the fix the first was granted,
a second vote in one term. The same one term higher: n3 grants a RequestVote of term T+1, loses that write
and falls back to its term-T state; it restarts in T+1, so the term-T leader no longer repairs it (that
acknowledgement was the leader-completeness hole of simulator seeds 40 and 102), refuses T+1 (after the
repair and after a restart) yet grants the term after the one it was repaired in; its own campaign skips
T+1. And the one-step rule the fence rests on: a vote is written at most one term above the durable term.
Each test was checked to fail with the fence (or the rule) removed.
"""

from __future__ import annotations

import attrs
from raft_network import Cluster

from jsraft.raft import vote_fence
from jsraft.raft.messages import RequestVote, RequestVoteResponse


def test_a_replica_repaired_after_losing_its_vote_grants_no_second_vote_in_that_term():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"v")
    cluster.stabilize()
    cluster.nodes["n1"].transfer_leadership("n2")  # n2 campaigns at once (TimeoutNow)
    cluster.stabilize()
    n3 = cluster.nodes["n3"]
    term = n3.current_term
    assert n3.voted_for == "n2" and cluster.leader() == "n2"

    cluster.crash("n3")
    storage = cluster.storages["n3"]
    for state in (storage.durable, storage.written):  # the older slot: this term, no vote yet
        state.hard_state = attrs.evolve(state.hard_state, current_term=term, voted_for=None, repairing=True)
    n3 = cluster.restart("n3")
    # Restored in its fence term, with no vote (vote_fence invariant 4): the delayed RequestVote of the
    # lost vote's term is refused, and so is one of the fence term itself.
    assert n3.repairing and n3.current_term == n3.vote_fence_term == term + 1 and n3.voted_for is None
    assert not _vote(n3, frm="n1", term=term) and not _vote(n3, frm="n1", term=term + 1)
    # n2's term-`term` leadership is refused by n3; the group elects again above the fence and repairs n3.
    cluster.run_until(lambda: cluster.leader() is not None and not cluster.nodes["n3"].repairing)
    assert cluster.nodes[cluster.leader()].current_term >= term + 2
    # Restarted once more: after a restart it knows no leader, and only the persisted fence stands
    # between it and a second vote in those terms.
    cluster.crash("n3")
    n3 = cluster.restart("n3")
    assert n3.leader_id is None and n3.vote_fence_term == term + 1
    assert not _vote(n3, frm="n1", term=term) and not _vote(n3, frm="n1", term=term + 1)


def _vote(node, *, frm: str, term: int) -> bool:
    """Step a RequestVote of `term` from `frm` into `node`; True if it was granted."""
    node.outbox.clear()
    node.step(RequestVote(from_id=frm, to_id=node.id, term=term, last_log_index=99, last_log_term=term,
                          leadership_transfer=True))
    return any(m.vote_granted for m in node.outbox if isinstance(m, RequestVoteResponse))


def _lose_newest_hard_state(cluster: Cluster, node_id: str, older) -> None:
    """Crash `node_id`; its newest hard-state write is lost and recovery falls back to `older`, repairing
    (what wal recovery does with a damaged witness slot no newer segment record covers)."""
    cluster.crash(node_id)
    storage = cluster.storages[node_id]
    for state in (storage.durable, storage.written):
        state.hard_state = attrs.evolve(older, repairing=True)


def test_a_vote_lost_one_term_above_the_repair_leaders_term_is_not_cast_again():
    # n3 voted for n2 in term T+1 (n2's campaign that went nowhere), lost that write, fell back to its
    # term-T state, was repaired by n1 (still leading term T); a RequestVote of term T+1 from n1 must then
    # be refused — after the repair, and again after a restart (the fence is persisted).
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"v")
    cluster.stabilize()
    n3 = cluster.nodes["n3"]
    term = n3.current_term
    older = cluster.storages["n3"].durable.hard_state
    assert _vote(n3, frm="n2", term=term + 1), "the setup: n3 grants n2 in term T+1"
    cluster.process_ready("n3")
    assert cluster.storages["n3"].durable.hard_state.voted_for == "n2"

    _lose_newest_hard_state(cluster, "n3", older)
    n3 = cluster.restart("n3")
    # Restored in the fence term T+1 (vote_fence invariant 4), not at T: it no longer acknowledges n1's
    # term-T entries, which a leader elected in T+1 with the lost vote might not hold (simulator
    # `--faults all,lost-vote` seeds 40, 102).
    assert n3.repairing and n3.current_term == term + 1 and n3.voted_for is None
    assert not _vote(n3, frm="n1", term=term + 1)
    cluster.run_until(lambda: cluster.leader() is not None and not cluster.nodes["n3"].repairing)
    elected = cluster.nodes[cluster.leader()].current_term
    assert elected >= term + 2
    assert not _vote(cluster.nodes["n3"], frm="n1", term=term + 1)

    cluster.crash("n3")
    n3 = cluster.restart("n3")
    assert not n3.repairing and n3.current_term == elected and n3.vote_fence_term == term + 1
    assert not _vote(n3, frm="n1", term=term + 1)
    cluster.process_ready("n3")
    # The fence ends there: a later election gets n3's vote (a durable term first, one step).
    assert _vote(n3, frm="n1", term=elected + 1)


def test_the_repaired_replicas_own_campaign_skips_the_fenced_term():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.stabilize()
    n3 = cluster.nodes["n3"]
    term = n3.current_term
    older = cluster.storages["n3"].durable.hard_state
    assert _vote(n3, frm="n2", term=term + 1)
    cluster.process_ready("n3")
    _lose_newest_hard_state(cluster, "n3", older)
    n3 = cluster.restart("n3")
    assert n3.current_term == n3.vote_fence_term == term + 1  # restored in the fence term (invariant 4)
    cluster.run_until(lambda: cluster.leader() is not None and not cluster.nodes["n3"].repairing)
    # Its leader gone, n3's own campaign (or its vote) is above the fence, never in it.
    cluster.crash(cluster.leader())
    assert vote_fence.campaign_term(cluster.nodes["n3"]) >= term + 2
    cluster.run_until(lambda: cluster.leader() is not None)
    assert cluster.nodes[cluster.leader()].current_term >= term + 2


def test_a_vote_is_written_at_most_one_term_above_the_durable_term():
    # The one-step rule that bounds what a single lost write can hold: a RequestVote two terms above the
    # durable term moves the replica to that term without a vote; the candidate's retry is granted.
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    n3 = cluster.nodes["n3"]
    durable = n3.persisted_hard_state.current_term
    assert not _vote(n3, frm="n2", term=durable + 2)
    assert n3.current_term == durable + 2 and n3.voted_for is None
    cluster.process_ready("n3")
    assert _vote(n3, frm="n2", term=durable + 2)
