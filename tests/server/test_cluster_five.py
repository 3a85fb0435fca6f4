"""Five real nodes in one process: R1, R3 and R5 streams; 10,000 checked publishes to the R5 stream with its
leader killed mid-stream; every replica equal by state tuple and by content, no acked message lost.

Method: `jsraft.testing.cluster.Cluster` (real TCP on loopback, real files and fsync under `tmp_path`).
Publishes go through a node's embedded JetStream context with a msg id each, retried on failure (dedupe
makes a retry of a publish whose outcome was unknown safe). Every wait polls with a deadline.
"""

from __future__ import annotations

import trio
from test_cluster import ELECTION_TICKS, TICK_MS, publish_all, store_content

from jsraft.testing.cluster import Cluster

COUNT = 10_000


def stream_leader(cluster: Cluster, stream: str) -> str | None:
    leaders = {n.streams.replicas[stream].leader_id() for n in cluster.running() if stream in n.streams.replicas}
    return leaders.pop() if len(leaders) == 1 else None


async def test_r1_r3_r5_streams_and_10000_publishes_through_a_leader_kill(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 5, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader(20)
            await cluster.wait_ready(20)
            js = cluster.node("n1").jetstream()
            sizes = {}
            for name, replicas in (("ONE", 1), ("THREE", 3), ("FIVE", 5)):
                info = await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], num_replicas=replicas)
                sizes[name] = len(info.cluster["replicas"])
            assert sizes == {"ONE": 1, "THREE": 3, "FIVE": 5}

            victim = await cluster.wait_until(lambda: stream_leader(cluster, "FIVE"), 10, what="FIVE leader")
            publisher = next(name for name in cluster.names if name != victim)
            acked: dict[int, int] = {}

            async def publish() -> None:
                acked.update(await publish_all(cluster.node(publisher).jetstream(), lambda i: f"five.{i % 11}",
                                               COUNT, workers=64, retry=True))

            async with trio.open_nursery() as inner:
                inner.start_soon(publish)
                await cluster.wait_until(
                    lambda: cluster.replica_store(publisher, "FIVE").state().last_seq >= COUNT // 3, 60,
                    what="a third published")
                await cluster.kill(victim)
            assert len(acked) == COUNT
            assert sorted(acked.values()) == list(range(1, COUNT + 1))  # contiguous, each message once

            await cluster.restart(victim)

            def converged() -> bool:
                keys = set()
                for name in cluster.names:
                    replica = cluster.node(name).streams.replicas.get("FIVE")
                    if replica is None or replica.store is None or replica.store.state().last_seq != COUNT:
                        return False
                    keys.add(replica.store.state().agreement_key())
                return len(keys) == 1
            await cluster.wait_until(converged, 60, what="five equal replicas")
            contents = [store_content(cluster.replica_store(name, "FIVE")) for name in cluster.names]
            assert all(content == contents[0] for content in contents)
            by_seq = {seq: payload for seq, _, payload in contents[0]}
            for i, seq in acked.items():
                assert by_seq[seq] == f"m{i}".encode(), f"acked message {i} (seq {seq}) lost or changed"
