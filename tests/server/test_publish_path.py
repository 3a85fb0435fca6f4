"""The publish path of a stream under load: order, answers and accounting, on the leader and through a
follower (`stream_publish`, `publish_batch`, `publish_pipeline`).

Method: a real three-node cluster (`jsraft.testing.cluster.Cluster`, real TCP, real files); nats-py's
`publish_async` with hundreds of publishes in flight, run under asyncio in a worker thread
(`nats_kit.in_asyncio`). Each payload names its position in the publisher's order, so the PubAcks tell
whether the stream kept that order: the message published k-th must be stored at seq k. What the stream
holds is read back with `get_msg`, never inferred from the acks. The server side is read from the node
itself once the client is done: every publish released from its connection's in-flight bound, and the
publishes carried in fewer `msg.publish_batch` requests than there were publishes (they travel in
batches). One test moves the stream's leader while publishes are in flight: each publish must be answered
exactly once, and each acknowledged one must be stored once, at its seq.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import trio

from jsraft.server.groups import publish_batch
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect, until

COUNT = 1200
IN_FLIGHT = 256


def _stream_leader(cluster: Cluster, name: str = "ORDERS") -> str | None:
    for node in cluster.running():
        replica = node.streams.replicas.get(name)
        if replica is not None and replica.leader is not None:
            return node.name
    return None


def _in_flight(cluster: Cluster) -> list[int]:
    return [conn.internal_inflight for node in cluster.running() for conn in node.clients.clients.values()]


async def _publish_in_order(url: str, count: int, stepdown_at: int | None = None) -> dict[str, Any]:
    """Publish `count` messages with at most `IN_FLIGHT` unanswered, each with a reply subject of its own,
    and collect every answer (raw JSON), so an answer that comes twice or never is seen as such."""
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=20)
    inbox = nc.new_inbox()
    answers: dict[int, list[dict[str, Any]]] = {}
    room = asyncio.Semaphore(IN_FLIGHT)
    done = asyncio.Event()

    async def on_answer(msg: Any) -> None:
        position = int(msg.subject.rpartition(".")[2])
        answers.setdefault(position, []).append(json.loads(msg.data))
        if len(answers[position]) == 1:
            room.release()
        if len(answers) == count:
            done.set()

    await nc.subscribe(inbox + ".*", cb=on_answer)
    for i in range(count):
        await room.acquire()
        await nc.publish("ORDERS.new", b"m%d" % i, reply=f"{inbox}.{i}")
        if i == stepdown_at:
            answer = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.ORDERS", b"", timeout=20)
            assert b'"success":true' in answer.data, answer.data
    await asyncio.wait_for(done.wait(), 60)
    await nc.flush()
    state = (await js.stream_info("ORDERS")).state
    stored = {seq: (await js.get_msg("ORDERS", seq=seq)).data for seq in range(state.first_seq, state.last_seq + 1)}
    await nc.close()
    return {"answers": answers, "stored": stored, "messages": state.messages}


async def _cluster_run(tmp_path, on_leader: bool, stepdown_at: int | None = None) -> tuple[dict, list[int], int]:
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            batches = {"count": 0}
            for node in cluster.running():
                table = node.handlers.table
                serve = table[publish_batch.METHOD]

                async def counted(args, blobs, serve=serve):
                    batches["count"] += 1
                    return await serve(args, blobs)
                table[publish_batch.METHOD] = counted
                starter = node.rpc.starters[publish_batch.METHOD]

                def counted_start(*args, starter=starter):
                    batches["count"] += 1
                    return starter(*args)
                node.rpc.starters[publish_batch.METHOD] = counted_start

            async def scenario() -> dict[str, Any]:
                # The stream is created through n1; its leader is whichever node the meta leader placed.
                nc = await nats_connect(cluster.node("n1").url)
                await nc.jetstream().add_stream(name="ORDERS", subjects=["ORDERS.*"], num_replicas=3)
                await until(lambda: _stream_leader(cluster) is not None, "a stream leader")
                await nc.close()
                leader = trio.from_thread.run_sync(_stream_leader, cluster)
                target = leader if on_leader else next(n for n in cluster.names if n != leader)
                return await _publish_in_order(cluster.node(target).url, COUNT, stepdown_at)

            seen = await in_asyncio(scenario, timeout_s=120)
            await cluster.wait_until(lambda: not any(_in_flight(cluster)))
            in_flight = _in_flight(cluster)
    return seen, in_flight, batches["count"]


def _acks(seen: dict[str, Any]) -> list[dict[str, Any]]:
    answers = seen["answers"]
    assert sorted(answers) == list(range(COUNT)) and all(len(a) == 1 for a in answers.values()), \
        "every publish answered exactly once"
    return [answers[i][0] for i in range(COUNT)]


async def test_publishes_through_a_follower_are_stored_in_order_in_batches(tmp_path):
    seen, in_flight, batches = await _cluster_run(tmp_path, on_leader=False)
    assert _acks(seen) == [{"stream": "ORDERS", "seq": i + 1} for i in range(COUNT)]
    assert seen["stored"] == {i + 1: b"m%d" % i for i in range(COUNT)}
    assert in_flight == [0] * len(in_flight)
    assert 0 < batches < COUNT, "publishes through a follower travel in batches"


async def test_publishes_on_the_leader_are_stored_in_order(tmp_path):
    seen, in_flight, batches = await _cluster_run(tmp_path, on_leader=True)
    assert _acks(seen) == [{"stream": "ORDERS", "seq": i + 1} for i in range(COUNT)]
    assert seen["stored"] == {i + 1: b"m%d" % i for i in range(COUNT)}
    assert in_flight == [0] * len(in_flight)
    assert batches == 0, "on the leader a publish goes straight into the replica's queue"


async def test_a_leader_change_under_load_answers_each_publish_once_and_loses_no_ack(tmp_path):
    seen, in_flight, _ = await _cluster_run(tmp_path, on_leader=False, stepdown_at=COUNT // 3)
    acks, stored = _acks(seen), seen["stored"]
    acked = {i: ack["seq"] for i, ack in enumerate(acks) if "error" not in ack}
    errors = [ack for ack in acks if "error" in ack]
    # Publishes refused while leadership moved are carried to the new leader, not answered with errors.
    assert not errors, errors[:3]
    for i, seq in acked.items():
        assert stored.get(seq) == b"m%d" % i, (i, seq)
    payloads = list(stored.values())
    assert len(payloads) == len(set(payloads)) == COUNT, "each publish stored once"
    assert in_flight == [0] * len(in_flight)
