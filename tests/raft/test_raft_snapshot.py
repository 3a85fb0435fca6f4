"""Snapshots: compaction, chunked InstallSnapshot with one chunk in flight, retransmission, and
installation on followers (suffix kept when it matches, faulty entries repaired through a snapshot).

Method: real RaftNodes on the in-memory `Cluster`; the application's snapshot is its list of values.
"""

from __future__ import annotations

import pytest
from raft_network import Cluster
from raft_scenario import ScenarioRunner

from jsraft.errors import InvariantViolation
from jsraft.raft import InstallSnapshot, InstallSnapshotResponse, Snapshot, SnapshotMeta
from jsraft.raft import snapshot as snapshot_module


def compact(cluster: Cluster, node_id: str) -> None:
    """The application snapshots at its applied index; the driver stores it and compacts its WAL."""
    runner = ScenarioRunner()
    runner.cluster = cluster
    runner.cmd_compact(node_id.removeprefix("n"))


def lagging_cluster(values: int = 6, chunk: int = 4) -> Cluster:
    cluster = Cluster(["n1", "n2", "n3"], config={"snapshot_chunk_bytes": chunk})
    cluster.elect("n1")
    cluster.crash("n3")
    for i in range(values):
        cluster.nodes["n1"].propose(f"value{i}".encode())
    cluster.stabilize()
    compact(cluster, "n1")
    cluster.restart("n3")
    return cluster


def test_compaction_keeps_term_membership_and_data():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"a")
    cluster.stabilize()
    node = cluster.nodes["n1"]
    node.compact(5, b"snapshot-bytes")
    assert node.snapshot_meta.index == 5 and node.snapshot_meta.term == 2
    assert node.snapshot_meta.conf.voters == ("n1", "n2", "n3")
    assert node.snapshot_data == b"snapshot-bytes" and node.log.entries == []
    node.compact(3, b"older")  # at or below the current snapshot: nothing to do
    assert node.snapshot_meta.index == 5


def test_compaction_beyond_applied_is_a_bug():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    cluster.nodes["n1"].propose(b"a")  # not yet committed or applied
    with pytest.raises(InvariantViolation):
        cluster.nodes["n1"].compact(5, b"x")


def test_a_lagging_follower_gets_the_snapshot_in_chunks_then_the_rest():
    cluster = lagging_cluster(values=6, chunk=4)
    data = cluster.nodes["n1"].snapshot_data
    cluster.nodes["n1"].propose(b"after")
    cluster.run(3)
    chunks = [m for m in cluster.delivered if isinstance(m, InstallSnapshot)]
    assert len(chunks) == -(-len(data) // 4)
    assert b"".join(c.data for c in chunks) == data and chunks[-1].done
    assert cluster.apps["n3"].values == [f"value{i}" for i in range(6)] + ["after"]
    assert cluster.nodes["n3"].log.snapshot_index == cluster.nodes["n1"].log.snapshot_index


def _pump(cluster: Cluster, drop) -> list:
    """Deliver queued messages one by one, dropping those `drop` selects; returns the dropped ones."""
    dropped = []
    for _ in range(500):
        for node_id in sorted(cluster.nodes):
            while cluster.process_ready(node_id):
                pass
        if not cluster.queue:
            return dropped
        message = cluster.queue[0]
        if drop(message):
            cluster.queue.popleft()
            dropped.append(message)
            continue
        cluster.deliver_one()
    raise AssertionError("no quiescence")


def test_one_chunk_in_flight_per_follower():
    cluster = lagging_cluster(values=6, chunk=4)
    cluster.tick("n1", 3)  # three heartbeat rounds, and nobody answers a chunk
    dropped = _pump(cluster, lambda m: isinstance(m, InstallSnapshot))
    assert len(dropped) == 1 and dropped[0].offset == 0  # one chunk, not the whole snapshot


def test_a_lost_chunk_is_resent_after_an_election_timeout():
    cluster = lagging_cluster(values=6, chunk=4)
    cluster.tick("n1")
    lost: list = []

    def lose_once(message) -> bool:
        if isinstance(message, InstallSnapshot) and message.offset == 8 and not lost:
            lost.append(message)
            return True
        return False

    _pump(cluster, lose_once)
    assert len(lost) == 1 and cluster.nodes["n3"].log.snapshot_index == 0
    cluster.run(cluster.nodes["n1"].config.election_ticks + 2)
    assert cluster.apps["n3"].values == [f"value{i}" for i in range(6)]


def test_a_follower_that_lost_its_buffer_makes_the_leader_start_over():
    cluster = lagging_cluster(values=6, chunk=4)
    follower = cluster.nodes["n3"]
    cluster.tick("n1")
    # Deliver until n3 holds part of the snapshot, then forget the partial buffer (a restart).
    for _ in range(50):
        delivered = cluster.deliver_one() if cluster.queue else None
        if delivered is not None:
            while cluster.process_ready(delivered.to_id):
                pass
        while cluster.process_ready("n1"):
            pass
        if follower.snapshot_receive is not None and len(follower.snapshot_receive.data) >= 8:
            break
    follower.snapshot_receive = None
    cluster.stabilize()
    offsets = [m.next_offset for m in cluster.delivered if isinstance(m, InstallSnapshotResponse)]
    assert 0 in offsets  # n3 asked for the start again
    assert cluster.apps["n3"].values == [f"value{i}" for i in range(6)]


def test_a_snapshot_matching_the_follower_log_keeps_its_suffix():
    cluster = Cluster(["n1", "n2"])
    cluster.elect("n1")
    for v in ("a", "b", "c"):
        cluster.nodes["n1"].propose(v.encode())
    cluster.stabilize()
    leader, follower = cluster.nodes["n1"], cluster.nodes["n2"]
    follower.log.commit_index = 4  # as if the commit news for 5.. had not arrived
    follower.log.applied_index = 4
    meta = SnapshotMeta(index=5, term=leader.log.term_at(5), conf=leader.conf)
    snapshot_module.install(follower, Snapshot(meta=meta, data=b"a"))
    assert follower.log.snapshot_index == 5 and follower.log.last_index == leader.log.last_index
    rd = follower.ready()
    assert rd.snapshot is not None and rd.truncate_from is None  # nothing above the snapshot is dropped


def test_faulty_entries_the_leader_compacted_are_repaired_by_its_snapshot():
    cluster = Cluster(["n1", "n2", "n3"])
    cluster.elect("n1")
    for i in range(4):
        cluster.nodes["n1"].propose(f"v{i}".encode())
    cluster.stabilize()
    cluster.crash("n2")
    cluster.storages["n2"].corrupt(5)
    # n2 restores in its fence term and deposes n1 (vote_fence invariant 4): whichever of n1 and n3 leads
    # next must hold the entries only compacted.
    compact(cluster, "n1")
    compact(cluster, "n3")
    cluster.restart("n2")
    assert cluster.nodes["n2"].repairing
    cluster.run_until(lambda: not cluster.nodes["n2"].repairing)
    node = cluster.nodes["n2"]
    assert not node.repairing and node.log.snapshot_index == cluster.nodes["n1"].log.snapshot_index
    assert cluster.apps["n2"].values == [f"v{i}" for i in range(4)]
