"""Pull consumers through nats-py against a real three-node cluster: the ORDERS walkthrough (NEW and
DISPATCH pull consumers, the MONITOR push consumer), every ack kind, max_deliver, work-queue and interest
retention on every replica, and a stream-leader failover with unacked messages outstanding.

Method: a `jsraft.testing.cluster.Cluster` (real nodes, TCP, files) runs in the test's trio loop; each
scenario is nats-py code run under asyncio in a worker thread (`nats_kit.in_asyncio`), connected to a
node that does *not* lead the stream, so pull requests, acks and deliveries cross the cluster (hub →
`$rpc` → leader → route interest back). What nats-py returns (messages and their metadata,
`ConsumerInfo`) is what a nats-server user would see; the replicas' own consumer states and stores are
read through the harness (`Cluster.consumer_state`, `Cluster.replica_store`). Waits are polls with
deadlines; the timing tests leave margins of several hundred milliseconds around `ack_wait`.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats.errors
import nats.js.errors
import pytest
import trio
from nats.js.api import ConsumerConfig

from jsraft.errors import NoMessageFound
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect, until

TIMEOUT_S = 90
# Elections after 0.5 s of silence, not 0.2 s: on a loaded machine a needless leader change answers a
# waiting fetch with 409 (nats-py: a timeout) and would make the timing checks flaky.
ELECTION_TICKS = 25


def stream_leader(cluster: Cluster, stream: str) -> str | None:
    for node in cluster.running():
        replica = node.streams.replicas.get(stream)
        if replica is not None and replica.leader is not None and replica.consumers.active:
            return node.name
    return None


def live_seqs(store: Any) -> list[int]:
    state, found = store.state(), []
    for seq in range(max(state.first_seq, 1), state.last_seq + 1):
        try:
            found.append(store.load(seq).seq)
        except NoMessageFound:
            continue
    return found


async def follower_connection(cluster: Cluster, stream: str) -> tuple[Any, str]:
    """A nats-py connection to a node that does not lead `stream`, and the leader's name."""
    await until(lambda: stream_leader(cluster, stream) is not None, f"a leader for {stream}")
    leader = trio.from_thread.run_sync(stream_leader, cluster, stream)
    other = next(name for name in cluster.names if name != leader)
    return await nats_connect(cluster.node(other).url), leader


async def run_in_cluster(tmp_path, scenario, **options: Any) -> Any:
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=ELECTION_TICKS,
                                 node_options=options or None) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            first = cluster.names[0]
            return await in_asyncio(scenario, cluster, cluster.node(first).url, timeout_s=TIMEOUT_S)


