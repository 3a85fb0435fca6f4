"""A JetStream API answer never overtakes the deliveries its stream leader made before answering, nor
misses the acks its client sent before asking, when the client talks to another node (issue #15).

Method: a real three-node `jsraft.testing.cluster.Cluster` (TCP, files) in the test's trio loop and real
nats-py connected to a node that does not lead the stream, so deliveries travel leader → client's node
over the route lane and the consumer info is carried to the leader over `$rpc`. nats-server keeps both
on one ordered route connection; nats-py's KV watcher (and object store get) rely on it: they end their
initial values when a consumer info asked after the subscribe says 0 pending.

The tests widen the overtaking windows with hooks on the nodes' in-process objects, so the
old code fails every time rather than now and then (checked on 2026-11-27 against main at a8ff475):
  - the route lane: the leader's routes flush task hands nothing to the transport (`send_batches` made a
    no-op), so deliveries wait in the batch for the client's node; an `$rpc` answer must pull them out
    ahead of itself (routes invariant 7, rpc invariant 6). Before the fix the answer left alone.
  - the consumer pass: the leader's pass that decided the deliveries (its cursor moved) is held in its
    proposal for `HOLD_S` before it publishes them; the info must wait for that pass (consumer_service
    invariant 5). Before the fix it answered at once with 0 pending and nothing delivered.
  - the acks: the ack lane on the client's node starts late, and so does the leader's pass that takes
    the acks; the info must be carried after the acks (consumer_hub invariant 5) and wait for that pass
    (consumer_service invariant 5). Before the fix it counted them pending.
The KV watcher itself runs through a follower in test_consumers_push. Where a test needs the leader in
a window before it asks, it polls for that (`until`); then it checks what the client held when the
answer came: nats-py counts a subscription's messages as its reader parses them, in socket order,
before it resolves the answer. The hooks' `HOLD_S` pauses widen windows; no sleep stands in for a condition.
"""

from __future__ import annotations

from typing import Any

import trio
from nats.js.api import ConsumerConfig, StreamConfig

from jsraft.testing.cluster import Cluster
from nats_kit import nats_connect, until
from test_consumers_nats import run_in_cluster, stream_leader

# How long the consumer pass is held between deciding and publishing: well under the info barrier's
# bound (`consumer_service.BARRIER_TIMEOUT_S`, 2 s), so the fixed info waits for the pass and not out.
HOLD_S = 0.5
VALUES = 3


async def _stream_of_values(cluster: Cluster, name: str) -> tuple[Any, Any, str, str]:
    """An R3 stream `name` on `<name>.*` holding `VALUES` messages, published through a nats-py connection to
    a node that does not lead it: (that connection, its JetStream context, the leader, that node)."""
    admin = await nats_connect(cluster.node(cluster.names[0]).url)
    prefix = name.lower()
    await admin.jetstream(timeout=10).add_stream(StreamConfig(name=name, subjects=[f"{prefix}.*"], num_replicas=3))
    await admin.close()
    await until(lambda: stream_leader(cluster, name) is not None, f"a leader for {name}")
    leader = trio.from_thread.run_sync(stream_leader, cluster, name)
    other = next(node for node in cluster.names if node != leader)
    nc = await nats_connect(cluster.node(other).url)
    js = nc.jetstream(timeout=10)
    for i in range(VALUES):
        await js.publish(f"{prefix}.{i}", b"v%d" % i)
    return nc, js, leader, other


def _hold_route_batches(cluster: Cluster, leader: str) -> None:
    routes = cluster.node(leader).routes
    routes.send_batches = lambda: None  # the flush task sends nothing: batches wait for a full one or `$rpc`


def _release_route_batches(cluster: Cluster, leader: str) -> None:
    routes = cluster.node(leader).routes
    del routes.send_batches
    routes.send_batches()


def _hold_proposals(service: Any, held: list[int]) -> None:
    """The leader's consumer passes wait `HOLD_S` in their proposal, after deciding, before publishing."""
    real = service.propose

    async def held_propose(ops: Any, on_settled: Any = None) -> Any:
        held.append(len(ops))
        await trio.sleep(HOLD_S)
        return await real(ops, on_settled)

    service.propose = held_propose


