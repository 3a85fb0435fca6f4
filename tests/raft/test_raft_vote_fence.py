"""A vote lost to hard-state damage is fenced once the replica is repaired (issue 14, hole 3).

Method: the issue's case on a real three-voter in-memory `Cluster` (raft_network). n3 grants its vote to
n2 in the current term (n1 hands its leadership over); then its newest hard-state slot is lost: recovery
falls back to the older slot, which holds that term with no vote, and persists `repairing` (wal recovery
decision 2). n3 is repaired by n2 in that same term and restarts. A delayed RequestVote of that term from
n1 must then be refused; before the fix it was granted, a second vote in one term.
"""

from __future__ import annotations

import attrs
from raft_network import Cluster

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
    cluster.restart("n3")
    assert cluster.nodes["n3"].repairing
    cluster.run(5)
    n3 = cluster.nodes["n3"]
    assert not n3.repairing and n3.current_term == term and cluster.leader() == "n2"
    # Restarted once more (a follower that knows the term's leader refuses votes anyway; after a restart
    # it knows none, and only its persisted vote stands between it and a second vote in the term).
    cluster.crash("n3")
    n3 = cluster.restart("n3")
    assert n3.current_term == term and n3.leader_id is None
    n3.outbox.clear()
    n3.step(RequestVote(from_id="n1", to_id="n3", term=term, last_log_index=99, last_log_term=term,
                        leadership_transfer=True))
    assert not any(m.vote_granted for m in n3.outbox if isinstance(m, RequestVoteResponse))