def seqs(info: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    return ((info.delivered.consumer_seq, info.delivered.stream_seq),
            (info.ack_floor.consumer_seq, info.ack_floor.stream_seq))


# --- The ORDERS walkthrough ---------------------------------------------------------------------------


async def test_orders_walkthrough_new_and_dispatch_pull_consumers(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="ORDERS", subjects=["ORDERS.*"], num_replicas=3)
        nc, leader = await follower_connection(cluster, "ORDERS")
        js = nc.jetstream(timeout=10)
        seen: dict[str, Any] = {"leader": leader}
        for name, subject in (("NEW", "ORDERS.received"), ("DISPATCH", "ORDERS.processed")):
            await js.add_consumer("ORDERS", ConsumerConfig(durable_name=name, filter_subject=subject,
                                                           ack_policy="explicit", ack_wait=1.0))
        await js.publish("ORDERS.received", b"order 1")
        await js.publish("ORDERS.processed", b"order 1 processed")
        new = await js.pull_subscribe("ORDERS.received", "NEW", stream="ORDERS")
        first = (await new.fetch(1, timeout=5))[0]  # not acked
        seen["first"] = (first.subject, first.data, first.metadata)
        seen["unacked"] = await js.consumer_info("ORDERS", "NEW")
        started = time.monotonic()
        again = (await new.fetch(1, timeout=10))[0]  # redelivered once ack_wait passed
        seen["again"] = (again.data, again.metadata, time.monotonic() - started)
        seen["redelivered"] = await js.consumer_info("ORDERS", "NEW")
        await again.ack_sync()
        seen["acked"] = await js.consumer_info("ORDERS", "NEW")
        dispatch = await js.pull_subscribe_bind("DISPATCH", stream="ORDERS")
        processed = (await dispatch.fetch(1, timeout=5))[0]
        seen["dispatch"] = (processed.subject, processed.metadata.sequence)
        await processed.ack_sync()
        seen["dispatch_acked"] = await js.consumer_info("ORDERS", "DISPATCH")
        # MONITOR: push, ack none, deliver last — it starts at the newest order and follows new ones.
        monitor = await nc.subscribe("monitor.ORDERS")
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="MONITOR", deliver_subject="monitor.ORDERS",
                                                       ack_policy="none", deliver_policy="last"))
        seen["monitor_last"] = await monitor.next_msg(timeout=10)
        await js.publish("ORDERS.received", b"order 2")
        seen["monitor_new"] = await monitor.next_msg(timeout=10)
        seen["monitor"] = await js.consumer_info("ORDERS", "MONITOR")
        seen["list"] = sorted(info.name for info in await js.consumers_info("ORDERS"))
        seen["stream"] = (await js.stream_info("ORDERS")).state.consumer_count
        await until(lambda: len({str(cluster.consumer_state(n, "ORDERS", "NEW")) for n in cluster.names}) == 1,
                    "every replica's NEW state equal")
        seen["replicas"] = {n: trio.from_thread.run_sync(cluster.consumer_state, n, "ORDERS", "NEW").key()
                            for n in cluster.names}
        await nc.close()
        await admin.close()
        return seen

    seen = await run_in_cluster(tmp_path, scenario)
    subject, data, meta = seen["first"]
    assert (subject, data) == ("ORDERS.received", b"order 1")
    assert (meta.stream, meta.consumer, meta.num_delivered, meta.num_pending) == ("ORDERS", "NEW", 1, 0)
    assert (meta.sequence.stream, meta.sequence.consumer) == (1, 1)
    unacked = seen["unacked"]
    assert seqs(unacked) == ((1, 1), (0, 0))
    assert (unacked.num_ack_pending, unacked.num_redelivered, unacked.num_pending, unacked.num_waiting) == (1, 0, 0, 0)
    assert unacked.cluster.leader == seen["leader"] and len(unacked.cluster.replicas) == 2
    data, meta, waited = seen["again"]
    assert data == b"order 1" and meta.num_delivered == 2 and meta.sequence.consumer == 2
    assert waited > 0.3  # not before ack_wait (1 s from the first delivery)
    redelivered = seen["redelivered"]
    assert seqs(redelivered) == ((2, 1), (0, 0))
    assert (redelivered.num_ack_pending, redelivered.num_redelivered) == (1, 1)
    acked = seen["acked"]
    assert seqs(acked) == ((2, 1), (2, 1)) and (acked.num_ack_pending, acked.num_redelivered) == (0, 0)
    assert seen["dispatch"] == ("ORDERS.processed", seen["dispatch"][1])
    assert (seen["dispatch"][1].stream, seen["dispatch"][1].consumer) == (2, 1)
    assert seqs(seen["dispatch_acked"]) == ((1, 2), (1, 2))
    last, new = seen["monitor_last"], seen["monitor_new"]
    assert (last.subject, last.data, last.metadata.sequence.stream) == ("ORDERS.processed", b"order 1 processed", 2)
    assert (new.subject, new.data, new.metadata.sequence.stream) == ("ORDERS.received", b"order 2", 3)
    assert (new.metadata.consumer, new.metadata.sequence.consumer) == ("MONITOR", 2)
    monitor = seen["monitor"]
    assert monitor.config.deliver_subject == "monitor.ORDERS" and monitor.push_bound
    assert (monitor.num_ack_pending, monitor.num_pending, monitor.delivered.stream_seq) == (0, 0, 3)
    assert seen["list"] == ["DISPATCH", "MONITOR", "NEW"] and seen["stream"] == 3
    assert len(set(seen["replicas"].values())) == 1


