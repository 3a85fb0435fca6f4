"""A member that lost its storage with no bound on its votes learns the term from every voter first
(issue #14: the double loss — the node's record of started groups AND the group's directory lost).

Method: the simulator's failing case on a real three-voter in-memory `Cluster` (raft_network). n1 leads
term T; n2 campaigns in T+1 (TimeoutNow: it makes T+1 durable before it asks) and only n3 hears it: n3
grants, makes that vote durable, and crashes before its answer leaves. n3's whole storage is then lost and
nothing bounds the term of its lost vote (`RestoredState.term_query_voters`). Before every voter answered
its `TermQuery`, n3 acknowledges no append, grants no vote, campaigns not and persists nothing; n1's answer
alone (a majority with n3) is not enough — only n2, the candidate that got the lost vote, holds T+1. Once
both answered, n3 is fenced through the highest term and starts in it with no vote, so n1's RequestVote of
T+1 is refused; it then rejoins and is repaired. The same scenario with the mutant `no-term-query` (the
rule skipped) grants that second vote in T+1: the test of the mutant is the proof that the others have
teeth (each was also run with `rule_term_query_voters` returning None and failed).
"""

from __future__ import annotations

from raft_network import Cluster, StorageState

from jsraft.raft import RaftNode, term_query
from jsraft.raft.messages import (
    AppendEntries, AppendEntriesResponse, Message, RequestVote, RequestVoteResponse, TermQuery, TermQueryResponse,
    TimeoutNow,
)
from jsraft.testing.sim.mutants import NoTermQuery


def _lost_vote(node_class: type[RaftNode] = RaftNode) -> tuple[Cluster, int]:
    """n3 voted for n2 in T+1 (only n2 and n3 know T+1), then lost all its storage. Returns (cluster, T)."""
    cluster = Cluster(["n1", "n2", "n3"], node_class={"n3": node_class})
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"v")
    cluster.stabilize()
    term = cluster.nodes["n1"].current_term
    n2 = cluster.nodes["n2"]
    n2.step(TimeoutNow(from_id="n1", to_id="n2", term=term))  # campaigns in T+1 at once, no pre-vote
    cluster.process_ready("n2")  # T+1 and its own vote durable before the RequestVotes leave
    assert n2.persisted_hard_state.current_term == term + 1
    requests = [m for m in cluster.queue if isinstance(m, RequestVote)]
    cluster.queue.clear()
    n3 = cluster.nodes["n3"]
    n3.step(next(m for m in requests if m.to_id == "n3"))
    cluster.process_ready("n3")
    assert cluster.storages["n3"].durable.hard_state.voted_for == "n2", "the setup: n3's vote is durable"
    cluster.crash("n3")  # before its answer reached n2
    storage = cluster.storages["n3"]
    storage.durable, storage.written = StorageState(), StorageState()
    storage.storage_uuid_changed = True
    storage.term_query_voters = ("n1", "n2", "n3")
    cluster.restart("n3")
    return cluster, term


def _step(node: RaftNode, message: Message) -> list[Message]:
    node.outbox.clear()
    node.step(message)
    return list(node.outbox)


def _vote_request(term: int, frm: str = "n1") -> RequestVote:
    return RequestVote(from_id=frm, to_id="n3", term=term, last_log_index=99, last_log_term=term,
                       leadership_transfer=True)


def _granted(node: RaftNode, term: int) -> bool:
    return any(isinstance(m, RequestVoteResponse) and m.vote_granted for m in _step(node, _vote_request(term)))


