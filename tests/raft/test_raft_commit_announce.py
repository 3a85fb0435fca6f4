"""How a new commit index reaches the followers (`replication` invariant 5, `RaftConfig.prompt_commit`).

Method: real RaftNodes on the in-memory `Cluster`; messages are delivered until none is left
(`stabilize`), with no tick in between unless the test ticks, so what a follower knows comes only from
the messages the commit itself caused.
"""

from __future__ import annotations

import pytest
from raft_network import Cluster

from jsraft.raft import AppendEntries
from jsraft.raft.membership import ConfChange, ConfChangeType


def _settled(prompt: bool) -> Cluster:
    cluster = Cluster(["n1", "n2", "n3"], config={"prompt_commit": prompt})
    cluster.elect("n1")
    cluster.stabilize()
    return cluster


def _commit_only(messages) -> list[AppendEntries]:
    return [m for m in messages if isinstance(m, AppendEntries) and not m.entries and not m.heartbeat]


@pytest.mark.parametrize("prompt", [True, False])
def test_a_commit_reaches_the_followers_at_once_only_when_prompt(prompt):
    cluster = _settled(prompt)
    leader = cluster.nodes["n1"]
    index = leader.propose(b"x")
    sent = cluster.stabilize()
    assert leader.log.commit_index == index  # committing never waits for the announcement
    followers = [cluster.nodes[n] for n in ("n2", "n3")]
    assert all(f.log.last_index == index for f in followers)  # the entry itself went out at once
    if prompt:
        assert _commit_only(sent) and all(f.log.commit_index == index for f in followers)
        assert cluster.apps["n2"].values[-1:] == ["x"]
    else:
        assert not _commit_only(sent) and all(f.log.commit_index < index for f in followers)
        assert "x" not in cluster.apps["n2"].values


def test_a_lazy_commit_travels_with_the_next_entries():
    cluster = _settled(False)
    leader = cluster.nodes["n1"]
    first = leader.propose(b"a")
    cluster.stabilize()
    second = leader.propose(b"b")
    cluster.stabilize()
    for name in ("n2", "n3"):
        assert cluster.nodes[name].log.commit_index == first < second == leader.log.commit_index
        assert cluster.apps[name].values[-1:] == ["a"]


def test_a_lazy_commit_travels_with_the_next_heartbeat():
    cluster = _settled(False)
    leader = cluster.nodes["n1"]
    index = leader.propose(b"x")
    cluster.stabilize()
    for _ in range(leader.config.heartbeat_ticks):
        leader.tick()
    cluster.stabilize()
    assert all(cluster.nodes[n].log.commit_index == index for n in ("n2", "n3"))
    assert cluster.apps["n3"].values[-1:] == ["x"]


def test_a_membership_change_is_announced_at_once_even_when_lazy():
    cluster = _settled(False)
    leader = cluster.nodes["n1"]
    index = leader.propose_conf_change(ConfChange(type=ConfChangeType.REMOVE_NODE, node_id="n3"))
    sent = cluster.stabilize()
    assert leader.log.commit_index >= index and _commit_only(sent)
    assert cluster.nodes["n2"].log.commit_index >= index and cluster.nodes["n2"].conf.voters == ("n1", "n2")


def test_a_new_leaders_first_commit_is_announced_at_once_even_when_lazy():
    cluster = _settled(False)
    leader = cluster.nodes["n1"]
    leader.propose(b"x")
    cluster.stabilize()
    assert cluster.nodes["n3"].log.commit_index < leader.log.commit_index
    leader.transfer_leadership("n2")
    sent = cluster.stabilize()
    n2 = cluster.nodes["n2"]
    assert n2.role == "leader" and _commit_only(sent)
    assert all(cluster.nodes[n].log.commit_index == n2.log.commit_index for n in ("n1", "n3"))
    assert cluster.apps["n3"].values[-1:] == ["x"]
