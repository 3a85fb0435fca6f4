"""nats-py's Key-Value and Object Store against a real three-node jsraft cluster, including TTLs (ADR-43).

Method: a `jsraft.testing.cluster.Cluster` (real nodes, TCP, files) runs in the test's trio loop; each
scenario is nats-py code run under asyncio in a worker thread (`nats_kit.in_asyncio`), connected to a
node that does not lead the bucket's stream where that matters, so requests are forwarded. Buckets are
made with nats-py's own `create_key_value` (which sends `allow_msg_ttl`), never by hand. Expiry is
awaited by polling with a deadline, never by sleeping a TTL: a message is gone when `get` says so, and
then every replica's store must hold the same state tuple (`agreement_key`), read on each node directly.
Refusals are checked by nats-server's `err_code`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats.js.errors
import trio

from jsraft.testing.cluster import Cluster
from nats_kit import nats_connect, until
from test_consumers_nats import follower_connection, run_in_cluster

TTL_DEADLINE_S = 20.0


def replica_keys(cluster: Cluster, stream: str) -> list[Any]:
    """Each node's `(agreement_key, msgs)` for `stream`, read from its live store (None where it has none)."""
    keys = []
    for name in cluster.names:
        replica = cluster.node(name).streams.replicas.get(stream)
        store = replica.store if replica is not None else None
        keys.append(None if store is None else (store.state().agreement_key(), store.state().msgs))
    return keys


def replicas_agree(cluster: Cluster, stream: str, msgs: int) -> bool:
    keys = replica_keys(cluster, stream)
    return None not in keys and len(set(keys)) == 1 and keys[0][1] == msgs


async def gone(kv: Any, key: str, deadline_s: float = TTL_DEADLINE_S) -> float:
    """Poll `kv.get(key)` until it says the key is not found; the seconds that took."""
    started = time.monotonic()
    while True:
        try:
            await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return time.monotonic() - started
        assert time.monotonic() - started < deadline_s, f"{key} did not expire within {deadline_s}s"
        await asyncio.sleep(0.05)


