"""The consumer acceptance matrix of issue #6 through nats-py: every deliver policy, ack policy, ack type,
`max_deliver`, `backoff`, `max_ack_pending`, pull status and retention policy, and a work-queue failover.

Method: one node from `jsraft.open_node` (client port 0) for the semantics, a three-node
`jsraft.testing.cluster.Cluster` (real nodes, TCP, files) for the failover; each scenario is nats-py code
under asyncio in a worker thread (`nats_kit.in_asyncio`). What nats-py returns (messages, their
metadata, `ConsumerInfo`, status headers on a raw pull request's inbox) is what a nats-server user would
see; replicas' consumer states and stores are read through the harness. Waits are polls with deadlines
or nats-py's own fetch timeouts; timing checks leave margins of several hundred milliseconds.

Where each item of the acceptance list is covered (NATS = test_consumers_nats.py, API =
test_consumers_api.py, PAUSE = test_consumers_pause.py, here = this file):

    item                               test
    deliver all / last / new /         here: test_every_deliver_policy
      by_start_sequence / by_start_time / last_per_subject
    ack policy none / all              here: test_ack_policies_none_and_all
    ack policy explicit                NATS: test_orders_walkthrough_..., here: test_ack_policies_...
    +ACK                               NATS: test_ack_kinds_and_max_deliver (ack_sync everywhere)
    empty ack body                     here: test_ack_types_empty_next_and_term_with_reason
    -NAK / -NAK with delay             NATS: test_ack_kinds_and_max_deliver; PAUSE: ..._nak_term_...
    +WPI                               NATS: test_ack_kinds_and_max_deliver
    +NXT with a batch                  here: test_ack_types_empty_next_and_term_with_reason
    +TERM / +TERM with reason          NATS: test_ack_kinds_and_max_deliver; here: (reason, advisory)
    max_deliver (+ advisory)           NATS: test_ack_kinds_and_max_deliver
    backoff                            here: test_backoff_spaces_redeliveries
    max_ack_pending                    here: test_max_ack_pending_holds_new_deliveries
    404 No Messages                    API: test_pull_request_statuses
    408 with pending headers           API: test_pull_request_statuses (msgs); here: msgs and bytes
    409 MaxRequestBatch                API: test_pull_request_statuses
    409 Leadership Change              NATS: test_a_stream_leader_stepdown_answers_..._409
    409 Consumer Deleted / MaxWaiting / here: test_pull_409_variants
      MaxRequestExpires / MaxRequestMaxBytes / Message Size Exceeds MaxBytes
    100 Idle Heartbeat                 API: test_pull_request_statuses
    retention limits                   here: test_limits_retention_acks_never_touch_the_stream
    retention interest                 NATS: test_interest_stream_removes_a_message_once_...
    retention workqueue                NATS: test_work_queue_removes_acked_messages_on_every_replica
    workqueue overlapping filters      NATS (unfiltered, 10099); here: test_work_queue_refuses_... (10100)
    work-queue failover                here: test_work_queue_failover_loses_nothing_and_never_redelivers_...
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from typing import Any

import nats.errors
import nats.js.errors
import pytest
import trio
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

import jsraft
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect, single, until
from test_consumers_nats import live_seqs, stream_leader

API = "$JS.API"


async def on_node(tmp_path, scenario) -> Any:
    async with jsraft.open_node(single(tmp_path)) as node:
        return await in_asyncio(scenario, node.url, timeout_s=60)


async def raw(nc: Any, subject: str, body: Any = b"") -> dict[str, Any]:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, payload, timeout=10)).data)


async def drain(sub: Any, batch: int = 20) -> list[Any]:
    """Everything the consumer has now (nats-py's fetch ends at the stream's end with a 404). A fetch that
    gets nothing in time raises `nats.errors.TimeoutError` from its wait, or the plain `asyncio.TimeoutError`
    (its base class) when its first answer came back with the deadline spent (nats-py 2.16 `_fetch_n`):
    both mean "nothing now"."""
    try:
        return await sub.fetch(batch, timeout=3)
    except asyncio.TimeoutError:
        return []


def stream_seqs(msgs: list[Any]) -> list[int]:
    return [msg.metadata.sequence.stream for msg in msgs]


class Inbox:
    """A raw pull requester: requests published with this inbox as the reply subject."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.subject = nc.new_inbox()
        self.sub: Any = None

    async def start(self) -> "Inbox":
        self.sub = await self.nc.subscribe(self.subject)
        await self.nc.flush()
        return self

    async def request(self, stream: str, consumer: str, body: dict[str, Any]) -> None:
        await self.nc.publish(f"{API}.CONSUMER.MSG.NEXT.{stream}.{consumer}", json.dumps(body).encode(),
                              reply=self.subject)

    async def next(self, timeout_s: float = 5.0) -> Any:
        return await self.sub.next_msg(timeout=timeout_s)

    async def status(self, timeout_s: float = 5.0) -> tuple[str | None, str | None, dict[str, str]]:
        msg = await self.next(timeout_s)
        headers = msg.headers or {}
        return headers.get("Status"), headers.get("Description"), headers


