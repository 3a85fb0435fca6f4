"""Helpers for the repair, snapshot and drift tests on a real 3-node `Cluster`.

Method: nodes run with small stream blocks (64 KiB: a few thousand ~190-byte messages span several block
files), frequent Raft snapshots, small catch-up chunks and short repair backoffs, so every mechanism is
exercised in seconds. A follower's files are changed only while that node is stopped (cleanly: its store
is closed and its index written, as after a normal shutdown). Replicas are compared by their stores'
state tuples and contents; advisories are read from every running node's log. Every wait polls with a
deadline.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import trio

from jsraft.disk import OsDisk
from jsraft.store.base import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.stream import DRIFT_ADVISORY, DRIFT_REPAIRED_ADVISORY
from jsraft.testing.cluster import Cluster

TICK_MS = 20
ELECTION_TICKS = 10
BLOCK_BYTES = 64 * 1024
NODE_OPTIONS: dict[str, Any] = {
    "stream_snapshot_every_entries": 16,
    "stream_block_bytes": BLOCK_BYTES,
    "stream_catchup_chunk_bytes": 16 * 1024,
    "stream_repair_backoff_max_ms": 200,
    "stream_audit_interval_ms": 0,  # audits only when asked (after recoveries and repairs), or by a test
}
STREAM = "S"


def start(nursery: trio.Nursery, tmp_path, **options: Any):
    return Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS,
                         node_options={**NODE_OPTIONS, **options})


def payload(i: int) -> bytes:
    return f"m{i}:".encode().ljust(120, b".")


async def publish_range(js, first: int, count: int, *, workers: int = 16) -> dict[int, int]:
    """Publish messages `first..first+count-1` (subject `s.<i % 5>`, ~190 bytes each as stored); returns
    index -> acked seq. A failed publish is retried with its msg id (dedupe makes that safe)."""
    acked: dict[int, int] = {}

    async def worker(start_i: int) -> None:
        for i in range(first + start_i, first + count, workers):
            for attempt in range(100):
                try:
                    ack = await js.publish(f"s.{i % 5}", payload(i), msg_id=f"id-{i}")
                    acked[i] = ack.seq
                    break
                except Exception:
                    if attempt == 99:
                        raise
                    await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        for start_i in range(workers):
            nursery.start_soon(worker, start_i)
    return acked


def replica(cluster: Cluster, name: str, stream: str = STREAM):
    node = cluster.nodes.get(name)
    return node.streams.replicas.get(stream) if node is not None else None


def stream_leader(cluster: Cluster, stream: str = STREAM) -> str | None:
    """The replica every running node names as leader, once that node has a StreamLeader."""
    leaders = set()
    for node in cluster.running():
        found = node.streams.replicas.get(stream)
        if found is None:
            return None
        leaders.add(found.leader_id())
    leader = leaders.pop() if len(leaders) == 1 else None
    if leader is None or leader not in cluster.nodes:
        return None
    found = replica(cluster, leader, stream)
    return leader if found is not None and found.leader is not None else None


async def compact(cluster: Cluster, name: str, stream: str = STREAM) -> int:
    """Snapshot `name`'s stream group and compact its WAL through everything it applied; the index."""
    found = replica(cluster, name, stream)
    runtime = cluster.node(name).runtime
    applied = runtime.status(found.group).raft.applied_index
    runtime.request_snapshot(found.group)
    await cluster.wait_until(lambda: runtime.status(found.group).raft.snapshot_index >= applied, 10,
                             what=f"{name} compacted its stream WAL")
    return runtime.status(found.group).raft.snapshot_index


def healthy(found) -> bool:
    return (found is not None and found.machine is not None and str(found.machine.health) == "current"
            and not found.store.faults() and not found.adapter.holding and found.repair.episode is None
            and not found.machine.replaying and not getattr(found.store, "unverified", None))


def converged(cluster: Cluster, last_seq: int, stream: str = STREAM) -> bool:
    keys = set()
    for name in cluster.names:
        found = replica(cluster, name, stream)
        if not healthy(found):
            return False
        state = found.store.state()
        if state.last_seq != last_seq:
            return False
        keys.add(state.agreement_key())
    return len(keys) == 1


