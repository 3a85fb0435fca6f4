"""`$JSRAFT.BULK.GET` on a follower: it serves a range from its own replica only once it has applied all
of it; a range it has not applied goes to the stream leader, and when the leader cannot be reached the
answer is an error, never the part the follower holds.

Method: a 3-node in-process `Cluster` whose node-to-node links run through the chaos `Relay` (client ports
are direct). An R3 stream gets 10 acknowledged messages; once a follower F may serve 1..10
(`bulk_get.readable_store`), F is isolated from its peers (every link cut both ways) and 10 more are
published through the third node (the leader and it commit them). Requests go to F with nats-py:
1..10 is answered from F's store (F's `local_chunks` counter moves, `leader_chunks` does not); 1..20 is
not in F's store, so F asks the leader, which it cannot reach: the answer is a `500` after the router's
deadline, with no chunk. After the heal, once F may serve 1..20, F answers all 20 from its own store.
What F answers is compared with what the leader's store holds.
"""

from __future__ import annotations

from typing import Any

import trio

from jsraft.server.api.bulk_get import readable_store
from jsraft.testing.chaos.relay import Relay
from jsraft.testing.cluster import Cluster, relayed_configs
from nats_kit import in_asyncio, nats_connect
from test_bulk_get import bulk

NAMES = ["n1", "n2", "n3"]


async def _publish(url: str, first: int, create: bool) -> None:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    if create:
        await js.add_stream(name="S", subjects=["s.>"], num_replicas=3)
    for i in range(first, first + 10):
        await js.publish(f"s.{i % 2}", b"m%d" % i)
    await nc.close()


async def _reads(url: str, bodies: list[dict[str, Any]]) -> list[Any]:
    nc = await nats_connect(url)
    try:
        return [await bulk(nc, body, timeout_s=40) for body in bodies]
    finally:
        await nc.close()


def _leader(cluster: Cluster) -> str | None:
    for name in NAMES:
        replica = cluster.node(name).streams.replicas.get("S")
        if replica is not None and replica.leader is not None:
            return name
    return None


def _held(cluster: Cluster, name: str, last: int) -> list[tuple[int, str, bytes]]:
    store = cluster.node(name).streams.replicas["S"].store
    return [(m.seq, m.subject, m.payload) for m in (store.load(seq) for seq in range(1, last + 1))]


async def test_a_follower_serves_what_it_applied_and_never_part_of_what_it_has_not(tmp_path):
    with Relay(NAMES) as relay:
        async with trio.open_nursery() as nursery:
            cluster = Cluster(nursery, relayed_configs(tmp_path, relay, NAMES, cluster_name="bulk"))
            try:
                for name in NAMES:
                    await cluster.start_node(name)
                await cluster.wait_for_meta_leader(timeout=20)
                await cluster.wait_ready(timeout=20)
                await in_asyncio(_publish, cluster.node("n1").url, 1, True, timeout_s=60)
                leader = await cluster.wait_until(lambda: _leader(cluster), 20, what="a stream leader")
                follower, other = [name for name in NAMES if name != leader]
                node = cluster.node(follower)
                await cluster.wait_until(lambda: readable_store(node.streams.replicas, "S", 10) is not None, 20,
                                         what="the follower able to serve 1..10")
                relay.isolate(follower)
                await in_asyncio(_publish, cluster.node(other).url, 11, False, timeout_s=60)
                counters = node.jsapi.bulk
                local, routed = counters.local_chunks, counters.leader_chunks
                applied, unapplied = await in_asyncio(
                    _reads, node.url, [{"seq": 1, "last_seq": 10, "batch": 100},
                                       {"seq": 1, "last_seq": 20, "batch": 100}], timeout_s=90)
                assert node.streams.replicas["S"].store.state().last_seq == 10  # still isolated, still behind
                rows, chunks, eob = applied
                assert [(r[0], r[1], r[3]) for r in rows] == _held(cluster, leader, 10)
                assert eob["Jsraft-Bulk-End"] == "1" and counters.local_chunks == local + 1
                rows, chunks, eob = unapplied  # the leader is unreachable: an error, not rows 1..10
                assert rows == [] and chunks == 0 and eob["Status"] == "500", eob
                assert counters.local_chunks == local + 1 and counters.leader_chunks == routed
                relay.heal_all()
                await cluster.wait_until(lambda: readable_store(node.streams.replicas, "S", 20) is not None, 30,
                                         what="the healed follower able to serve 1..20")
                (healed,) = await in_asyncio(_reads, node.url, [{"seq": 1, "last_seq": 20, "batch": 100}],
                                             timeout_s=60)
                leader = await cluster.wait_until(lambda: _leader(cluster), 20, what="a stream leader")
                assert [(r[0], r[1], r[3]) for r in healed[0]] == _held(cluster, leader, 20)
                assert counters.local_chunks == local + 2
            finally:
                await cluster.stop_all()
                nursery.cancel_scope.cancel()