# --- Deliver policies -----------------------------------------------------------------------------------


async def test_every_deliver_policy(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        await js.publish("s.a", b"1")
        between = datetime.datetime.now(datetime.timezone.utc)
        await asyncio.sleep(0.01)  # the next message's stored time is strictly after `between`
        await js.publish("s.b", b"2")
        await js.publish("s.a", b"3")
        configs = {
            "ALL": ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
            "LAST": ConsumerConfig(deliver_policy=DeliverPolicy.LAST),
            "NEW": ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
            "SEQ": ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=2),
            "TIME": ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=between),
            "LPS": ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subject="s.>"),
        }
        subs = {}
        for name, config in configs.items():
            config.durable_name = name
            await js.add_consumer("S", config)
            subs[name] = await js.pull_subscribe_bind(name, stream="S")
        await js.publish("s.c", b"4")  # after every consumer was created
        seen = {}
        for name, sub in subs.items():
            msgs = await drain(sub)
            for msg in msgs:
                await msg.ack_sync()
            seen[name] = stream_seqs(msgs)
        infos = {name: (await js.consumer_info("S", name)).config.deliver_policy for name in configs}
        await nc.close()
        return seen, infos

    seen, infos = await on_node(tmp_path, scenario)
    assert seen == {"ALL": [1, 2, 3, 4], "LAST": [3, 4], "NEW": [4], "SEQ": [2, 3, 4], "TIME": [2, 3, 4],
                    "LPS": [2, 3, 4]}
    assert infos["LPS"] == DeliverPolicy.LAST_PER_SUBJECT and infos["TIME"] == DeliverPolicy.BY_START_TIME


# --- Ack policies and ack types -------------------------------------------------------------------------


