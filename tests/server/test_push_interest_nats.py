"""A push consumer delivers as soon as its deliver subject gets a subscriber on the leader's node.

Method: nats-py's `js.subscribe` creates a push consumer and only then subscribes its deliver subject (as
nats-py does for every push and ordered consumer, KV watchers included). The consumer service looks for a
subscriber again only every `INTEREST_POLL_NS`; the test raises that to an hour and uses a durable push
consumer (no heartbeat, no inactivity timer, which would also wake it), so the messages can arrive within
the test's deadline only through the wake a new client subscription gives the consumers
waiting for it (`ConsumerHub._on_subscription`). A three-node `Cluster` (real nodes, TCP, files); the
client is connected to the stream's leader, where the consumer is led. The hub finds the consumers to wake
in the node's `InterestWaits`, not by asking every stream: the second test moves a push consumer's stream
to another leader before its deliver subject is subscribed, and checks on every node, between the steps
(polled in the nodes' thread, with a deadline), that the registry equals the full scan of the node's open
replicas — the consumer waits at the old leader, then at the new one only, then nowhere once subscribed —
and that the new leader delivers at the subscription.
"""

from __future__ import annotations

import json
from typing import Any

import trio
from nats.js.api import ConsumerConfig

from jsraft.replica import consumer_push
from jsraft.server.groups.interest_waits import waiting_scan
from nats_kit import nats_connect, until
from test_consumers_nats import run_in_cluster, stream_leader


def waiting_at(node: Any) -> set[tuple[str, str]]:
    """(stream, consumer) of each push consumer `node`'s registry holds as waiting for a subscriber."""
    return {(service.stream, leading.name) for service, leading in node.jsapi.consumer_hub.waits.entries()}


def registries_are_the_scan(cluster: Any) -> bool:
    """Whether every node's registry equals the full scan of its open replicas' consumer services."""
    return all(node.jsapi.consumer_hub.waits.entries() ==
               waiting_scan(replica.consumers for replica in node.streams.replicas.values())
               for node in cluster.running())


async def test_push_consumer_delivers_at_the_subscription_not_at_the_next_interest_poll(tmp_path, monkeypatch):
    monkeypatch.setattr(consumer_push, "INTEREST_POLL_NS", 3600 * 1_000_000_000)

    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="PUSHED", subjects=["pushed.>"], num_replicas=3)
        await until(lambda: stream_leader(cluster, "PUSHED") is not None, "a leader for PUSHED")
        leader = trio.from_thread.run_sync(stream_leader, cluster, "PUSHED")
        nc = await nats_connect(cluster.node(leader).url)
        js = nc.jetstream(timeout=10)
        for i in range(3):
            await js.publish(f"pushed.{i}", b"x")
        sub = await js.subscribe("pushed.>", durable="D", manual_ack=True)  # no heartbeat, no inactivity timer
        got = [(await sub.next_msg(timeout=20)).subject for _ in range(3)]
        await nc.close()
        await admin.close()
        return got

    got = await run_in_cluster(tmp_path, scenario)
    assert got == ["pushed.0", "pushed.1", "pushed.2"]


async def test_a_push_consumer_moved_to_a_new_leader_waits_there_and_delivers_at_the_subscription(tmp_path, monkeypatch):
    monkeypatch.setattr(consumer_push, "INTEREST_POLL_NS", 3600 * 1_000_000_000)

    async def scenario(cluster, url):
        admin = await nats_connect(url)
        js = admin.jetstream(timeout=10)
        for name in ("MOVED", "IDLE"):
            await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], num_replicas=3)
        # Never subscribed: it waits all along, and no subscription below may wake its service.
        await js.add_consumer("IDLE", ConsumerConfig(durable_name="I", deliver_subject="deliver.idle"))
        await js.add_consumer("MOVED", ConsumerConfig(durable_name="D", deliver_subject="deliver.moved"))
        for i in range(3):
            await js.publish(f"moved.{i}", b"x")
        await until(lambda: stream_leader(cluster, "MOVED") is not None, "a leader for MOVED")
        first = trio.from_thread.run_sync(stream_leader, cluster, "MOVED")
        await until(lambda: ("MOVED", "D") in waiting_at(cluster.node(first)), "D waiting at the first leader")
        await until(lambda: registries_are_the_scan(cluster), "every registry equal to its scan")
        answer = json.loads((await admin.request("$JS.API.STREAM.LEADER.STEPDOWN.MOVED", b"", timeout=10)).data)
        await until(lambda: stream_leader(cluster, "MOVED") not in (None, first), "a new leader for MOVED")
        second = trio.from_thread.run_sync(stream_leader, cluster, "MOVED")
        moved = lambda: [("MOVED", "D") in waiting_at(cluster.node(name)) for name in (first, second)]  # noqa: E731
        await until(lambda: moved() == [False, True], "D waiting at the new leader only")
        await until(lambda: registries_are_the_scan(cluster), "every registry equal to its scan after the move")
        nc = await nats_connect(cluster.node(second).url)
        sub = await nc.subscribe("deliver.moved")
        got = [(await sub.next_msg(timeout=20)).subject for _ in range(3)]
        await until(lambda: moved() == [False, False], "D no longer waiting once subscribed")
        await until(lambda: registries_are_the_scan(cluster), "every registry equal to its scan at the end")
        idle = trio.from_thread.run_sync(stream_leader, cluster, "IDLE")
        still = trio.from_thread.run_sync(lambda: ("IDLE", "I") in waiting_at(cluster.node(idle)))
        await nc.close()
        await admin.close()
        return answer, got, still

    answer, got, still_waiting = await run_in_cluster(tmp_path, scenario)
    assert answer.get("success") is True
    assert got == ["moved.0", "moved.1", "moved.2"]
    assert still_waiting
