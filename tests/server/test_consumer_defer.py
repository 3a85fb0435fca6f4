"""An ack-none consumer's DELIVERED ops wait for the next proposal (`ConsumerService` invariant 8).

Method: `ConsumerProposals` (the mixin the consumer service proposes through) on a stand-in replica whose
`_submit` records each CONSUMER entry it is given, decoded back to its ops; consumers are stand-ins with a
config of the ack policy under test. Time is passed in (`now_ns`), so the window is checked exactly. The
rules: DELIVERED ops of an ack-none consumer are held while the oldest is younger than
`DEFER_DELIVERED_NS`, one op per consumer (its latest record, delivery rule 8); anything else proposed — another op in the same pass, or a proposal made outside a
pass (consumer create/delete through `propose`) — takes them first, in the order they were decided; the
oldest becoming due, or a reader's barrier (`settled`, the flag), proposes them alone; an explicit-ack
consumer's DELIVERED op is never held (an ack of it must follow it in the log). The end-to-end effect (one
CONSUMER entry per window instead of one per publish, and a consumer info that still counts every delivery)
is `test_an_ordered_consumer_makes_one_consumer_entry_per_window_and_its_info_counts_all` below, on a real
node through nats-py. What a failover does to deliveries whose ops were still held — the new leader delivers
them again, and nats-py's ordered consumer, seeing a sequence it already had, recreates itself from its
last one — is `test_an_ordered_consumer_gets_every_message_once_across_a_leader_kill`: three nodes, the
stream leader killed right after the deliveries (inside the window), every message once, in order.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import trio

from jsraft.consumer import AckOp, DeleteOp, DeliveredOp, decode_ops
from jsraft.jsapi.consumer_config import AckPolicy
from jsraft.server.groups.consumer_proposals import DEFER_DELIVERED_NS, ConsumerProposals
from jsraft.stream.entries import decode_entry


@attrs.define
class _Config:
    ack_policy: AckPolicy


@attrs.define
class _Entry:
    config: _Config


@attrs.define
class _Leading:
    entry: _Entry


class _Replica:
    def __init__(self) -> None:
        self._propose_lock = trio.Lock()
        self.entries: list[list[Any]] = []
        self.leader = object()

    def leader_id(self) -> str:
        return "n1"

    async def _submit(self, entry: bytes, on_settled: Any = None) -> object:
        self.entries.append(decode_ops(bytes(decode_entry(entry).body)))
        return object()


class _Service(ConsumerProposals):
    def __init__(self) -> None:
        self.replica = _Replica()  # type: ignore[assignment]
        self.stream = "S"
        self.active = True
        self.leading = {"none": _Leading(_Entry(_Config(AckPolicy.none))),
                        "explicit": _Leading(_Entry(_Config(AckPolicy.explicit)))}
        self._deferred, self._deferred_since_ns, self._flush_deferred = [], 0, False
        self._last = None

    async def pass_(self, ops: list[Any], now_ns: int) -> None:
        """What the service's pass does with its ops (`_turn` → `_propose_and_send`)."""
        await self._propose_and_send(self._defer(ops, now_ns), [], [])

    def _publish_many(self, sends: list[Any], publish: Any = None, now: bool = False) -> None:
        pass


def _delivered(name: str, seq: int) -> DeliveredOp:
    return DeliveredOp(name=name, records=((seq, seq, 1, 0),))


async def test_an_ack_none_consumers_delivered_ops_wait_for_the_window_then_go_alone():
    service = _Service()
    start = 1_000_000_000
    for seq in range(1, 4):
        await service.pass_([_delivered("none", seq)], start + seq)
    assert service.replica.entries == [] and service.deferred_due_ns() == start + 1 + DEFER_DELIVERED_NS
    await service.pass_([], start + DEFER_DELIVERED_NS)  # one ns before the oldest is due: still held
    assert service.replica.entries == []
    await service.pass_([], start + 1 + DEFER_DELIVERED_NS)  # due: proposed alone, one op per consumer
    assert service.replica.entries == [[_delivered("none", 3)]]  # its latest record (delivery rule 8)
    assert service.deferred_due_ns() is None


async def test_any_other_op_takes_the_held_ones_first():
    service = _Service()
    await service.pass_([_delivered("none", 1)], 10)
    await service.pass_([_delivered("none", 2), AckOp(name="explicit", seqs=(5,))], 20)
    assert service.replica.entries == [[_delivered("none", 1), _delivered("none", 2), AckOp(name="explicit", seqs=(5,))]]
    await service.pass_([_delivered("explicit", 3)], 30)  # an explicit-ack consumer's: never held
    assert service.replica.entries[-1] == [_delivered("explicit", 3)]


async def test_a_proposal_outside_a_pass_takes_them_first():
    service = _Service()
    await service.pass_([_delivered("none", 1)], 10)
    await service.propose([DeleteOp(name="none")])  # a consumer delete through the admin path
    assert service.replica.entries == [[_delivered("none", 1), DeleteOp(name="none")]]