async def test_ack_policies_none_and_all(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(1, 6):
            await js.publish("s.x", b"%d" % i)
        seen = {}
        for name, policy in (("NONE", AckPolicy.NONE), ("ALL", AckPolicy.ALL), ("EXPLICIT", AckPolicy.EXPLICIT)):
            await js.add_consumer("S", ConsumerConfig(durable_name=name, ack_policy=policy, ack_wait=1.0))
            sub = await js.pull_subscribe_bind(name, stream="S")
            msgs = await sub.fetch(5, timeout=5)
            if policy is not AckPolicy.NONE:
                await msgs[2].ack_sync()  # the third of five
            info = await js.consumer_info("S", name)
            seen[name] = (stream_seqs(msgs), info.num_ack_pending, info.ack_floor.stream_seq,
                          info.delivered.stream_seq)
            # Nothing acked comes back after ack_wait; unacked ones do (explicit: 1, 2, 4, 5; all: 4, 5).
            again = [m for m in await drain(sub) if m.metadata.num_delivered > 1] if policy is AckPolicy.NONE else []
            if policy is not AckPolicy.NONE:
                deadline = time.monotonic() + 10
                wanted = 4 if policy is AckPolicy.EXPLICIT else 2
                while time.monotonic() < deadline and len(set(stream_seqs(again))) < wanted:
                    again += await drain(sub)
            seen[name + "_again"] = sorted(set(stream_seqs(again)))
        await nc.close()
        return seen

    seen = await on_node(tmp_path, scenario)
    assert seen["NONE"] == ([1, 2, 3, 4, 5], 0, 5, 5)  # nothing pending: the floor is delivered
    assert seen["NONE_again"] == []
    assert seen["ALL"] == ([1, 2, 3, 4, 5], 2, 3, 5)  # acking 3 acked 1 and 2 too
    assert seen["ALL_again"] == [4, 5]
    assert seen["EXPLICIT"] == ([1, 2, 3, 4, 5], 4, 0, 5)  # only 3 acked: the floor stays below 1
    assert seen["EXPLICIT_again"] == [1, 2, 4, 5]


async def test_ack_types_empty_next_and_term_with_reason(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        events = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.C")
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(1, 7):
            await js.publish("s.x", b"%d" % i)
        await js.add_consumer("S", ConsumerConfig(durable_name="C", ack_wait=1.0))
        sub = await js.pull_subscribe_bind("C", stream="S")
        (first,) = await sub.fetch(1, timeout=5)
        # An empty body is an ack (nats-server `processAck`); as a double ack it is confirmed too.
        confirmed = await nc.request(first.reply, b"", timeout=5)
        (second,) = await sub.fetch(1, timeout=5)
        # +NXT acks and asks for the next messages, delivered to the ack's reply subject.
        nxt = Inbox(nc)
        await nxt.start()
        await nc.publish(second.reply, b'+NXT {"batch": 2}', reply=nxt.subject)
        following = [await nxt.next(), await nxt.next()]
        await nc.publish(following[0].reply, b"+TERM not for us")
        await following[1].ack_sync()
        advisory = json.loads((await events.next_msg(timeout=5)).data)
        info = await js.consumer_info("S", "C")
        rest = await drain(sub)
        for msg in rest:
            await msg.ack_sync()
        try:  # longer than ack_wait: nothing acked (empty body, +NXT) or terminated comes back
            late = await sub.fetch(1, timeout=2.0)
        except nats.errors.TimeoutError:
            late = []
        await nc.close()
        return confirmed.data, [m.data for m in following], advisory, info, stream_seqs(rest), stream_seqs(late)

    confirmed, following, advisory, info, rest, late = await on_node(tmp_path, scenario)
    assert confirmed == b""
    assert following == [b"3", b"4"]
    assert advisory["type"] == "io.nats.jetstream.advisory.v1.terminated"
    assert (advisory["stream_seq"], advisory["reason"]) == (3, "not for us")
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.delivered.stream_seq) == (4, 0, 4)
    assert rest == [5, 6] and late == []


# --- backoff and max_ack_pending --------------------------------------------------------------------------


async def test_backoff_spaces_redeliveries(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        await js.publish("s.x", b"slow")
        await js.add_consumer("S", ConsumerConfig(durable_name="B", backoff=[0.4, 1.6], max_deliver=4))
        sub = await js.pull_subscribe_bind("B", stream="S")
        times, counts = [], []
        while len(times) < 3:
            try:
                (msg,) = await sub.fetch(1, timeout=4)
            except nats.errors.TimeoutError:
                break
            times.append(time.monotonic())
            counts.append(msg.metadata.num_delivered)
        config = (await js.consumer_info("S", "B")).config
        await nc.close()
        return counts, [b - a for a, b in zip(times, times[1:])], config.backoff

    counts, gaps, backoff = await on_node(tmp_path, scenario)
    assert counts == [1, 2, 3]
    assert backoff == [0.4, 1.6]
    assert 0.3 < gaps[0] < 1.2  # the first backoff, not ack_wait (30 s)
    assert 1.4 < gaps[1] < 3.0  # the second


async def test_max_ack_pending_holds_new_deliveries(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(1, 6):
            await js.publish("s.x", b"%d" % i)
        await js.add_consumer("S", ConsumerConfig(durable_name="P", max_ack_pending=2))
        sub = await js.pull_subscribe_bind("P", stream="S")
        first = await drain(sub, 5)
        held = await drain(sub, 5)  # two pending: nothing more
        await first[0].ack_sync()
        after_one_ack = await drain(sub, 5)
        info = await js.consumer_info("S", "P")
        await nc.close()
        return stream_seqs(first), stream_seqs(held), stream_seqs(after_one_ack), info

    first, held, after_one_ack, info = await on_node(tmp_path, scenario)
    assert first == [1, 2] and held == [] and after_one_ack == [3]
    assert (info.num_ack_pending, info.num_pending, info.config.max_ack_pending) == (2, 2, 2)


# --- Pull statuses --------------------------------------------------------------------------------------


async def test_pull_409_variants(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        await raw(nc, f"{API}.CONSUMER.DURABLE.CREATE.S.C", {"stream_name": "S", "config": {
            "durable_name": "C", "ack_policy": "explicit", "max_waiting": 1, "max_expires": 2_000_000_000,
            "max_bytes": 1000}})
        seen = {}
        first, second = await Inbox(nc).start(), await Inbox(nc).start()
        await first.request("S", "C", {"batch": 3, "expires": 300_000_000, "max_bytes": 500})
        await second.request("S", "C", {"batch": 1, "expires": 1_000_000_000})
        seen["max_waiting"] = (await second.status())[:2]
        code, description, headers = await first.status()  # 408 after 300 ms, with what it still wanted
        seen["expired"] = (code, description, headers.get("Nats-Pending-Messages"),
                           headers.get("Nats-Pending-Bytes"))
        await first.request("S", "C", {"batch": 1, "expires": 5_000_000_000})
        seen["max_expires"] = (await first.status())[:2]
        await first.request("S", "C", {"batch": 1, "max_bytes": 5000})
        seen["max_request_bytes"] = (await first.status())[:2]
        await js.publish("s.big", b"x" * 200)
        await first.request("S", "C", {"batch": 1, "max_bytes": 100, "expires": 1_000_000_000})
        seen["too_big"] = (await first.status())[:2]
        await js.add_consumer("S", ConsumerConfig(durable_name="D", deliver_policy=DeliverPolicy.NEW))
        await second.request("S", "D", {"batch": 1, "expires": 5_000_000_000})
        deadline = time.monotonic() + 5
        while (await raw(nc, f"{API}.CONSUMER.INFO.S.D"))["num_waiting"] != 1:  # queued before the delete
            assert time.monotonic() < deadline, "the pull request never reached the consumer"
        await js.delete_consumer("S", "D")
        seen["deleted"] = (await second.status())[:2]
        await nc.close()
        return seen

    seen = await on_node(tmp_path, scenario)
    assert seen["max_waiting"] == ("409", "Exceeded MaxWaiting")
    assert seen["expired"] == ("408", "Request Timeout", "3", "500")
    assert seen["max_expires"] == ("409", "Exceeded MaxRequestExpires of 2s")
    assert seen["max_request_bytes"] == ("409", "Exceeded MaxRequestMaxBytes of 1000")
    assert seen["too_big"] == ("409", "Message Size Exceeds MaxBytes")
    assert seen["deleted"] == ("409", "Consumer Deleted")


# --- Retention ------------------------------------------------------------------------------------------


async def test_limits_retention_acks_never_touch_the_stream(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])  # retention limits, the default
        for i in range(3):
            await js.publish("s.x", b"%d" % i)
        for name in ("A", "B"):
            await js.add_consumer("S", ConsumerConfig(durable_name=name))
            for msg in await (await js.pull_subscribe_bind(name, stream="S")).fetch(3, timeout=5):
                await msg.ack_sync()
        await js.delete_consumer("S", "A")
        state = (await js.stream_info("S")).state
        await nc.close()
        return state.messages, state.first_seq, state.last_seq

    assert await on_node(tmp_path, scenario) == (3, 1, 3)


async def test_work_queue_refuses_overlapping_filtered_consumers(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="WQ", subjects=["jobs.>"], retention="workqueue")
        await js.add_consumer("WQ", ConsumerConfig(durable_name="A", filter_subject="jobs.a.*"))
        refused = []
        for name, subject in (("B", "jobs.>"), ("C", "jobs.a.x"), ("D", "jobs.*.x")):
            with pytest.raises(nats.js.errors.BadRequestError) as error:
                await js.add_consumer("WQ", ConsumerConfig(durable_name=name, filter_subject=subject))
            refused.append((error.value.err_code, error.value.description))
        await js.add_consumer("WQ", ConsumerConfig(durable_name="E", filter_subject="jobs.b.*"))  # disjoint
        names = sorted(await js.consumers_info("WQ"), key=lambda info: info.name)
        await nc.close()
        return refused, [info.name for info in names]

    refused, names = await on_node(tmp_path, scenario)
    assert refused == [(10100, "filtered consumer not unique on workqueue stream")] * 3
    assert names == ["A", "E"]


# --- Work-queue failover --------------------------------------------------------------------------------


async def test_work_queue_failover_loses_nothing_and_never_redelivers_a_committed_ack(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="WQF", subjects=["work.>"], retention="workqueue",
                                                     num_replicas=3)
        await until(lambda: stream_leader(cluster, "WQF") is not None, "a leader for WQF")
        leader = trio.from_thread.run_sync(stream_leader, cluster, "WQF")
        other = next(name for name in cluster.names if name != leader)
        nc = await nats_connect(cluster.node(other).url)
        js = nc.jetstream(timeout=15)
        await js.add_consumer("WQF", ConsumerConfig(durable_name="W", ack_wait=1.0))
        for i in range(1, 13):
            await js.publish(f"work.{i}", b"job %d" % i)
        sub = await js.pull_subscribe_bind("W", stream="WQF")
        outstanding = await sub.fetch(12, timeout=5)
        committed = set()
        for msg in outstanding[:5]:
            await msg.ack_sync()  # committed (and removed) before the leader dies
            committed.add(msg.metadata.sequence.stream)
        await admin.close()
        trio.from_thread.run(cluster.kill, leader)
        after: list[int] = []
        deadline = time.monotonic() + 40
        while len(set(after)) < 7 and time.monotonic() < deadline:
            try:
                msgs = await sub.fetch(12, timeout=3)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                continue
            for msg in msgs:
                after.append(msg.metadata.sequence.stream)
                await msg.ack_sync()
        # Every ack above committed: nothing may come back, even after several ack waits.
        late: list[int] = []
        quiet_until = time.monotonic() + 2.5
        while time.monotonic() < quiet_until:
            late += stream_seqs(await drain(sub))
        state = (await js.stream_info("WQF")).state
        trio.from_thread.run(cluster.restart, leader)

        def empty_and_equal() -> bool:
            stores = [live_seqs(cluster.replica_store(n, "WQF")) for n in cluster.names]
            states = [cluster.consumer_state(n, "WQF", "W") for n in cluster.names]
            return all(found == [] for found in stores) and all(
                s is not None and s.key() == states[0].key() for s in states)

        await until(empty_and_equal, "every replica empty with one consumer state", timeout_s=30)
        keys = {n: trio.from_thread.run_sync(cluster.consumer_state, n, "WQF", "W").key() for n in cluster.names}
        await nc.close()
        return stream_seqs(outstanding), committed, after, late, state, keys

    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=25) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            outstanding, committed, after, late, state, keys = await in_asyncio(
                scenario, cluster, cluster.node(cluster.names[0]).url, timeout_s=120)
    assert outstanding == list(range(1, 13))
    assert committed == {1, 2, 3, 4, 5}
    assert set(after) == set(range(6, 13))  # nothing lost
    assert not committed & set(after)  # none delivered after its ack committed
    assert late == []
    assert (state.messages, state.last_seq) == (0, 12)
    assert len(set(keys.values())) == 1
