"""A JetStream API answer never overtakes the deliveries its stream leader made before answering, when the
client is connected to another node (issue #15).

Method: a real three-node `jsraft.testing.cluster.Cluster` (TCP, files) in the test's trio loop and real
nats-py connected to a node that does not lead the stream, so deliveries travel leader → client's node
over the route lane and the consumer info is carried to the leader over `$rpc`. nats-server keeps both
on one ordered route connection; nats-py's KV watcher (and object store get) rely on it: they end their
initial values when a consumer info asked after the subscribe says 0 pending.

Each test widens one overtaking window on the leader with a hook on that node's in-process objects, so
the old code fails every time rather than now and then:
  - the route lane: the leader's routes flush task hands nothing to the transport (`send_batches` made a
    no-op), so deliveries wait in the batch for the client's node; an `$rpc` answer must pull them out
    ahead of itself (routes invariant 7, rpc invariant 6). Before the fix the answer left alone.
  - the consumer pass: the leader's pass that decided the deliveries (its cursor moved) is held in its
    proposal for `HOLD_S` before it publishes them; the info must wait for that pass (consumer_service
    invariant 5). Before the fix it answered at once with 0 pending and nothing delivered.
Each test polls (`until`) for the leader to be inside the widened window before it asks, then checks
what the client held when the answer arrived: nats-py counts a subscription's messages as its reader
parses them, in socket order, before it resolves the answer. No sleep stands in for a condition.
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


async def _setup(cluster: Cluster, config: StreamConfig) -> tuple[Any, str, str]:
    """An R3 stream made; a nats-py connection to a node that does not lead it; (connection, leader, that node)."""
    admin = await nats_connect(cluster.node(cluster.names[0]).url)
    await admin.jetstream(timeout=10).add_stream(config)
    await admin.close()
    stream = config.name
    await until(lambda: stream_leader(cluster, stream) is not None, f"a leader for {stream}")
    leader = trio.from_thread.run_sync(stream_leader, cluster, stream)
    other = next(name for name in cluster.names if name != leader)
    return await nats_connect(cluster.node(other).url), leader, other


def _hold_route_batches(cluster: Cluster, leader: str) -> None:
    routes = cluster.node(leader).routes
    routes.send_batches = lambda: None  # the flush task sends nothing: batches wait for a full one or `$rpc`


def _release_route_batches(cluster: Cluster, leader: str) -> None:
    routes = cluster.node(leader).routes
    del routes.send_batches
    routes.send_batches()


async def test_an_info_answer_follows_deliveries_waiting_in_the_route_batch(tmp_path):
    async def scenario(cluster, url):
        nc, leader, other = await _setup(cluster, StreamConfig(name="O", subjects=["o.*"], num_replicas=3))
        js = nc.jetstream(timeout=10)
        for i in range(VALUES):
            await js.publish(f"o.{i}", b"v%d" % i)
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
        nc, leader, _ = await _setup(cluster, StreamConfig(name="Q", subjects=["q.*"], num_replicas=3))
        js = nc.jetstream(timeout=10)
        for i in range(VALUES):
            await js.publish(f"q.{i}", b"v%d" % i)
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


def _hold_proposals(service: Any, held: list[int]) -> None:
    """The leader's consumer passes wait `HOLD_S` in their proposal, after deciding, before publishing."""
    real = service.propose

    async def held_propose(ops: Any, on_settled: Any = None) -> Any:
        held.append(len(ops))
        await trio.sleep(HOLD_S)
        return await real(ops, on_settled)

    service.propose = held_propose


async def test_an_info_after_acks_through_another_node_counts_them(tmp_path):
    """The reverse direction: acks a client sent, then an info it asked, through a node that does not lead
    the stream. The windows held open: the ack lane on the client's node starts `HOLD_S` late (the info
    must be carried after it); on the leader, the pass that takes the acks starts `HOLD_S` after it is
    woken and waits `HOLD_S` in its proposal (the info must wait for that pass and its commit)."""
    async def scenario(cluster, url):
        nc, leader, other = await _setup(cluster, StreamConfig(name="A", subjects=["a.*"], num_replicas=3))
        js = nc.jetstream(timeout=10)
        for i in range(VALUES):
            await js.publish(f"a.{i}", b"v%d" % i)
        psub = await js.pull_subscribe("a.*", durable="D", stream="A")
        msgs = await psub.fetch(VALUES, timeout=5)
        hub = cluster.node(other).jsapi.consumer_hub
        service = cluster.node(leader).streams.replicas["A"].consumers
        held: list[int] = []

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
            _hold_proposals(service, held)

        trio.from_thread.run_sync(hold)
        for msg in msgs:
            await msg.ack()
        info = await js.consumer_info("A", "D")
        trio.from_thread.run_sync(lambda: [owner.__dict__.pop(name) for owner, name in
                                           ((hub, "_run_lane"), (service, "wake"), (service, "propose"))])
        await nc.close()
        return len(msgs), info.num_ack_pending, info.ack_floor.stream_seq, bool(held)

    fetched, ack_pending, ack_floor, held = await run_in_cluster(tmp_path, scenario)
    assert (fetched, ack_pending, ack_floor) == (VALUES, 0, VALUES)
    assert held  # the acks' pass did go through the held proposal


async def test_kv_watcher_through_another_node_sees_every_initial_value(tmp_path):
    """The symptom itself: nats-py's KV watcher, connected to a non-leader, with the route lane held as
    above until the watcher's info was answered; its end-of-initial-values marker comes after every
    value. (Not a guaranteed failure on the old code: there it fails only when the leader's pass ran
    before the info was read — usually.)"""
    async def scenario(cluster, url):
        # The bucket's stream made by hand, as in test_consumers_push (nats-py's `create_key_value` sends
        # `allow_msg_ttl`, which jsraft does not know yet).
        nc, leader, _ = await _setup(cluster, StreamConfig(
            name="KV_B", subjects=["$KV.B.>"], max_msgs_per_subject=5, allow_rollup_hdrs=True, deny_delete=True,
            allow_direct=True, discard="new", num_replicas=3))
        js = nc.jetstream(timeout=10)
        kv = await js.key_value("B")
        await kv.put("a", b"1")
        await kv.put("b", b"2")
        await kv.put("a", b"3")
        trio.from_thread.run_sync(_hold_route_batches, cluster, leader)
        watcher = await kv.watchall()  # its consumer info is answered before this returns
        # Released once the info was answered: deliveries the leader made after answering (when the info
        # said 2 pending) must not wait for an `$rpc` frame that may never come.
        trio.from_thread.run_sync(_release_route_batches, cluster, leader)
        seen = []
        while True:
            entry = await watcher.updates(timeout=5)
            if entry is None:  # the end of the initial values
                break
            seen.append((entry.key, entry.value))
        await kv.put("b", b"4")
        update = await watcher.updates(timeout=5)
        seen.append((update.key, update.value))
        await watcher.stop()
        await nc.close()
        return seen

    seen = await run_in_cluster(tmp_path, scenario)
    assert seen == [("b", b"2"), ("a", b"3"), ("b", b"4")]  # last per subject, then the live update