async def test_a_reader_waiting_has_them_proposed_at_the_next_pass():
    service = _Service()
    await service.pass_([_delivered("none", 1)], 10)
    service._flush_deferred = True  # what `settled()` sets when ops are held
    await service.pass_([], 11)
    assert service.replica.entries == [[_delivered("none", 1)]] and not service._flush_deferred


# --- End to end, nats-py against a real node -------------------------------------------------------------


async def test_an_ordered_consumer_makes_one_consumer_entry_per_window_and_its_info_counts_all(tmp_path):
    from nats_kit import in_asyncio, nats_connect

    from jsraft.testing.cluster import Cluster

    counted: list[list[Any]] = []
    original = ConsumerProposals.propose

    async def counting(self: Any, ops: list[Any], on_settled: Any = None) -> Any:
        counted.append(list(self._deferred) + list(ops))
        return await original(self, ops, on_settled)

    async def scenario(cluster: Any, url: str) -> Any:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="W", subjects=["w.*"])
        sub = await js.subscribe("w.k", ordered_consumer=True)
        began = time.monotonic()
        for i in range(40):  # a put, then its watch delivery, one after the other (a KV put + watch)
            await js.publish("w.k", b"%d" % i)
            await sub.next_msg(timeout=10)
        elapsed = time.monotonic() - began
        info = await sub.consumer_info()  # the barrier: the held ops go into the log before it answers
        await nc.close()
        return elapsed, info.delivered.stream_seq, info.num_pending

    ConsumerProposals.propose = counting  # type: ignore[method-assign]
    try:
        async with trio.open_nursery() as nursery:
            async with Cluster.start(nursery, 1, tmp_path, tick_ms=20) as cluster:
                await cluster.wait_for_meta_leader()
                await cluster.wait_ready()
                elapsed, delivered, pending = await in_asyncio(scenario, cluster, cluster.node(cluster.names[0]).url,
                                                               timeout_s=60)
    finally:
        ConsumerProposals.propose = original  # type: ignore[method-assign]
    delivered_entries = [ops for ops in counted if any(type(op) is DeliveredOp for op in ops)]
    windows = elapsed / (DEFER_DELIVERED_NS / 1e9)
    # At most one per window (and the barrier's), however slow the machine: not one per publish.
    assert len(delivered_entries) <= windows + 2, (len(delivered_entries), elapsed)
    last = [op.records[-1] for ops in delivered_entries for op in ops if type(op) is DeliveredOp][-1]
    assert last[:2] == (40, 40)  # the cursor the last one sets: stream seq 40, consumer seq 40
    assert (delivered, pending) == (40, 0)


async def test_an_ordered_consumer_gets_every_message_once_across_a_leader_kill(tmp_path):
    import asyncio

    import nats.errors
    import nats.js.errors
    from nats_kit import nats_connect
    from test_consumers_nats import follower_connection, run_in_cluster, stream_leader

    UNAVAILABLE = (nats.errors.TimeoutError, nats.errors.NoRespondersError, asyncio.TimeoutError,
                   nats.js.errors.ServiceUnavailableError)

    async def scenario(cluster: Any, url: str) -> Any:
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="O", subjects=["o.*"], num_replicas=3)
        await admin.close()
        nc, leader = await follower_connection(cluster, "O")
        js = nc.jetstream(timeout=15)
        sub = await js.subscribe("o.x", ordered_consumer=True, idle_heartbeat=0.3)
        for i in range(1, 11):
            await js.publish("o.x", b"%d" % i)
        got = [await sub.next_msg(timeout=10) for _ in range(10)]
        trio.from_thread.run(cluster.kill, leader)  # within the window: the DELIVERED ops may be held
        for i in range(11, 21):
            # While the group elects a publish may go unanswered: sent again with its message id, which
            # the stream's duplicate window keeps from being stored twice.
            deadline = time.monotonic() + 30
            while True:
                try:
                    await js.publish("o.x", b"%d" % i, headers={"Nats-Msg-Id": f"m{i}"})
                    break
                except UNAVAILABLE:
                    assert time.monotonic() < deadline, f"publish {i} never answered"
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            try:
                got.append(await sub.next_msg(timeout=1))
            except nats.errors.TimeoutError:  # while nats-py's ordered consumer recreates itself
                continue
        now_leading = trio.from_thread.run_sync(stream_leader, cluster, "O")
        await nc.close()
        return [m.data for m in got], [m.metadata.sequence.stream for m in got], (leader, now_leading)

    data, seqs, (before, after) = await run_in_cluster(tmp_path, scenario)
    assert after not in (None, before)  # the messages after the kill came through a new leader
    assert data == [b"%d" % i for i in range(1, 21)]  # every message once, in order, across the reset
    assert seqs == list(range(1, 21))
