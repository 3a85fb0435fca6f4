"""The client port's ack shortcut (ClientServer invariant 6): acks go straight to the consumer hub only
while nothing else could receive them, and NATS semantics stay as they were.

Method: a real three-node `Cluster` (TCP, files) and nats-py scenarios (`nats_kit.in_asyncio`), as in
`test_consumers_nats`. Every node's port is instrumented from the trio thread: its shortcut handler is
wrapped to count the acks it took, `dispatch_internal` to count the ack subjects delivered the general
way (sublist match, `InternalMsg`). Checked, each against the consumer's ack floor (every ack applied):
acks published at the stream leader take the shortcut; a client subscribed to `$JS.ACK.>` on another
node (a peer's route interest) or on the leader itself (a local subscription) receives every ack while
the consumer still gets them all — the general way — and the shortcut comes back once it unsubscribes;
acks published at a node that does not lead the stream take that node's shortcut and still reach the
leader (the hub's lane and `$rpc`). `could_match_ack` is checked on its own for the subjects that can
and cannot match an ack.
"""

from __future__ import annotations

import asyncio
from typing import Any

import trio
from nats.js.api import ConsumerConfig

from jsraft.server.nats.ack_shortcut import could_match_ack
from nats_kit import nats_connect, until
from test_consumers_nats import follower_connection, run_in_cluster, stream_leader


def test_could_match_ack():
    for subject in ("$JS.ACK.>", "$JS.ACK.S.C.1.2.3.4.5", "$JS.*.S.>", "*.ACK.>", ">", "*.*.>", "$JS.>",
                    "*.>"):
        assert could_match_ack(subject), subject
    for subject in ("$JS.API.>", "$JS.FC.>", "$JS.API.CONSUMER.MSG.NEXT.*.*", "orders.>", "$JS", "$JSX.ACK.>",
                    "_INBOX.>"):
        assert not could_match_ack(subject), subject


def instrument(cluster: Any) -> dict[str, dict[str, int]]:
    """Per node: acks taken by the shortcut (one by one or as a client's run), ack subjects delivered the
    general way."""
    counts: dict[str, dict[str, int]] = {}
    for node in cluster.running():
        clients = node.clients
        seen = counts[node.name] = {"shortcut": 0, "general": 0}

        def shortcut(subject, reply, payload, _handler=clients._ack_handler, _seen=seen):
            taken = _handler(subject, reply, payload)
            _seen["shortcut"] += taken
            return taken

        def shortcut_run(subjects, _handler=clients._ack_run_handler, _seen=seen):
            refused = _handler(subjects)
            _seen["shortcut"] += len(subjects) - len(refused)
            return refused

        def general(sub, origin, subject, *rest, _dispatch=clients.dispatch_internal, _seen=seen):
            if subject.startswith(b"$JS.ACK."):
                _seen["general"] += 1
            return _dispatch(sub, origin, subject, *rest)

        clients._ack_handler = shortcut
        clients._ack_run_handler = shortcut_run
        clients.dispatch_internal = general
    return counts


async def fetch_and_ack(js: Any, psub: Any, count: int) -> list[str]:
    """Publish `count` messages, fetch and ack them all (plain acks, fire and forget); their ack subjects."""
    for i in range(count):
        await js.publish("a", b"m%d" % i)
    replies: list[str] = []
    while len(replies) < count:
        for msg in await psub.fetch(count - len(replies), timeout=5):
            replies.append(msg.reply)
            await msg.ack()
    return replies


async def ack_floor_at(js: Any, seq: int) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        info = await js.consumer_info("A", "C")
        if info.ack_floor.stream_seq == seq and info.num_ack_pending == 0:
            return
        assert asyncio.get_running_loop().time() < deadline, f"ack floor {info.ack_floor} not at {seq}"
        await asyncio.sleep(0.02)


async def received(sub: Any, count: int) -> list[str]:
    subjects = []
    while len(subjects) < count:
        subjects.append((await sub.next_msg(timeout=5)).subject)
    return subjects


def rivals(cluster: Any, name: str) -> int:
    return cluster.node(name).clients.ack_rivals