def test_before_every_voter_answered_the_member_acknowledges_votes_and_persists_nothing():
    cluster, term = _lost_vote()
    n3 = cluster.nodes["n3"]
    assert n3.term_query is not None and n3.status().repairing
    assert term_query.WAITING_REASON in (n3.status().repair_reason or "")
    heartbeat = AppendEntries(from_id="n1", to_id="n3", term=term, leader_id="n1", prev_log_index=0,
                              prev_log_term=0, leader_commit=0, heartbeat=True)
    assert _step(n3, heartbeat) == [], "no acknowledgement (nor refusal) of the term-T leader"
    assert _step(n3, _vote_request(term + 1)) == [] and _step(n3, _vote_request(term + 5)) == []
    assert n3.current_term < term and n3.voted_for is None, "no term learned from an append or a vote"
    n3.outbox.clear()
    for _ in range(3 * n3.config.election_ticks):
        n3.tick()
    assert n3.outbox and all(isinstance(m, TermQuery) for m in n3.outbox), "it only asks"
    assert n3.role == "follower"
    cluster.process_ready("n3")
    assert cluster.storages["n3"].durable.hard_state == StorageState().hard_state, "nothing persisted"


def test_a_majority_of_answers_is_not_enough_the_candidate_of_the_lost_vote_is_among_them():
    cluster, term = _lost_vote()
    since = len(cluster.delivered)
    cluster.partition = [{"n1", "n3"}, {"n2"}]  # n1 answers (term T); n2, the only one at T+1, cannot
    cluster.run(3 * cluster.nodes["n3"].config.election_ticks)
    n3 = cluster.nodes["n3"]
    assert n3.term_query is not None and n3.term_query.waiting == {"n2"}
    assert n3.term_query.highest_term == term
    assert not _granted(n3, term + 1), "still refuses the second vote in T+1"
    assert not any(isinstance(m, AppendEntriesResponse) and m.from_id == "n3" for m in cluster.delivered[since:]), \
        "n3 acknowledged nothing of the term-T leader it hears"

    cluster.partition = None
    cluster.run_until(lambda: cluster.nodes["n3"].term_query is None)
    n3 = cluster.nodes["n3"]
    assert n3.vote_fence_term >= term + 1 and n3.current_term == n3.vote_fence_term
    assert n3.voted_for is None
    assert not _granted(n3, term + 1), "fenced through n2's term: no second vote in T+1"
    cluster.process_ready("n3")
    assert cluster.storages["n3"].durable.hard_state.vote_fence_term == n3.vote_fence_term, "the fence is durable"
    # It rejoins: a leader above the fence repairs it.
    cluster.run_until(lambda: cluster.leader() is not None and not cluster.nodes["n3"].repairing)
    assert cluster.nodes[cluster.leader()].current_term > term + 1


def test_without_the_query_the_same_member_votes_twice_in_one_term():
    # The mutant `no-term-query` (the rule skipped): restored at term 1, fenced through it only.
    # Under the same partition as above, the term-T leader repairs it (an acknowledgement of a leader older
    # than its lost vote), and then it grants n1 a vote in T+1, where it voted for n2 before it lost it.
    cluster, term = _lost_vote(NoTermQuery)
    assert cluster.nodes["n3"].term_query is None and cluster.nodes["n3"].current_term < term
    cluster.partition = [{"n1", "n3"}, {"n2"}]
    cluster.run_until(lambda: not cluster.nodes["n3"].repairing)
    n3 = cluster.nodes["n3"]
    assert n3.current_term == term and n3.leader_id == "n1"
    assert _granted(n3, term + 1), "the double vote the query prevents"


def test_a_restart_before_the_answers_is_still_term_unknown():
    cluster, term = _lost_vote()
    cluster.process_ready("n3")
    n3 = cluster.restart("n3")  # nothing was persisted, so the restore finds the same lost storage
    assert n3.term_query is not None and n3.term_query.waiting == {"n1", "n2"}
    cluster.run_until(lambda: cluster.nodes["n3"].term_query is None)
    assert cluster.nodes["n3"].vote_fence_term >= term + 1


