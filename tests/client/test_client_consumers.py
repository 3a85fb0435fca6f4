"""Pull consumers from `jsraft.client` (over the wire) and from the embedded context (`node.jetstream()`):
the same method names as nats-py — `add_consumer`, `consumer_info`, `consumers`, `delete_consumer`,
`pull_subscribe`, `fetch`, and a message's `ack`, `ack_sync`, `nak(delay)`, `in_progress`, `term`.

Method: one node from `jsraft.open_node` (client port 0) and a three-node `Cluster` for the embedded
context used on a node that does not lead the stream; real TCP, real files. What each context returns
is checked against the other and against the consumer's replicated state on the node
(`replica.adapter.consumers`). Waits are deadline polls (`client_kit.until`), no sleeps that hope.
"""

from __future__ import annotations

import pytest
import trio

import jsraft
import jsraft.client as jc
from client_kit import single, until
from jsraft.errors import JsraftError
from jsraft.testing.cluster import Cluster


def consumer_state(node, stream: str, consumer: str):
    return node.streams.replicas[stream].adapter.consumers.entries[consumer].state


async def test_wire_client_pull_consumer_round_trip(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            js = client.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            for i in range(4):
                await js.publish(f"s.{i}", b"m%d" % i)
            info = await js.add_consumer("S", durable_name="D", ack_wait=2_000_000_000)
            assert (info.name, info.config.durable_name, info.num_pending) == ("D", "D", 4)
            sub = await js.pull_subscribe("s.>", durable="D", stream="S")
            msgs = await sub.fetch(3, timeout=5)
            assert [(m.subject, m.data, m.metadata.stream_seq, m.metadata.num_delivered) for m in msgs] == \
                [("s.0", b"m0", 1, 1), ("s.1", b"m1", 2, 1), ("s.2", b"m2", 3, 1)]
            await msgs[0].ack_sync()
            await msgs[1].nak()
            await msgs[2].term()
            again = await sub.fetch(2, timeout=5)  # the NAKed one first, then the fourth
            assert [(m.metadata.stream_seq, m.metadata.num_delivered) for m in again] == [(2, 2), (4, 1)]
            await again[1].in_progress()
            for msg in again:
                await msg.ack_sync()
            info = await js.consumer_info("S", "D")
            assert (info.delivered.stream_seq, info.ack_floor.stream_seq, info.num_ack_pending) == (4, 4, 0)
            state = consumer_state(node, "S", "D")
            assert (state.ack_floor_stream_seq, state.num_ack_pending) == (4, 0)
            with pytest.raises(jc.RequestTimeout):
                await sub.fetch(1, timeout=0.3)
            ephemeral = await js.pull_subscribe("s.1")  # stream found by subject, an ephemeral consumer
            assert [m.data for m in await ephemeral.fetch(5, timeout=5)] == [b"m1"]
            assert sorted(i.name for i in await js.consumers("S")) == sorted(["D", ephemeral.consumer])
            assert await js.delete_consumer("S", "D") is True
            with pytest.raises(JsraftError) as missing:
                await js.consumer_info("S", "D")
            assert missing.value.err_code == 10014


async def test_embedded_context_pulls_and_acks(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        js = node.jetstream()
        await js.add_stream(name="S", subjects=["s.>"], retention="workqueue")
        for i in range(3):
            await js.publish(f"s.{i}", b"m%d" % i)
        sub = await js.pull_subscribe("s.>", durable="W")
        msgs = await sub.fetch(3, timeout=5)
        assert [(m.subject, m.data, m.metadata.consumer_seq) for m in msgs] == \
            [("s.0", b"m0", 1), ("s.1", b"m1", 2), ("s.2", b"m2", 3)]
        await msgs[0].ack_sync()
        await msgs[1].ack()
        await msgs[2].nak(delay=0.2)
        again = await sub.fetch(1, timeout=5)
        assert (again[0].metadata.stream_seq, again[0].metadata.num_delivered) == (3, 2)
        await again[0].term()
        store = node.streams.replicas["S"].store
        await until(lambda: store.state().msgs == 0, "the work queue emptied by ack, ack and term")
        info = await js.consumer_info("S", "W")
        assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (3, 0, 0)
        assert [i.name for i in await js.consumers("S")] == ["W"]
        with pytest.raises(jc.RequestTimeout):
            await sub.fetch(1, timeout=0.3)
        assert await js.delete_consumer("S", "W") is True
        with pytest.raises(JsraftError) as missing:
            await js.consumer_info("S", "W")
        assert missing.value.err_code == 10014


async def test_embedded_context_on_a_node_that_does_not_lead_the_stream(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=25) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node("n1").jetstream()
            await js.add_stream(name="R", subjects=["r.>"], num_replicas=3)

            def leader() -> str | None:  # a replica may still be opening: the create answers once one leads
                return next((n.name for n in cluster.running()
                             if (replica := n.streams.replicas.get("R")) is not None and replica.leader is not None),
                            None)

            await until(lambda: leader() is not None, "a stream leader")
            other = next(name for name in cluster.names if name != leader())
            js = cluster.node(other).jetstream()
            await js.publish("r.a", b"x")
            sub = await js.pull_subscribe("r.a", durable="C")
            msgs = await sub.fetch(1, timeout=5)
            assert msgs[0].data == b"x" and msgs[0].metadata.num_delivered == 1
            await msgs[0].ack_sync()
            def ack_floor(name: str) -> int:  # 0 while that replica or its consumer is still opening
                replica = cluster.node(name).streams.replicas.get("R")
                entry = replica.adapter.consumers.entries.get("C") if replica and replica.adapter else None
                return entry.state.ack_floor_stream_seq if entry is not None else 0

            await until(lambda: all(ack_floor(n) == 1 for n in cluster.names), "every replica's ack floor at 1")
            assert (await js.consumer_info("R", "C")).cluster["leader"] == leader() != other
