"""Push consumers from `jsraft.client` (over the wire) and from the embedded context (`node.jetstream()`):
nats-py's `subscribe(subject, queue, durable=..., ...)`, `next_msg(timeout)`, async iteration, acks,
flow-control answers and heartbeats handled inside the subscription.

Method: one node from `jsraft.open_node` (client port 0), real TCP, real files. What the subscription
returns is checked against what was published and against the consumer's replicated state on the node
and the leader's pacing state (`PushLeading.pacer`). Waits are deadline-bounded `next_msg` calls; a test
that needs a redelivery or a heartbeat waits for it to arrive, never for a fixed time.
"""

from __future__ import annotations

import pytest

import jsraft
import jsraft.client as jc
from client_kit import single


def leading(node, stream: str, consumer: str):
    return node.streams.replicas[stream].consumers.leading[consumer]


async def test_wire_client_push_subscribe_ack_and_redelivery(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            js = client.jetstream()
            await js.add_stream(name="S", subjects=["s.>"])
            for i in range(3):
                await js.publish(f"s.{i}", b"m%d" % i)
            sub = await js.subscribe("s.>", durable="D", config={"ack_wait": 1_000_000_000})
            msgs = [await sub.next_msg(timeout=5) for _ in range(3)]
            assert [(m.subject, m.data, m.metadata.stream_seq, m.metadata.consumer) for m in msgs] == \
                [("s.0", b"m0", 1, "D"), ("s.1", b"m1", 2, "D"), ("s.2", b"m2", 3, "D")]
            await msgs[0].ack_sync()
            await msgs[1].ack_sync()
            again = await sub.next_msg(timeout=5)  # the unacked third, after its ack wait
            assert (again.metadata.stream_seq, again.metadata.num_delivered) == (3, 2)
            await again.ack_sync()
            info = await sub.consumer_info()
            assert (info.ack_floor.stream_seq, info.num_ack_pending) == (3, 0)
            assert info.config.deliver_subject == sub.subject
            bound = await js.subscribe("s.>", durable="D")  # binds to the existing consumer
            assert bound.subject == sub.subject
            await bound.unsubscribe()
            with pytest.raises(jc.RequestTimeout):
                await sub.next_msg(timeout=0.3)


async def test_wire_client_answers_flow_control_and_counts_heartbeats(tmp_path):
    count, size = 300, 16384  # 4.9 MB: past several flow-control windows (2 MiB, 4 MiB, ...)
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            js = client.jetstream()
            await js.add_stream(name="F", subjects=["f.>"])
            for _ in range(count):
                await js.publish("f.x", b"z" * size)
            sub = await js.subscribe("f.x", ordered_consumer=True, idle_heartbeat=0.2)
            seqs = []
            async for msg in sub:
                seqs.append(msg.metadata.stream_seq)
                if len(seqs) == count:
                    break
            assert seqs == list(range(1, count + 1))
            assert sub.flow_control_answers >= 2
            assert leading(node, "F", sub.consumer).pacer.fc_count == sub.flow_control_answers
            info = await sub.consumer_info()
            assert (info.config.flow_control, info.config.ack_policy.value, info.config.mem_storage) == \
                (True, "none", True)
            await js.publish("f.x", b"late")
            assert (await sub.next_msg(timeout=5)).data == b"late"
            with pytest.raises(jc.RequestTimeout):
                await sub.next_msg(timeout=0.5)  # only heartbeats come now
            assert sub.heartbeats >= 1


async def test_embedded_context_push_subscribe(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        js = node.jetstream()
        await js.add_stream(name="E", subjects=["e.>"])
        await js.publish("e.1", b"one")
        sub = await js.subscribe("e.>", queue="workers")
        msg = await sub.next_msg(timeout=5)
        assert (msg.subject, msg.data, msg.metadata.consumer) == ("e.1", b"one", "workers")
        await msg.ack_sync()
        state = node.streams.replicas["E"].adapter.consumers.entries["workers"].state
        assert state.ack_floor_stream_seq == 1
        info = await js.consumer_info("E", "workers")
        assert info.config.deliver_group == "workers"
        await sub.unsubscribe()


async def test_wire_client_ordered_consumer_is_made_again_after_it_was_lost(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            js = client.jetstream()
            await js.add_stream(name="O", subjects=["o.>"])
            for i in range(1, 6):
                await js.publish("o.x", b"%d" % i)
            sub = await js.subscribe("o.x", ordered_consumer=True, idle_heartbeat=0.2)
            first = [await sub.next_msg(timeout=5) for _ in range(5)]
            lost = sub.consumer
            await js.delete_consumer("O", lost)  # its heartbeats stop: the subscription notices
            for i in range(6, 11):
                await js.publish("o.x", b"%d" % i)
            rest = [await sub.next_msg(timeout=10) for _ in range(5)]
            assert [m.data for m in first + rest] == [b"%d" % i for i in range(1, 11)]
            assert [m.metadata.stream_seq for m in rest] == list(range(6, 11))
            assert [m.metadata.consumer_seq for m in rest] == list(range(1, 6))  # a new consumer from seq 6
            assert sub.resets >= 1 and sub.consumer != lost
            info = await sub.consumer_info()
            assert (info.config.deliver_policy.value, info.config.opt_start_seq) == ("by_start_sequence", 6)
            with pytest.raises(ValueError):
                await js.subscribe("o.x", durable="D", ordered_consumer=True)