async def test_acks_at_the_leader_take_the_shortcut_and_ack_subscribers_still_see_every_ack(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="A", subjects=["a"], num_replicas=3)
        await until(lambda: stream_leader(cluster, "A") is not None, "a leader for A")
        leader = trio.from_thread.run_sync(stream_leader, cluster, "A")
        other = next(name for name in cluster.names if name != leader)
        counts = trio.from_thread.run_sync(instrument, cluster)
        nc = await nats_connect(cluster.node(leader).url)
        js = nc.jetstream(timeout=10)
        await js.add_consumer("A", ConsumerConfig(durable_name="C", ack_policy="explicit", ack_wait=30))
        psub = await js.pull_subscribe_bind("C", stream="A")
        seen: dict[str, Any] = {"rivals_before": trio.from_thread.run_sync(rivals, cluster, leader)}
        await fetch_and_ack(js, psub, 20)
        await ack_floor_at(js, 20)
        seen["alone"] = dict(counts[leader])
        # A client on another node subscribes to every ack: its interest reaches the leader by the routes.
        remote = await nats_connect(cluster.node(other).url)
        watch = await remote.subscribe("$JS.ACK.>")
        await remote.flush()
        await until(lambda: rivals(cluster, leader) == 1, "the peer's ack interest at the leader")
        replies = await fetch_and_ack(js, psub, 20)
        seen["remote_got"] = (await received(watch, 20)) == replies
        await ack_floor_at(js, 40)
        seen["remote"] = dict(counts[leader])
        await watch.unsubscribe()
        await remote.flush()
        await until(lambda: rivals(cluster, leader) == 0, "the peer's ack interest gone")
        # A client on the leader itself, on a subject with a wildcard where ACK is.
        local = await nats_connect(cluster.node(leader).url)
        mine = await local.subscribe("$JS.*.A.C.>")
        await local.flush()
        seen["rivals_local"] = trio.from_thread.run_sync(rivals, cluster, leader)
        replies = await fetch_and_ack(js, psub, 10)
        seen["local_got"] = (await received(mine, 10)) == replies
        await ack_floor_at(js, 50)
        await mine.unsubscribe()
        await local.flush()
        await until(lambda: rivals(cluster, leader) == 0, "the local ack interest gone")
        await fetch_and_ack(js, psub, 10)
        await ack_floor_at(js, 60)
        seen["after"] = dict(counts[leader])
        for conn in (local, remote, nc, admin):
            await conn.close()
        return seen

    seen = await run_in_cluster(tmp_path, scenario)
    assert seen["rivals_before"] == 0
    assert seen["alone"] == {"shortcut": 20, "general": 0}
    assert seen["remote_got"] and seen["remote"] == {"shortcut": 20, "general": 20}
    assert seen["rivals_local"] == 1 and seen["local_got"]
    assert seen["after"] == {"shortcut": 30, "general": 30}


async def test_acks_at_a_node_that_does_not_lead_take_its_shortcut_and_reach_the_leader(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="A", subjects=["a"], num_replicas=3)
        nc, leader = await follower_connection(cluster, "A")
        connected = next(name for name in cluster.names if name != leader)  # as `follower_connection` picks
        counts = trio.from_thread.run_sync(instrument, cluster)
        js = nc.jetstream(timeout=10)
        await js.add_consumer("A", ConsumerConfig(durable_name="C", ack_policy="explicit", ack_wait=30))
        psub = await js.pull_subscribe_bind("C", stream="A")
        await fetch_and_ack(js, psub, 30)
        await ack_floor_at(js, 30)
        seen = {"leader": leader, "connected": connected, "counts": {n: dict(c) for n, c in counts.items()}}
        await nc.close()
        await admin.close()
        return seen

    seen = await run_in_cluster(tmp_path, scenario)
    assert seen["connected"] != seen["leader"]
    assert seen["counts"][seen["connected"]] == {"shortcut": 30, "general": 0}
    assert seen["counts"][seen["leader"]] == {"shortcut": 0, "general": 0}
