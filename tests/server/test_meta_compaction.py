"""Meta group snapshots and log compaction on a real 3-node cluster; a node restored from a meta snapshot
ends with exactly the live streams.

Method: three real nodes in one process (`jsraft.testing.cluster.Cluster`: real TCP, real files) with a
small meta snapshot interval (`meta_snapshot_every_entries`), so a few dozen stream creates and deletes
compact the meta WAL several times. Streams are created, updated and deleted through the embedded
JetStream context. A node is compared with the others through its meta state (`digest()`, names, applied
index), its Raft status (`snapshot_index`: how far its log is compacted), the meta WAL as recovered from
disk, and its stream directories and stores. A node that was down while its peers compacted past its log
must get the leader's snapshot (its snapshot index jumps past the last entry it held) and must remove
the stream deleted meanwhile by the committed-delete path (`meta.reconcile`), not keep it or open it.
Every wait polls with a deadline. Two unit tests sit beside them: the meta adapter reports the replaced
state only after a good restore, and a stopped replica is closed only after its tasks ended (a fake
replica whose woken task would touch a closed store). The plan itself is `tests/meta/test_reconcile.py`.
"""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing
from test_cluster import ELECTION_TICKS, TICK_MS, publish_all
from test_server_readmit import all_seen

from jsraft.disk import OsDisk
from jsraft.errors import StoreClosed, StreamNotFound
from jsraft.meta import MalformedMetaSnapshot, MetaStateMachine
from jsraft.replica.meta_adapter import MetaAdapter
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.groups.streams import StreamManager
from jsraft.testing.cluster import Cluster
from jsraft.wal import Wal

EVERY = 8  # meta snapshot interval for these tests: a handful of admin requests compacts the log
OPTIONS = {"meta_snapshot_every_entries": EVERY}


def meta_status(cluster: Cluster, name: str):
    return cluster.node(name).runtime.status(META_GROUP).raft


def stream_dirs(cluster: Cluster, name: str) -> set[str]:
    root = os.path.join(cluster.configs[name].store_dir, "streams")
    if not os.path.isdir(root):
        return set()
    return {entry for entry in os.listdir(root) if os.path.isdir(os.path.join(root, entry))}


def metas_agree(cluster: Cluster) -> bool:
    """Every running node applied the same meta state, and its stream manager acted on all of it."""
    nodes = cluster.running()
    if any(node.streams.pending for node in nodes):
        return False
    return (len({node.meta.digest() for node in nodes}) == 1
            and len({node.meta.applied_index for node in nodes}) == 1)


def expected_dirs(cluster: Cluster, name: str) -> set[str]:
    return {a.name for a in cluster.meta(name).assignments_for(name)}


async def add_stream(js, **config) -> None:
    """`js.add_stream`, retried while a replica's node has not applied the create yet: `add_stream` asks
    the new stream's group for its info as soon as the calling node applied the create, and a peer whose
    meta lags answers StreamNotFound (a race of the create path, seen without meta snapshots too). The
    retry is an idempotent create (same config)."""
    with trio.fail_after(10):
        while True:
            try:
                await js.add_stream(**config)
                return
            except StreamNotFound:
                await trio.sleep(0.02)


async def churn(js, prefix: str, count: int) -> None:
    """Create and delete `count` R1 streams: 2 meta entries each."""
    for i in range(count):
        await add_stream(js, name=f"{prefix}{i}", subjects=[f"{prefix.lower()}{i}.>"], num_replicas=1)
        await js.delete_stream(f"{prefix}{i}")


def recovered_meta_wal(cluster: Cluster, name: str):
    """The stopped node's meta WAL as a restart would recover it (read-only: nothing on disk changes)."""
    wal, recovered = Wal.open(OsDisk(os.path.join(cluster.configs[name].store_dir, "meta"), read_only=True))
    wal.close()
    return recovered


