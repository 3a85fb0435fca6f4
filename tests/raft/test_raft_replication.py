"""Log replication: pipelining under a bounded in-flight window, batching bounds, fast back-off,
commitment of current-term entries only, recovery from lost messages.

Method: real RaftNodes on the in-memory `Cluster`; where a precise history is needed (divergent logs),
nodes are restored from hand-built `RestoredState`s. Checks follow the Raft paper §5.3–5.4.
"""

from __future__ import annotations

import random

import pytest
from raft_network import Cluster

from jsraft.raft import (
    AppendEntries, AppendEntriesResponse, ConfState, Entry, EntryType, HardState, ProposalDropped, RaftConfig,
    RaftNode, RestoredState, encode_conf_change,
)
from jsraft.raft.membership import ConfChange, ConfChangeType


def _boot_entries(voters=("n1", "n2", "n3")) -> list[Entry]:
    return [Entry(index=i, term=1, type=EntryType.CONF_CHANGE,
                  data=encode_conf_change(ConfChange(type=ConfChangeType.ADD_VOTER, node_id=v)))
            for i, v in enumerate(voters, start=1)]


def _restored(terms_after_boot: list[int], term: int, commit: int) -> RestoredState:
    entries = _boot_entries()
    for term_of_entry in terms_after_boot:
        entries.append(Entry(index=len(entries) + 1, term=term_of_entry, data=b"x"))
    return RestoredState(hard_state=HardState(current_term=term, commit_index=commit, acked_watermark=0),
                         entries=entries)


def test_pipelining_is_bounded_by_the_inflight_window_and_batch_sizes():
    cluster = Cluster(["n1", "n2", "n3"], config={"max_inflight_msgs": 2, "max_entries_per_msg": 3,
                                                   "max_bytes_per_msg": 10})
    cluster.elect("n1")
    leader = cluster.nodes["n1"]
    for i in range(20):
        leader.propose(f"{i:02d}".encode())
    cluster.process_ready("n1")
    appends = [m for m in cluster.queue if isinstance(m, AppendEntries) and m.to_id == "n2" and m.entries]
    assert len(appends) == 2  # the window is full; the rest waits for acknowledgements
    assert all(len(m.entries) <= 3 for m in appends)
    assert appends[1].prev_log_index == appends[0].entries[-1].index  # pipelined: no wait for the first ack
    cluster.stabilize()
    assert all(n.log.commit_index == leader.log.last_index for n in cluster.nodes.values())


def test_byte_bound_still_sends_one_oversized_entry():
    cluster = Cluster(["n1", "n2"], config={"max_bytes_per_msg": 4})
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"much larger than four bytes")
    cluster.stabilize()
    assert cluster.apps["n2"].values == ["much larger than four bytes"]


def test_fast_backoff_skips_a_whole_divergent_term_in_one_round_trip():
    """n2 holds ten entries of an old term 3 that n1 (term 4 entries) never had (paper §5.3, 'optimization')."""
    config = {"election_ticks": 10}
    n1 = RaftNode(RaftConfig(node_id="n1", **config), random.Random(1), _restored([2] + [4] * 10, 4, 4))
    n2 = RaftNode(RaftConfig(node_id="n2", **config), random.Random(2), _restored([2] + [3] * 10, 3, 4))
    n1.campaign()  # pre-vote and vote answered by hand below
    n1.step(_vote_response("n2", n1.current_term + 1, pre_vote=True))
    n1.step(_vote_response("n2", n1.current_term, pre_vote=False))
    assert n1.role == "leader"
    rounds = _exchange(n1, n2)
    assert n2.log.last_index == n1.log.last_index and n2.log.last_term() == n1.current_term
    rejections = [m for m in rounds if isinstance(m, AppendEntriesResponse) and not m.success]
    assert len(rejections) == 1  # one hint, and the leader resends from the divergence point


def _vote_response(from_id, term, *, pre_vote):
    from jsraft.raft import RequestVoteResponse

    return RequestVoteResponse(from_id=from_id, to_id="n1", term=term, vote_granted=True, pre_vote=pre_vote)


def _exchange(a: RaftNode, b: RaftNode) -> list:
    """Deliver between two nodes until quiet; returns every message, in order."""
    nodes = {a.id: a, b.id: b}
    seen = []
    for _ in range(100):
        moved = False
        for node in nodes.values():
            rd = node.ready()
            node.advance(rd)
            for message in rd.messages:
                if message.to_id in nodes:
                    seen.append(message)
                    nodes[message.to_id].step(message)
                    moved = True
        if not moved:
            return seen
    raise AssertionError("no quiescence")


def test_only_current_term_entries_are_committed_by_counting_replicas():
    """Figure 8: an old-term entry on a majority is not committed until an entry of the leader's term is."""
    n1 = RaftNode(RaftConfig(node_id="n1"), random.Random(1), _restored([2], 3, 3))
    n1.campaign()
    n1.step(_vote_response("n2", 4, pre_vote=True))
    n1.step(_vote_response("n2", 4, pre_vote=False))
    n1.advance(n1.ready())
    assert n1.role == "leader" and n1.log.last_index == 5  # entry 4 (term 2) + its no-op 5 (term 4)
    n1.step(AppendEntriesResponse(from_id="n2", to_id="n1", term=4, success=True, match_index=4))
    assert n1.log.commit_index == 3  # entry 4 is on a majority, but it is of term 2
    n1.step(AppendEntriesResponse(from_id="n2", to_id="n1", term=4, success=True, match_index=5))
    assert n1.log.commit_index == 5


def test_a_lost_append_is_recovered_by_heartbeats_without_new_proposals():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.partition = [{"n1", "n3"}, {"n2"}]  # everything to n2 is lost, including the commit news
    cluster.nodes["n1"].propose(b"a")
    cluster.stabilize()
    cluster.partition = None
    cluster.stabilize()
    assert cluster.apps["n2"].values == []
    cluster.run(3)
    assert cluster.apps["n2"].values == ["a"]


def test_a_follower_commits_no_further_than_what_it_matched():
    node = RaftNode(RaftConfig(node_id="n2"), random.Random(0), RestoredState.bootstrap(("n1", "n2", "n3")))
    node.advance(node.ready())
    node.step(AppendEntries(from_id="n1", to_id="n2", term=2, leader_id="n1", prev_log_index=3,
                            prev_log_term=1, entries=(Entry(index=4, term=2),), leader_commit=9))
    assert node.log.commit_index == 4


def test_uncommitted_entries_are_bounded():
    cluster = Cluster(["n1", "n2", "n3"], config={"uncommitted_entries_max": 3})
    cluster.elect("n1")
    cluster.down.update({"n2", "n3"})
    leader = cluster.nodes["n1"]
    for _ in range(3):
        leader.propose(b"x")
    with pytest.raises(ProposalDropped, match="uncommitted"):
        leader.propose(b"x")


def test_followers_learn_the_commit_index_promptly():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"a")
    cluster.stabilize()
    assert {n: a.values for n, a in cluster.apps.items()} == {"n1": ["a"], "n2": ["a"], "n3": ["a"]}


def test_restored_nodes_agree_on_membership_from_bootstrap_entries():
    """The bootstrap conf entries make every restored node agree on the membership."""
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(0), _restored([2], 3, 3))
    assert node.conf == ConfState(voters=("n1", "n2", "n3"))