# --- Ack kinds and max_deliver ------------------------------------------------------------------------


async def test_ack_kinds_and_max_deliver(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="TASKS", subjects=["tasks.*"], num_replicas=3)
        nc, _ = await follower_connection(cluster, "TASKS")
        js = nc.jetstream(timeout=10)
        seen: dict[str, Any] = {}
        subs = {}
        for name, ack_wait in (("nak", 2.0), ("delay", 2.0), ("term", 1.0), ("wpi", 2.0)):
            await js.add_consumer("TASKS", ConsumerConfig(durable_name=name.upper(), ack_wait=ack_wait,
                                                          filter_subject=f"tasks.{name}"))
            await js.publish(f"tasks.{name}", name.encode())
            subs[name] = await js.pull_subscribe_bind(name.upper(), stream="TASKS")

        await (await subs["nak"].fetch(1, timeout=5))[0].nak()  # redelivered at once, long before ack_wait
        started = time.monotonic()
        again = (await subs["nak"].fetch(1, timeout=5))[0]
        seen["nak"] = (again.data, again.metadata.num_delivered, time.monotonic() - started)
        await again.ack_sync()

        await (await subs["delay"].fetch(1, timeout=5))[0].nak(delay=0.8)
        with pytest.raises(nats.errors.TimeoutError):
            await subs["delay"].fetch(1, timeout=0.3)
        again = (await subs["delay"].fetch(1, timeout=5))[0]
        seen["nak_delay"] = (again.data, again.metadata.num_delivered)
        await again.ack_sync()

        await (await subs["term"].fetch(1, timeout=5))[0].term()
        with pytest.raises(nats.errors.TimeoutError):  # its 1 s ack wait passes: never redelivered
            await subs["term"].fetch(1, timeout=1.8)
        seen["term"] = await js.consumer_info("TASKS", "TERM")

        progressing = (await subs["wpi"].fetch(1, timeout=5))[0]
        started = time.monotonic()
        await asyncio.sleep(1.0)
        await progressing.in_progress()  # the 2 s ack wait starts again
        with pytest.raises(nats.errors.TimeoutError):  # no redelivery at 2 s
            await subs["wpi"].fetch(1, timeout=1.4)
        again = (await subs["wpi"].fetch(1, timeout=5))[0]
        seen["wpi"] = (again.data, again.metadata.num_delivered, time.monotonic() - started)
        await again.ack_sync()
        seen["after_acks"] = await js.consumer_info("TASKS", "WPI")

        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TASKS.M")
        await js.add_consumer("TASKS", ConsumerConfig(durable_name="M", ack_wait=0.5, max_deliver=2,
                                                      filter_subject="tasks.m"))
        await js.publish("tasks.m", b"poison")
        m = await js.pull_subscribe_bind("M", stream="TASKS")
        counts = [(await m.fetch(1, timeout=5))[0].metadata.num_delivered for _ in range(2)]
        with pytest.raises(nats.errors.TimeoutError):
            await m.fetch(1, timeout=1.5)  # a third delivery would come 0.5 s after the second
        seen["max_deliver"] = counts
        seen["advisory"] = json.loads((await advisories.next_msg(timeout=5)).data)
        seen["gave_up"] = await js.consumer_info("TASKS", "M")
        await nc.close()
        await admin.close()
        return seen

    seen = await run_in_cluster(tmp_path, scenario)
    data, delivered, waited = seen["nak"]
    assert data == b"nak" and delivered == 2 and waited < 1.5  # at once, not after the 2 s ack wait
    assert seen["nak_delay"] == (b"delay", 2)
    term = seen["term"]
    assert (term.num_ack_pending, term.num_redelivered, term.ack_floor.stream_seq) == (0, 0, 3)
    data, delivered, waited = seen["wpi"]
    assert (data, delivered) == (b"wpi", 2) and waited > 2.4  # the progress note pushed it past 2 s
    after = seen["after_acks"]
    assert (after.num_ack_pending, after.ack_floor.stream_seq, after.delivered.stream_seq) == (0, 4, 4)
    assert seen["max_deliver"] == [1, 2]
    advisory = seen["advisory"]
    assert advisory["type"] == "io.nats.jetstream.advisory.v1.max_deliver"
    assert (advisory["stream"], advisory["consumer"], advisory["stream_seq"], advisory["deliveries"]) == \
        ("TASKS", "M", 5, 2)
    assert seen["gave_up"].num_ack_pending == 0


