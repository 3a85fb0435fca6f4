"""A push consumer delivers as soon as its deliver subject gets a subscriber on the leader's node.

Method: nats-py's `js.subscribe` creates a push consumer and only then subscribes its deliver subject (as
nats-py does for every push and ordered consumer, KV watchers included). The consumer service looks for a
subscriber again only every `INTEREST_POLL_NS`; the test raises that to an hour and uses a durable push
consumer (no heartbeat, no inactivity timer, which would also wake it), so the messages can arrive within
the test's deadline only through the wake a new client subscription gives the consumers
waiting for it (`ConsumerHub._on_subscription`). A three-node `Cluster` (real nodes, TCP, files); the
client is connected to the stream's leader, where the consumer is led.
"""

from __future__ import annotations

import trio

from jsraft.replica import consumer_push
from nats_kit import nats_connect, until
from test_consumers_nats import run_in_cluster, stream_leader

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