async def test_an_info_answer_follows_deliveries_waiting_in_the_route_batch(tmp_path):
    async def scenario(cluster, url):
        nc, js, leader, other = await _stream_of_values(cluster, "O")
        # No subscriber yet: the push consumer delivers nothing until one appears.
        await js.add_consumer("O", ConsumerConfig(durable_name="W", deliver_subject="dlv.w", ack_policy="none"))
        trio.from_thread.run_sync(_hold_route_batches, cluster, leader)
        sub = await nc.subscribe("dlv.w")
        routes = cluster.node(leader).routes
        await until(lambda: routes.waiting(other) >= VALUES, "the leader's deliveries waiting for the client's node")
        info = await js.consumer_info("O", "W")
        held_at_answer = sub.delivered
        trio.from_thread.run_sync(_release_route_batches, cluster, leader)
        got = [(await sub.next_msg(timeout=5)).subject for _ in range(VALUES - held_at_answer)]
        await nc.close()
        return info.num_pending, held_at_answer, got

    num_pending, held_at_answer, got = await run_in_cluster(tmp_path, scenario)
    assert num_pending == 0  # the leader had delivered everything when it answered
    assert held_at_answer == VALUES  # ...and the client had every delivery before the answer
    assert got == []


async def test_an_info_answer_waits_for_the_pass_that_moved_the_cursor(tmp_path):
    async def scenario(cluster, url):
        nc, js, leader, _ = await _stream_of_values(cluster, "Q")
        await js.add_consumer("Q", ConsumerConfig(durable_name="W", deliver_subject="dlv.q", ack_policy="none"))
        service = cluster.node(leader).streams.replicas["Q"].consumers
        held: list[int] = []  # a pass decided its deliveries: the cursor is past them, none sent
        trio.from_thread.run_sync(_hold_proposals, service, held)
        sub = await nc.subscribe("dlv.q")
        await until(lambda: bool(held), "the leader's pass held between deciding and publishing")
        info = await js.consumer_info("Q", "W")
        held_at_answer = sub.delivered
        trio.from_thread.run_sync(lambda: service.__dict__.pop("propose"))
        await nc.close()
        return info.num_pending, held_at_answer

    num_pending, held_at_answer = await run_in_cluster(tmp_path, scenario)
    assert (num_pending, held_at_answer) == (0, VALUES)


async def test_an_info_after_acks_through_another_node_counts_them(tmp_path):
    """The reverse direction: acks a client sent, then an info it asked, through a node that does not lead
    the stream. The windows held open: the ack lane on the client's node starts `HOLD_S` late (the info
    must be carried after it); on the leader, the pass that takes the acks starts `HOLD_S` after it is
    woken (the info must wait for that pass and its commit; a pass already running is the test above)."""
    async def scenario(cluster, url):
        nc, js, leader, other = await _stream_of_values(cluster, "A")
        psub = await js.pull_subscribe("a.*", durable="D", stream="A")
        msgs = await psub.fetch(VALUES, timeout=5)
        hub = cluster.node(other).jsapi.consumer_hub
        service = cluster.node(leader).streams.replicas["A"].consumers

        def hold() -> None:
            real_lane = hub._run_lane

            async def late_lane(*args: Any) -> None:
                await trio.sleep(HOLD_S)
                await real_lane(*args)

            hub._run_lane = late_lane
            real_wake, leader_port = service.wake, cluster.node(leader).clients

            async def wake_later() -> None:
                await trio.sleep(HOLD_S)
                real_wake()

            service.wake = lambda: leader_port.start_soon(wake_later)

        trio.from_thread.run_sync(hold)
        for msg in msgs:
            await msg.ack()
        info = await js.consumer_info("A", "D")
        trio.from_thread.run_sync(lambda: [owner.__dict__.pop(name) for owner, name in
                                           ((hub, "_run_lane"), (service, "wake"))])
        await nc.close()
        return len(msgs), info.num_ack_pending, info.ack_floor.stream_seq

    assert await run_in_cluster(tmp_path, scenario) == (VALUES, 0, VALUES)  # fetched, none pending, floor