async def test_a_stream_leader_stepdown_answers_waiting_pull_requests_409(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="L", subjects=["l.>"], num_replicas=3)
        nc, leader = await follower_connection(cluster, "L")
        js = nc.jetstream(timeout=10)
        await js.add_consumer("L", ConsumerConfig(durable_name="C"))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.L.C", b'{"batch": 1, "expires": 20000000000}', reply=inbox)
        await until(lambda: len(cluster.node(leader).streams.replicas["L"].consumers.leading["C"].queue) == 1,
                    "the request waiting at the leader")
        answer = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.L", b"", timeout=10)).data)
        status = await sub.next_msg(timeout=5)
        await until(lambda: stream_leader(cluster, "L") not in (None, leader), "a new stream leader")
        await js.publish("l.x", b"after")  # the consumer goes on under the new leader
        msgs = await (await js.pull_subscribe_bind("C", stream="L")).fetch(1, timeout=5)
        await nc.close()
        await admin.close()
        return answer, (status.headers or {}).get("Status"), (status.headers or {}).get("Description"), msgs[0].data

    answer, code, description, data = await run_in_cluster(tmp_path, scenario)
    assert answer.get("success") is True
    assert (code, description) == ("409", "Leadership Change")
    assert data == b"after"


# --- Retention ----------------------------------------------------------------------------------------


async def test_work_queue_removes_acked_messages_on_every_replica(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="WQ", subjects=["jobs.>"], retention="workqueue",
                                                     num_replicas=3)
        nc, _ = await follower_connection(cluster, "WQ")
        js = nc.jetstream(timeout=10)
        await js.add_consumer("WQ", ConsumerConfig(durable_name="W"))
        with pytest.raises(nats.js.errors.BadRequestError) as second:
            await js.add_consumer("WQ", ConsumerConfig(durable_name="W2"))  # a second unfiltered one
        for i in range(5):
            await js.publish(f"jobs.{i}", b"job")
        msgs = await (await js.pull_subscribe_bind("W", stream="WQ")).fetch(5, timeout=5)
        for msg in msgs:
            if msg.metadata.sequence.stream in (1, 2, 4):
                await msg.ack_sync()

        def stores() -> dict[str, list[int]]:
            return {n: live_seqs(cluster.replica_store(n, "WQ")) for n in cluster.names}

        await until(lambda: all(found == [3, 5] for found in stores().values()), "acked jobs removed everywhere")
        state = (await js.stream_info("WQ")).state
        await nc.close()
        await admin.close()
        return second.value.err_code, (state.messages, state.first_seq, state.last_seq)

    err_code, state = await run_in_cluster(tmp_path, scenario)
    assert err_code == 10099
    assert state == (2, 3, 5)