async def test_meta_wal_is_compacted_on_every_node_and_states_agree(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS,
                                 node_options=OPTIONS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node("n1").jetstream()
            for i in range(12):
                await add_stream(js, name=f"S{i}", subjects=[f"s{i}.>"], num_replicas=1 + i % 3)
            for i in range(0, 12, 2):  # delete every other one
                await js.delete_stream(f"S{i}")
            await churn(js, "T", 10)
            live = {f"S{i}" for i in range(1, 12, 2)}

            await cluster.wait_until(lambda: metas_agree(cluster), 20, what="equal meta states")
            for name in cluster.names:
                meta = cluster.meta(name)
                assert set(meta.names()) == live
                status = meta_status(cluster, name)
                # Compacted: the log starts after a snapshot well past its first entries, and holds no
                # more than about one interval beyond it (a snapshot waits for the stream manager).
                assert status.snapshot_index > 3 * EVERY, (name, status)
                assert status.last_index - status.snapshot_index <= 2 * EVERY, (name, status)
                snaps = os.listdir(os.path.join(cluster.configs[name].store_dir, "meta", "snapshots"))
                assert 1 <= len([s for s in snaps if s.endswith(".snap")]) <= 2, snaps
                await cluster.wait_until(lambda: stream_dirs(cluster, name) == expected_dirs(cluster, name), 10,
                                         what=f"{name}'s stream directories follow the meta state")
                assert set(cluster.node(name).streams.replicas) == expected_dirs(cluster, name)
            assert len({cluster.meta(name).snapshot() for name in cluster.names}) == 1


async def test_a_node_behind_the_compacted_log_installs_a_snapshot_and_drops_deleted_streams(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS,
                                 node_options=OPTIONS) as cluster:
            leader = await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            down = next(name for name in cluster.names if name != leader)
            js = cluster.node(leader).jetstream()
            await add_stream(js, name="GONE", subjects=["gone.>"], num_replicas=3)
            await add_stream(js, name="STAYS", subjects=["stays.>"], num_replicas=3)
            await publish_all(js, lambda i: f"gone.{i % 3}", 100)
            acked = await publish_all(js, lambda i: f"stays.{i % 3}", 100)
            await cluster.wait_until(lambda: metas_agree(cluster) and stream_dirs(cluster, down) == {"GONE", "STAYS"},
                                     10, what="both streams on every node")
            held = meta_status(cluster, down).last_index
            gone_group = cluster.meta(down).stream("GONE").group

            await cluster.kill(down)
            await js.delete_stream("GONE")
            await churn(js, "T", 12)  # 24 entries: the others compact well past what `down` holds
            await js.update_stream(name="STAYS", subjects=["stays.>"], num_replicas=3, description="changed")
            acked.update(await publish_all(js, lambda i: f"stays.{i % 3}", 100, first=100))
            await cluster.wait_until(
                lambda: all(meta_status(cluster, name).snapshot_index > held + EVERY for name in cluster.names
                            if name != down), 20, what="the live nodes compacted past the down node's log")

            node = await cluster.restart(down)
            await cluster.wait_until(lambda: metas_agree(cluster), 20, what="the restarted node caught up")
            # It could only have got there from the leader's snapshot: its own log ended at `held`.
            assert meta_status(cluster, down).snapshot_index > held
            assert node.meta.names() == ["STAYS"]
            await cluster.wait_until(lambda: stream_dirs(cluster, down) == {"STAYS"}, 20,
                                     what="the deleted stream's directory removed on the restarted node")
            assert set(node.streams.replicas) == {"STAYS"}
            assert gone_group not in node.runtime.group_names()
            replica = node.streams.replicas["STAYS"]
            assignment = node.meta.stream("STAYS")
            assert replica.group == assignment.group and replica.config_index == assignment.config_index
            assert replica.raw == assignment.config_raw and b"changed" in replica.raw

            last = max(acked.values())

            def current() -> bool:
                stores = [cluster.replica_store(name, "STAYS") for name in cluster.names]
                return (all(store.state().last_seq == last for store in stores)
                        and len({store.state().agreement_key() for store in stores}) == 1)
            await cluster.wait_until(current, 20, what="the restarted node's STAYS replica is current")
            info = await cluster.node(down).jetstream().stream_info("STAYS")
            assert info.config.description == "changed"


async def test_restarting_every_node_restores_meta_from_snapshot_and_tail(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS,
                                 node_options=OPTIONS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node("n1").jetstream()
            await add_stream(js, name="KEEP", subjects=["keep.>"], num_replicas=3)
            acked = await publish_all(js, lambda i: "keep.x", 50)
            await churn(js, "T", 8)
            await add_stream(js, name="DEAD", subjects=["dead.>"], num_replicas=3)
            await add_stream(js, name="TAIL", subjects=["tail.>"], num_replicas=2)  # likely after the snapshot
            await js.delete_stream("DEAD")
            # The membership duty records each member's storage UUID (`Seen`) on its own schedule: a state
            # caught before the last of them would differ from the one after the restart by that record.
            await cluster.wait_until(lambda: metas_agree(cluster) and all_seen(cluster), 20,
                                     what="equal meta states holding every member's storage")
            digest, names = cluster.meta("n1").digest(), cluster.meta("n1").names()
            assert names == ["KEEP", "TAIL"]
            for name in cluster.names:
                await cluster.kill(name)

            for name in cluster.names:
                recovered = recovered_meta_wal(cluster, name)
                assert recovered.snapshot is not None and recovered.snapshot[0].index > 2 * EVERY
                assert all(entry.index > recovered.snapshot[0].index for entry in recovered.entries)
                assert len(recovered.entries) <= 2 * EVERY

            for name in cluster.names:
                await cluster.restart(name)
            await cluster.wait_for_meta_leader(20)
            await cluster.wait_ready(20)
            await cluster.wait_until(lambda: metas_agree(cluster), 20, what="equal meta states after restart")
            for name in cluster.names:
                assert cluster.meta(name).digest() == digest and cluster.meta(name).names() == names
                await cluster.wait_until(lambda: stream_dirs(cluster, name) == expected_dirs(cluster, name), 10,
                                         what=f"{name}'s stream directories follow the meta state")
            ack = await cluster.node("n2").jetstream().publish("keep.x", b"after")
            assert ack.seq == max(acked.values()) + 1


def _machine_with(stream: str) -> MetaStateMachine:
    machine = MetaStateMachine()
    for peer in ("n1", "n2", "n3"):
        proposal = machine.propose_peer_add(peer)
        machine.apply(machine.applied_index + 1, proposal.data)
    proposal = machine.propose_create_stream(stream, f'{{"name":"{stream}","num_replicas":3}}'.encode(),
                                             now_ns=1, online={"n1", "n2", "n3"})
    machine.apply(machine.applied_index + 1, proposal.data)
    return machine


def test_the_adapter_reports_the_replaced_state_only_after_a_good_restore():
    local, leader = _machine_with("OLD"), _machine_with("NEW")
    for _ in range(3):  # the leader's state is further along
        leader.note_applied(leader.applied_index + 1)
    calls: list[list[tuple[str, str]]] = []
    ready = [False]
    adapter = MetaAdapter(local, lambda applied: None, calls.append, snapshot_ready=lambda: ready[0])
    with pytest.raises(MalformedMetaSnapshot):
        adapter.restore(leader.snapshot()[:-1] + bytes([leader.snapshot()[-1] ^ 1]))
    assert calls == [] and local.names() == ["OLD"]
    old_group = local.stream("OLD").group
    adapter.restore(leader.snapshot())
    assert calls == [[("OLD", old_group)]] and local.names() == ["NEW"]
    assert adapter.snapshot_ready() is False
    ready[0] = True
    assert adapter.snapshot_ready() is True
    assert MetaAdapter(local, lambda applied: None, calls.append).snapshot_ready() is True


class _FakeReplica:
    """Just enough of a `StreamReplica` for `StreamManager._stop`: a run() whose worker task touches the
    store when woken — after the store closed, that raises as a real store access would."""

    def __init__(self) -> None:
        self.group, self.scope, self.closed, self.wake = "S-X-1", trio.CancelScope(), False, trio.Event()

    async def run(self) -> None:
        with self.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._worker)
                await trio.sleep_forever()

    async def _worker(self) -> None:
        await self.wake.wait()
        if self.closed:
            raise StoreClosed()
        await trio.sleep_forever()

    async def close(self) -> None:
        self.closed = True
        self.scope.cancel()


async def test_a_removed_replica_is_closed_only_after_its_tasks_ended():
    # Removal by a restored snapshot goes through the same stop as a delete: a task woken in the very round
    # the replica is stopped must not run on a closed store (streams.py invariant 5). Without the wait,
    # `close()` runs first and the woken worker raises.
    manager = StreamManager(node_id="n1", disk=None, runtime=None, meta=None, raft_config=None, tick_s=0.01)
    replica = _FakeReplica()
    async with trio.open_nursery() as nursery:
        done = manager._run_done[replica.group] = trio.Event()
        nursery.start_soon(manager._run_replica, replica, done)
        await trio.testing.wait_all_tasks_blocked()  # the worker is waiting for its wake-up
        replica.wake.set()
        await manager._stop(replica)
        assert replica.closed and done.is_set() and replica.group not in manager._run_done
