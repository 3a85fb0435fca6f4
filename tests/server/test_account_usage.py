"""`$JS.API.INFO` on a cluster whose streams live on different nodes: the usage is right, and it is
gathered with one request per peer node, not one per stream.

Method: a real three-node `Cluster` (real TCP, files, fsync); nats-py (in an asyncio worker thread)
creates six R1 streams — placement spreads them, two per node — publishes a different number of
messages to each, adds two durable consumers, and asks each node for its account info. The expected
figures are each stream's own `stream_info` (bytes as nats-py reads them) summed, and the consumers
created. Every node's `jsapi.account_usage` handler (the request a node sends a peer for the usage of
the replicas that peer holds) and its `replica.state` / `consumer.names` handlers (what a per-stream
fan-out would call) are wrapped by the test to count the requests they serve: one account info asked
of a node must reach each other node exactly once and call no per-stream method anywhere.
"""

from __future__ import annotations

from typing import Any

import trio

from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect

STREAMS = [f"U{i}" for i in range(6)]
PER_STREAM_METHODS = ("replica.state", "consumer.names")


def count_calls(cluster: Cluster, methods: tuple[str, ...]) -> dict[tuple[str, str], int]:
    """Wrap `methods` in every node's request table; the returned dict counts (node, method) calls."""
    counts: dict[tuple[str, str], int] = {}
    for name in cluster.names:
        table = cluster.node(name).handlers.table
        for method in methods:
            served = table[method]

            async def counted(args: Any, blobs: Any, _served: Any = served, _key: Any = (name, method)) -> Any:
                counts[_key] = counts.get(_key, 0) + 1
                return await _served(args, blobs)
            table[method] = counted
    return counts


async def test_account_info_counts_every_node_with_one_request_per_peer(tmp_path):
    async def fill(url: str) -> tuple[int, dict[str, list[str]]]:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=20)
        for index, stream in enumerate(STREAMS):
            await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], num_replicas=1)
            for seq in range(index + 1):
                await js.publish(f"{stream.lower()}.x", b"p" * (10 * seq + 1))
        await js.add_consumer("U0", durable_name="C0")
        await js.add_consumer("U3", durable_name="C3")
        infos = [await js.stream_info(stream) for stream in STREAMS]
        await nc.close()
        placed: dict[str, list[str]] = {}
        for info in infos:
            placed.setdefault(info.cluster.leader, []).append(info.config.name)
        return sum(info.state.bytes for info in infos), placed

    async def account(url: str) -> tuple[int, int, int]:
        nc = await nats_connect(url)
        info = await nc.jetstream(timeout=20).account_info()
        await nc.close()
        return info.storage, info.consumers, info.streams

    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            expected_bytes, placed = await in_asyncio(fill, cluster.node("n1").url, timeout_s=90)
            assert sorted(len(streams) for streams in placed.values()) == [2, 2, 2], placed
            counts = count_calls(cluster, ("jsapi.account_usage",) + PER_STREAM_METHODS)
            seen = {}
            for name in cluster.names:
                before = dict(counts)
                seen[name] = await in_asyncio(account, cluster.node(name).url, timeout_s=30)
                served = {key: counts.get(key, 0) - before.get(key, 0) for key in counts}
                asked = {node for (node, method), n in served.items() if n and method == "jsapi.account_usage"}
                assert asked == set(cluster.names) - {name}, (name, served)
                assert all(served[(node, "jsapi.account_usage")] == 1 for node in asked), served
                assert not any(n for (_, method), n in served.items() if method in PER_STREAM_METHODS), served
    assert expected_bytes > 0
    assert seen == {name: (expected_bytes, 2, len(STREAMS)) for name in ("n1", "n2", "n3")}
