"""Subject delete markers (ADR-48) through nats-py's KV `limit_marker_ttl`, on a real three-node cluster.

Method: a `jsraft.testing.cluster.Cluster` (real nodes, TCP, files, fsync) runs in the test's trio loop;
the scenario is nats-py code under asyncio in a worker thread (`nats_kit.in_asyncio`), talking to a node
that does not lead the bucket's stream. Buckets are made by nats-py's own `create_key_value(...,
limit_marker_ttl=...)`. A key's expiry (its `msg_ttl`, and a bucket's `max_age`) is awaited through a
watcher, which must report a PURGE for it (nats-py maps `Nats-Marker-Reason: MaxAge` to PURGE). Then every
node's store must hold the same state tuple and the marker itself (subject and nats-server's headers),
and a node restarted from its files must still hold it.
"""

from __future__ import annotations

import asyncio

import trio

from jsraft.errors import NoMessageFound
from jsraft.testing.cluster import Cluster
from nats_kit import nats_connect, until
from test_consumers_nats import follower_connection, run_in_cluster

MARKER = b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: {ttl}\r\nNats-Rollup: sub\r\n\r\n"


def stored(cluster: Cluster, name: str, stream: str) -> tuple:
    """Node `name`'s `(agreement_key, [(seq, subject, headers)])` for `stream`, read from its store."""
    store = cluster.replica_store(name, stream)
    msgs, seq = [], 0
    while True:
        try:
            msg = store.load_next(None, seq)
        except NoMessageFound:
            break
        msgs.append((msg.seq, msg.subject, bytes(msg.headers)))
        seq = msg.seq + 1
    return store.state().agreement_key(), msgs


def all_hold(cluster: Cluster, stream: str, msgs: list) -> bool:
    views = [stored(cluster, name, stream) for name in cluster.names]
    return views[0][1] == msgs and len({repr(v) for v in views}) == 1


async def next_purge(watcher, key: str, deadline_s: float = 20.0):
    """The watcher's next PURGE for `key` (a None is the end of the initial values: skipped)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while True:
        assert loop.time() < deadline, f"the watcher saw no marker for {key}"
        entry = await watcher.updates(timeout=deadline_s)
        if entry is not None and entry.key == key and entry.operation == "PURGE":
            return entry


async def test_key_expiry_leaves_the_same_marker_on_every_replica_and_across_a_restart(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        js_admin = admin.jetstream(timeout=10)
        await js_admin.create_key_value(bucket="SDM", limit_marker_ttl=30, replicas=3)
        await js_admin.create_key_value(bucket="AGED", ttl=1, limit_marker_ttl=30, replicas=3)
        nc, _ = await follower_connection(cluster, "KV_SDM")
        js = nc.jetstream(timeout=10)
        kv, aged = await js.key_value("SDM"), await js.key_value("AGED")
        status = await kv.status()
        watcher, aged_watcher = await kv.watch("age"), await aged.watch("old")
        await kv.create("age", b"30", msg_ttl=1)
        await kv.put("kept", b"y")
        await aged.put("old", b"z")
        await next_purge(watcher, "age")
        await next_purge(aged_watcher, "old")
        marker = MARKER.replace(b"{ttl}", b"30s")
        kept_msgs = [(2, "$KV.SDM.kept", b""), (3, "$KV.SDM.age", marker)]
        await until(lambda: all_hold(cluster, "KV_SDM", kept_msgs), "every replica holds the TTL marker")
        await until(lambda: all_hold(cluster, "KV_AGED", [(2, "$KV.AGED.old", marker)]),
                    "every replica holds the max_age marker")
        victim = cluster.names[-1]
        trio.from_thread.run(cluster.restart, victim)
        await until(lambda: cluster.node(victim).streams.replicas.get("KV_SDM") is not None,
                    "the restarted node runs KV_SDM")
        await until(lambda: all_hold(cluster, "KV_SDM", kept_msgs), "the restarted node holds the marker")
        got = (await kv.get("kept")).value
        await nc.close()
        await admin.close()
        return status.marker_ttl, got

    marker_ttl, got = await run_in_cluster(tmp_path, scenario)
    assert marker_ttl == 30.0 and got == b"y"