def contents(store) -> dict[int, tuple[str, bytes]]:
    state = store.state()
    found = {}
    seq = state.first_seq
    while state.msgs and seq <= state.last_seq:
        try:
            msg = store.load_next(None, seq)
        except Exception:
            break
        found[msg.seq] = (msg.subject, msg.payload)
        seq = msg.seq + 1
    return found


def check_identical(cluster: Cluster, acked: dict[int, int], stream: str = STREAM) -> None:
    """Equal state tuples and contents everywhere, and every acknowledged message present."""
    stores = [replica(cluster, name, stream).store for name in cluster.names]
    keys = {store.state().agreement_key() for store in stores}
    assert len(keys) == 1, keys
    held = [contents(store) for store in stores]
    assert held[0] == held[1] == held[2]
    for i, seq in acked.items():
        assert held[0].get(seq, (None, None))[1] == payload(i), f"acked message {i} (seq {seq}) is missing"


def advisories(cluster: Cluster, kind: str, *, replica_name: str | None = None,
               stream: str = STREAM) -> list[dict[str, Any]]:
    found = []
    for node in cluster.running():
        for entry in node.streams.advisories.entries(type=kind, stream=stream):
            if replica_name is None or entry.get("replica") == replica_name:
                found.append(entry)
    return found


def drift_of(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return advisories(cluster, DRIFT_ADVISORY, replica_name=name)


def repaired_of(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return advisories(cluster, DRIFT_REPAIRED_ADVISORY, replica_name=name)


def msgs_dir(cluster: Cluster, name: str, stream: str = STREAM) -> str:
    return os.path.join(cluster.stream_dir(name, stream), "msgs")


def block_numbers(path: str) -> list[int]:
    return sorted(int(entry[:8]) for entry in os.listdir(path) if entry.endswith(".blk"))


def with_store(cluster: Cluster, name: str, change: Callable[[FileStore], Any], stream: str = STREAM) -> Any:
    """Open a stopped node's store read-write, let `change` edit it through the store API, close it."""
    store = FileStore.open(OsDisk(msgs_dir(cluster, name, stream)),
                           StoreConfig(name=stream, block_size=BLOCK_BYTES))
    try:
        return change(store)
    finally:
        store.close()


async def setup_stream(cluster: Cluster, count: int, **config: Any) -> tuple[Any, dict[int, int], str, str]:
    """An R3 stream (`config`: more of its fields) with `count` messages on every replica, compacted
    everywhere; (the leader's JetStream context, acked, leader, a follower)."""
    await cluster.wait_for_meta_leader()
    await cluster.wait_ready()
    js = cluster.node("n1").jetstream()
    await js.add_stream(name=STREAM, subjects=["s.>"], num_replicas=3, **config)
    acked = await publish_range(js, 0, count)
    last = max(acked.values())
    await cluster.wait_until(lambda: converged(cluster, last), 20, what="replicas converged")
    leader = await cluster.wait_until(lambda: stream_leader(cluster), 10, what="a stream leader")
    follower = next(name for name in cluster.names if name != leader)
    for name in cluster.names:  # every message lives only in the stores now, not in any WAL
        await compact(cluster, name)
    return cluster.node(leader).jetstream(), acked, leader, follower


def change_body(target: int, last: int) -> Callable[[FileStore], None]:
    """A `with_store` change: message `target`'s body rewritten (the messages after it kept), every record's
    CRC still valid — a drift only a content comparison (an audit) finds."""
    def rewrite(store: FileStore) -> None:
        tail = [store.load(seq) for seq in range(target, last + 1)]
        store.truncate(target - 1)
        changed = [(m.seq, m.subject, m.headers, m.payload, m.timestamp_ns) for m in tail]
        changed[0] = (target, tail[0].subject, tail[0].headers, b"changed on disk", tail[0].timestamp_ns)
        store.append_batch(changed)
    return rewrite