async def test_key_value_bucket_put_get_update_delete_purge_history_keys_watch(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        kv = await admin.jetstream(timeout=10).create_key_value(bucket="CFG", history=5, replicas=3)
        nc, _ = await follower_connection(cluster, "KV_CFG")
        js = nc.jetstream(timeout=10)
        kv = await js.key_value("CFG")
        info = await js.stream_info("KV_CFG")
        r1 = await kv.put("color", b"red")
        r2 = await kv.update("color", b"blue", last=r1)
        stale = None
        try:
            await kv.update("color", b"green", last=r1)
        except nats.js.errors.KeyWrongLastSequenceError as error:
            stale = error
        await kv.create("size", b"L")
        await kv.put("shape", b"round")
        got = await kv.get("color")
        history = [(e.value, e.operation) for e in await kv.history("color")]
        await kv.delete("size")
        await kv.purge("shape")
        keys = sorted(await kv.keys())
        watcher = await kv.watchall()
        seen = []
        while (entry := await watcher.updates(timeout=5)) is not None:
            seen.append((entry.key, entry.value, entry.operation))
        await kv.put("color", b"black")
        update = await watcher.updates(timeout=5)
        seen.append((update.key, update.value, update.operation))
        await watcher.stop()
        store = await js.create_object_store("FILES", config=None)
        payload = bytes(range(256)) * 2000  # 500 KiB: four chunks of nats-py's 128 KiB
        await store.put("blob", payload)
        same = (await store.get("blob")).data == payload
        # color: red, blue, black; size: L and its delete marker; shape: only its purge marker (a rollup)
        await until(lambda: replicas_agree(cluster, "KV_CFG", 6), "KV_CFG replicas agree")
        await nc.close()
        await admin.close()
        return info, (r1, r2), stale, got, history, keys, seen, same

    info, (r1, r2), stale, got, history, keys, seen, same = await run_in_cluster(tmp_path, scenario)
    assert info.config.allow_msg_ttl is True and info.config.max_msgs_per_subject == 5
    assert (r1, r2) == (1, 2) and stale is not None and got.value == b"blue" and got.revision == 2
    assert history == [(b"red", None), (b"blue", None)]
    assert keys == ["color"]  # deleted and purged keys are not listed
    assert [(k, v) for k, v, _ in seen] == [("color", b"blue"), ("size", b""), ("shape", b""),
                                            ("color", b"black")]
    assert [op for _, _, op in seen] == [None, "DEL", "PURGE", None]
    assert same


async def test_ttl_bucket_and_per_message_ttl_expire_identically_on_every_replica(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        js_admin = admin.jetstream(timeout=10)
        await js_admin.create_key_value(bucket="AGED", ttl=2, replicas=3)  # max_age 2 s
        await js_admin.create_key_value(bucket="TTL", history=3, replicas=3)  # no max_age
        nc, _ = await follower_connection(cluster, "KV_TTL")
        js = nc.jetstream(timeout=10)
        aged, ttl = await js.key_value("AGED"), await js.key_value("TTL")
        await aged.put("a", b"1")
        await ttl.create("short", b"x", msg_ttl=1)  # `Nats-TTL: 1`
        await ttl.put("kept", b"y")
        await js.publish("$KV.TTL.long", b"z", headers={"Nats-TTL": "1h"})
        await js.publish("$KV.TTL.never", b"w", headers={"Nats-TTL": "never"})
        waited = {"aged": await gone(aged, "a"), "short": await gone(ttl, "short")}
        kept = [(await ttl.get(k)).value for k in ("kept", "long", "never")]
        await until(lambda: replicas_agree(cluster, "KV_TTL", 3), "KV_TTL replicas agree after the TTL delete")
        await until(lambda: replicas_agree(cluster, "KV_AGED", 0), "KV_AGED replicas agree after max_age")
        keys = trio.from_thread.run_sync(replica_keys, cluster, "KV_TTL")
        await nc.close()
        await admin.close()
        return waited, kept, keys

    waited, kept, keys = await run_in_cluster(tmp_path, scenario)
    assert kept == [b"y", b"z", b"w"]
    assert all(t < TTL_DEADLINE_S for t in waited.values())
    assert len(set(keys)) == 1 and keys[0][1] == 3


async def test_nats_ttl_publishes_refused_with_nats_server_codes(tmp_path):
    async def scenario(cluster, url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="PLAIN", subjects=["plain.>"], num_replicas=3)
        await js.create_key_value(bucket="K", replicas=3)
        refused = {}
        for name, subject, value in (("disabled", "plain.a", "5s"), ("zero", "$KV.K.a", "0"),
                                     ("short", "$KV.K.a", "500ms"), ("garbled", "$KV.K.a", "soon")):
            try:
                await js.publish(subject, b"x", headers={"Nats-TTL": value})
            except nats.js.errors.APIError as error:
                refused[name] = (error.err_code, error.description)
        update_error = None
        info = await js.stream_info("KV_K")
        config = info.config
        config.allow_msg_ttl = False
        try:
            await js.update_stream(config)
        except nats.js.errors.APIError as error:
            update_error = (error.err_code, error.description)
        state = (await js.stream_info("KV_K")).state
        await nc.close()
        return refused, update_error, state

    refused, update_error, state = await run_in_cluster(tmp_path, scenario)
    assert refused == {"disabled": (10166, "per-message TTL is disabled"),
                       "zero": (10165, "invalid per-message TTL"), "short": (10165, "invalid per-message TTL"),
                       "garbled": (10165, "invalid per-message TTL")}
    assert update_error == (10052, "message TTL status can not be disabled")
    assert state.messages == 0 and state.last_seq == 0  # nothing refused was stored or took a sequence