async def test_interest_stream_removes_a_message_once_every_consumer_acked_it(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="EV", subjects=["ev.>"], retention="interest",
                                                     num_replicas=3)
        nc, _ = await follower_connection(cluster, "EV")
        js = nc.jetstream(timeout=10)
        await js.publish("ev.lost", b"nobody listens")  # no consumer: not kept
        for name in ("A", "B"):
            await js.add_consumer("EV", ConsumerConfig(durable_name=name))
        for i in range(3):
            await js.publish("ev.x", b"e%d" % i)

        def everywhere(expected: list[int]) -> bool:
            return all(live_seqs(cluster.replica_store(n, "EV")) == expected for n in cluster.names)

        for msg in await (await js.pull_subscribe_bind("A", stream="EV")).fetch(3, timeout=5):
            await msg.ack_sync()
        await until(lambda: everywhere([2, 3, 4]), "B still needs all three")
        b = await js.pull_subscribe_bind("B", stream="EV")
        for msg in await b.fetch(2, timeout=5):
            await msg.ack_sync()
        await until(lambda: everywhere([4]), "seqs 2 and 3 acked by both")
        await js.delete_consumer("EV", "B")  # its interest goes with it
        await until(lambda: everywhere([]), "nothing left once B is gone")
        await nc.close()
        await admin.close()

    await run_in_cluster(tmp_path, scenario)


# --- Failover -----------------------------------------------------------------------------------------


async def redeliveries_after_kill(cluster: Cluster, leader: str, receive: Any, want: int) -> dict[int, int]:
    """Kill the stream leader `leader`, then ack what `await receive(timeout_s)` (a list of messages) hands
    out until `want` distinct messages came back or 30 s passed: stream seq -> its delivery count. Used by
    the pull and the push failover tests (test_consumers_push.py)."""
    trio.from_thread.run(cluster.kill, leader)
    redelivered: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(redelivered) < want and time.monotonic() < deadline:
        try:
            msgs = await receive(3)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            continue
        for msg in msgs:
            redelivered[msg.metadata.sequence.stream] = msg.metadata.num_delivered
            try:
                await msg.ack_sync()
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                pass  # answered by a leader that is gone: the message comes again
    return redelivered


async def test_failover_redelivers_every_unacked_message_and_keeps_committed_acks(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="F", subjects=["f.>"], num_replicas=3)
        nc, leader = await follower_connection(cluster, "F")
        js = nc.jetstream(timeout=15)
        await js.add_consumer("F", ConsumerConfig(durable_name="D", ack_wait=1.0))
        for i in range(1, 11):
            await js.publish(f"f.{i}", b"m%d" % i)
        sub = await js.pull_subscribe_bind("D", stream="F")
        first = await sub.fetch(10, timeout=5)
        for msg in first[:4]:
            await msg.ack_sync()  # committed before the leader dies
        await admin.close()
        redelivered = await redeliveries_after_kill(cluster, leader, lambda t: sub.fetch(10, timeout=t), 6)
        info = await js.consumer_info("F", "D")
        trio.from_thread.run(cluster.restart, leader)

        def agreed() -> bool:
            states = [cluster.consumer_state(n, "F", "D") for n in cluster.names]
            return all(s is not None and s.key() == states[0].key() and s.ack_floor_stream_seq == 10
                       for s in states)

        await until(agreed, "every replica at ack floor 10, equal", timeout_s=30)
        floors = {n: trio.from_thread.run_sync(cluster.consumer_state, n, "F", "D").key() for n in cluster.names}
        await nc.close()
        return [m.metadata.sequence.stream for m in first], redelivered, info, floors

    first, redelivered, info, floors = await run_in_cluster(tmp_path, scenario, stream_snapshot_every_entries=8)
    assert first == list(range(1, 11))
    assert sorted(redelivered) == list(range(5, 11))  # every unacked message; no acked one came back
    assert all(count >= 2 for count in redelivered.values())
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.delivered.stream_seq) == (10, 0, 10)
    assert len(set(floors.values())) == 1
