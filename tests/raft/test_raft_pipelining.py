"""Leader pipelining: a leader's AppendEntries leave before its own fsync, and its own copy counts only after.

Method: a three-node group elected on the in-memory `Cluster`, then the leader driven by hand through one
`Ready` whose persistence is "in flight" (taken with `ready()`, not yet `advance()`d — the moment its
fsync runs): followers' acknowledgements are stepped in that window, as the runtime does, and the commit
index is read before and after the `advance()` that stands for the fsync returning. Each check is run
once against `LeaderCountsUnsynced` (the simulator's mutant), to show it fails when the rule is broken.
"""

from __future__ import annotations

from raft_network import Cluster

from jsraft.raft import AppendEntries, AppendEntriesResponse, RaftNode
from jsraft.testing.sim.mutants import LeaderCountsUnsynced


def _leader(node_class: type[RaftNode] = RaftNode) -> RaftNode:
    cluster = Cluster(["n1", "n2", "n3"], node_class={"n1": node_class})
    cluster.elect("n1")
    leader = cluster.nodes["n1"]
    assert not leader.has_ready()
    return leader


def _ack(leader: RaftNode, peer: str, index: int, term: int | None = None) -> AppendEntriesResponse:
    return AppendEntriesResponse(from_id=peer, to_id=leader.id, term=term or leader.current_term, success=True,
                                 match_index=index)


def _propose_in_flight(leader: RaftNode):
    index = leader.propose(b"x")
    rd = leader.ready()
    assert rd.send_first and rd.leader_term == leader.current_term
    sent = [m for m in rd.messages if isinstance(m, AppendEntries) and m.entries]
    assert {m.to_id for m in sent} == {"n2", "n3"} and all(m.entries[-1].index == index for m in sent)
    return index, rd


def test_the_leader_does_not_count_its_own_copy_before_its_fsync():
    leader = _leader()
    index, rd = _propose_in_flight(leader)
    leader.step(_ack(leader, "n2", index))  # one follower fsynced; the leader's own fsync still runs
    assert leader.log.commit_index < index, "one fsynced copy of three committed"
    assert leader.progress["n1"].match_index < index
    leader.advance(rd)  # the leader's fsync returned: its self-acknowledgement
    assert leader.progress["n1"].match_index == index
    assert leader.log.commit_index == index


def test_the_check_fails_for_a_leader_that_counts_itself_before_its_fsync():
    leader = _leader(LeaderCountsUnsynced)
    index, _rd = _propose_in_flight(leader)
    leader.step(_ack(leader, "n2", index))
    assert leader.log.commit_index == index  # committed with a single fsynced copy: the bug


def test_a_fsynced_majority_of_followers_commits_while_the_leaders_fsync_runs():
    leader = _leader()
    index, rd = _propose_in_flight(leader)
    leader.step(_ack(leader, "n2", index))
    leader.step(_ack(leader, "n3", index))
    assert leader.log.commit_index == index
    news = leader.pipelined_messages()  # sent at once, without a Ready
    assert {m.to_id for m in news} == {"n2", "n3"} and all(m.leader_commit == index for m in news)
    assert leader.log.applied_index < index  # applied only after its own cycle (and fsync) finished
    leader.advance(rd)
    assert [e.index for e in leader.ready().committed_entries] == [index]


def test_a_leader_that_steps_down_between_send_and_fsync_does_not_count_its_copy():
    leader = _leader()
    term = leader.current_term
    index, rd = _propose_in_flight(leader)
    leader.step(_ack(leader, "n2", index))
    # A newer term reaches it while its fsync runs (here: a follower that heard of a new election).
    leader.step(AppendEntriesResponse(from_id="n3", to_id="n1", term=term + 1, success=False))
    assert leader.role == "follower" and leader.pipelined_messages() == []
    leader.advance(rd)
    assert leader.log.commit_index < index, "a deposed leader's own copy counted after its fsync"
    assert leader.log.stable_index == index  # the entry is durable all the same (a new leader decides)