def test_a_stale_answer_does_not_count_and_an_unknown_one_raises_no_fence():
    cluster, term = _lost_vote()
    n3 = cluster.nodes["n3"]
    query = n3.term_query
    assert query is not None
    stale = TermQueryResponse(from_id="n2", to_id="n3", term=term + 9, query_id=query.query_id + 2)
    n3.step(stale)
    assert query.waiting == {"n1", "n2"}, "an answer to another query (an earlier life's) never counts"
    # "Term unknown" (n2 lost everything too) ends the wait for n2 without raising the fence; n1's known
    # term then ends the query one above it (the member's own candidacy, `term_query.finish`).
    n3.step(TermQueryResponse(from_id="n2", to_id="n3", term=term + 9, query_id=query.query_id, term_known=False))
    assert query.waiting == {"n1"} and query.highest_term == 0
    n3.step(TermQueryResponse(from_id="n1", to_id="n3", term=term, query_id=query.query_id))
    assert n3.term_query is None and n3.vote_fence_term == n3.current_term == term + 1
    # A term-unknown member says so when asked: its term proves nothing.
    cluster2, _ = _lost_vote()
    n3 = cluster2.nodes["n3"]
    answers = _step(n3, TermQuery(from_id="n1", to_id="n3", term=term, query_id=7))
    assert answers == [TermQueryResponse(from_id="n3", to_id="n1", term=n3.current_term, query_id=7,
                                         term_known=False)]
    # A healthy voter answers with its (durable) term, its own term and vote untouched.
    n2 = cluster2.nodes["n2"]
    before = (n2.current_term, n2.voted_for)
    answers = _step(n2, TermQuery(from_id="n3", to_id="n2", term=0, query_id=5))
    assert answers == [TermQueryResponse(from_id="n2", to_id="n3", term=term + 1, query_id=5)]
    assert (n2.current_term, n2.voted_for) == before


def test_two_members_that_lost_everything_do_not_wait_for_each_other():
    # Five voters; n4 and n5 lose everything together (a minority): each answers the other "term unknown",
    # both end their queries on the three known answers and rejoin (simulator meta seed 297 deadlocked).
    cluster = Cluster(["n1", "n2", "n3", "n4", "n5"])
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"v")
    cluster.stabilize()
    term = cluster.nodes["n1"].current_term
    for lost in ("n4", "n5"):
        cluster.crash(lost)
        storage = cluster.storages[lost]
        storage.durable, storage.written = StorageState(), StorageState()
        storage.storage_uuid_changed, storage.term_query_voters = True, ("n1", "n2", "n3", "n4", "n5")
    for lost in ("n4", "n5"):
        cluster.restart(lost)
    cluster.run_until(lambda: all(cluster.nodes[n].term_query is None for n in ("n4", "n5")))
    for lost in ("n4", "n5"):
        assert cluster.nodes[lost].vote_fence_term >= term + 1
    cluster.run_until(lambda: cluster.leader() is not None
                      and not any(cluster.nodes[n].repairing for n in ("n4", "n5"))
                      and all(cluster.apps[n].values == ["v"] for n in ("n4", "n5")))


def test_the_operators_accept_data_loss_ends_the_query_at_the_highest_term_heard():
    cluster, term = _lost_vote()
    n3 = cluster.nodes["n3"]
    query = n3.term_query
    assert query is not None
    n3.step(TermQueryResponse(from_id="n1", to_id="n3", term=term, query_id=query.query_id))
    assert n3.accept_data_loss()
    assert n3.term_query is None and n3.vote_fence_term >= term and n3.current_term >= term


def test_a_member_with_no_other_voter_to_ask_ends_the_query_at_once():
    cluster = Cluster(["n1"])
    cluster.elect("n1")
    storage = cluster.storages["n1"]
    cluster.crash("n1")
    storage.durable, storage.written = StorageState(), StorageState()
    storage.storage_uuid_changed, storage.term_query_voters = True, ("n1",)
    n1 = cluster.restart("n1")
    assert n1.term_query is None and n1.vote_fence_term >= 1
