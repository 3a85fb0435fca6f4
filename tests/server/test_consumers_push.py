"""Push consumers through nats-py against a real three-node cluster: delivery to a deliver subject with
explicit acks and redelivery, deliver groups, flow control (answered, and stalling when not), idle
heartbeats, rate limit, replay original, ordered consumers, KV watch, and a stream-leader failover.

Method: a `jsraft.testing.cluster.Cluster` (real nodes, TCP, files) runs in the test's trio loop; each
scenario is nats-py code run under asyncio in a worker thread (`nats_kit.in_asyncio`), connected to a
node that does *not* lead the stream, so deliveries reach the subscriber through cluster interest
routing and acks and flow-control answers travel back to the leader over `$rpc`. Waits are polls with
deadlines (`next_msg(timeout=...)`, loops against a deadline). Timing checks (rate limit, replay
original) compare delivery timestamps with the expected spread, with wide margins; none relies on a
sleep being long enough. Where a rule is about something *not* happening (a stalled flow-control window), the test waits
for the server's own signal that it happened (the heartbeat's `Nats-Consumer-Stalled` header).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats.errors
import nats.js.errors
import trio
from nats.js.api import ConsumerConfig

from jsraft.testing.cluster import Cluster
from nats_kit import nats_connect
from test_consumers_nats import follower_connection, redeliveries_after_kill, run_in_cluster, stream_leader

STALLED = "Nats-Consumer-Stalled"


def leading(cluster: Cluster, stream: str, consumer: str) -> Any:
    """The leader-side runner of `consumer` (a `PushLeading`), or None."""
    name = stream_leader(cluster, stream)
    if name is None:
        return None
    return cluster.node(name).streams.replicas[stream].consumers.leading.get(consumer)


async def collect(sub: Any, count: int, timeout_s: float = 10.0) -> list[Any]:
    """`count` data messages from a plain subscription (control messages skipped), with their arrival time."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        msg = await sub.next_msg(timeout=max(deadline - time.monotonic(), 0.01))
        if msg.data or not (msg.headers and msg.headers.get("Status") == "100"):
            got.append((msg, time.monotonic()))
    return got


# --- Delivery, acks, redelivery ------------------------------------------------------------------------


async def test_push_delivery_with_explicit_ack_and_redelivery(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="P", subjects=["p.*"], num_replicas=3)
        nc, _ = await follower_connection(cluster, "P")
        js = nc.jetstream(timeout=10)
        for i in range(1, 4):
            await js.publish(f"p.{i}", b"m%d" % i)
        sub = await js.subscribe("p.*", durable="PUSH", manual_ack=True, config=ConsumerConfig(ack_wait=1.0))
        first = [await sub.next_msg(timeout=10) for _ in range(3)]
        for msg in first[:2]:
            await msg.ack_sync()
        started = time.monotonic()
        again = await sub.next_msg(timeout=10)  # the third, redelivered after ack_wait
        waited = time.monotonic() - started
        await again.ack_sync()
        info = await js.consumer_info("P", "PUSH")
        await nc.close()
        await admin.close()
        return first, again, waited, info

    first, again, waited, info = await run_in_cluster(tmp_path, scenario)
    assert [(m.subject, m.data, m.metadata.sequence.stream) for m in first] == \
        [("p.1", b"m1", 1), ("p.2", b"m2", 2), ("p.3", b"m3", 3)]
    assert all(m.metadata.num_delivered == 1 and m.metadata.consumer == "PUSH" for m in first)
    assert (again.data, again.metadata.num_delivered, again.metadata.sequence.consumer) == (b"m3", 2, 4)
    assert waited > 0.3  # after ack_wait, not at once
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.delivered.stream_seq) == (3, 0, 3)
    assert info.config.deliver_subject and info.push_bound


async def test_deliver_group_splits_messages_between_subscribers(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="G", subjects=["g.*"], num_replicas=3)
        nc, leader = await follower_connection(cluster, "G")
        # Both members on one node: core NATS prefers a member on the publishing node (the leader), so
        # members spread over nodes would not show the split; here routing picks one at random.
        other = await nats_connect(nc.connected_url.geturl())
        js, js2 = nc.jetstream(timeout=10), other.jetstream(timeout=10)
        got: dict[str, list[int]] = {"a": [], "b": []}

        def handler(key: str):
            async def cb(msg):
                got[key].append(msg.metadata.sequence.stream)
                await msg.ack()
            return cb

        await js.subscribe("g.*", queue="workers", cb=handler("a"))
        await js2.subscribe("g.*", queue="workers", cb=handler("b"))
        for i in range(1, 61):
            await js.publish("g.x", b"%d" % i)
        deadline = time.monotonic() + 20
        while len(got["a"]) + len(got["b"]) < 60 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        info = await js.consumer_info("G", "workers")
        await other.close()
        await nc.close()
        await admin.close()
        return got, info

    got, info = await run_in_cluster(tmp_path, scenario)
    assert sorted(got["a"] + got["b"]) == list(range(1, 61))  # each message to exactly one member
    assert got["a"] and got["b"]
    assert info.config.deliver_group == "workers"


# --- Flow control and heartbeats -------------------------------------------------------------------------


async def test_flow_control_answered_delivers_a_stream_larger_than_the_window(tmp_path):
    count, size = 400, 16384  # 6.5 MB: several windows (the first is 2 MiB, the second 4 MiB)

    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="FC", subjects=["fc.*"], num_replicas=3)
        nc, _ = await follower_connection(cluster, "FC")
        js = nc.jetstream(timeout=10)
        for i in range(count):
            await js.publish("fc.x", bytes([i % 256]) * size)
        seqs: list[int] = []

        async def cb(msg):
            seqs.append(msg.metadata.sequence.stream)

        await js.subscribe("fc.x", durable="FLOW", cb=cb, flow_control=True, idle_heartbeat=1.0,
                           config=ConsumerConfig(ack_policy="none"))
        deadline = time.monotonic() + 30
        while len(seqs) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        requests = trio.from_thread.run_sync(lambda: leading(cluster, "FC", "FLOW").pacer.fc_count)
        await nc.close()
        await admin.close()
        return seqs, requests

    seqs, requests = await run_in_cluster(tmp_path, scenario)
    assert seqs == list(range(1, count + 1))
    assert requests >= 2  # the client answered flow-control requests, or delivery would have stalled


async def test_unanswered_flow_control_stalls_and_heartbeat_names_the_request(tmp_path):
    count, size = 200, 16384  # 3.2 MB, over the first 2 MiB window

    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="ST", subjects=["st.*"], num_replicas=3)
        nc, _ = await follower_connection(cluster, "ST")
        js = nc.jetstream(timeout=10)
        for i in range(count):
            await js.publish("st.x", b"x" * size)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)  # a plain subscription: nats-py answers nothing on it
        await js.add_consumer("ST", ConsumerConfig(durable_name="S", deliver_subject=inbox, ack_policy="none",
                                                   flow_control=True, idle_heartbeat=0.3))
        data, requests, stalled = 0, [], None
        deadline = time.monotonic() + 20
        while stalled is None and time.monotonic() < deadline:
            msg = await sub.next_msg(timeout=5)
            status = msg.headers.get("Status") if msg.headers else None
            if status == "100" and msg.reply:
                requests.append(msg.reply)  # a flow-control request
            elif status == "100" and msg.headers.get(STALLED):
                stalled = msg.headers[STALLED]
            elif status is None:
                data += 1
        before = data
        await nc.publish(stalled)  # answer: delivery resumes
        while data < count:
            msg = await sub.next_msg(timeout=5)
            status = msg.headers.get("Status") if msg.headers else None
            if status == "100" and msg.reply:
                await nc.publish(msg.reply)
            elif status is None:
                data += 1
        await nc.close()
        await admin.close()
        return before, requests, stalled, data

    before, requests, stalled, data = await run_in_cluster(tmp_path, scenario)
    assert requests and stalled == requests[-1] and stalled.startswith("$JS.FC.ST.S.")
    assert 0 < before < count  # stalled after the window, not before and not at the end
    assert data == count


async def test_idle_heartbeat_carries_the_last_sequences(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="HB", subjects=["hb.*"], num_replicas=3)
        nc, _ = await follower_connection(cluster, "HB")
        js = nc.jetstream(timeout=10)
        await js.publish("hb.x", b"one")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await js.add_consumer("HB", ConsumerConfig(durable_name="H", deliver_subject=inbox, ack_policy="none",
                                                   idle_heartbeat=0.2))
        first = await sub.next_msg(timeout=10)
        started = time.monotonic()
        beat = await sub.next_msg(timeout=10)
        waited = time.monotonic() - started
        await nc.close()
        await admin.close()
        return first, beat, waited

    first, beat, waited = await run_in_cluster(tmp_path, scenario)
    assert first.data == b"one"
    assert beat.data == b"" and beat.headers["Status"] == "100" and beat.headers["Description"] == "Idle Heartbeat"
    assert (beat.headers["Nats-Last-Consumer"], beat.headers["Nats-Last-Stream"]) == ("1", "1")
    assert STALLED not in beat.headers
    assert waited > 0.1


# --- Pacing --------------------------------------------------------------------------------------------


async def test_rate_limit_spreads_deliveries(tmp_path):
    count = 40  # ~1 KiB each at 20 KB/s with a 1 KiB burst: about 2 s from first to last

    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="RL", subjects=["rl.*"], num_replicas=3,
                                                      max_msg_size=1024)
        nc, _ = await follower_connection(cluster, "RL")
        js = nc.jetstream(timeout=10)
        for _ in range(count):
            await js.publish("rl.x", b"r" * 990)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await js.add_consumer("RL", ConsumerConfig(durable_name="R", deliver_subject=inbox, ack_policy="none",
                                                   rate_limit_bps=8 * 20_000))
        got = await collect(sub, count, timeout_s=30)
        await nc.close()
        await admin.close()
        return got

    got = await run_in_cluster(tmp_path, scenario)
    assert [msg.metadata.sequence.stream for msg, _ in got] == list(range(1, count + 1))
    spread = got[-1][1] - got[0][1]
    assert 1.2 < spread < 20  # ~40 KB at 20 KB/s; instant delivery would take well under 0.5 s


async def test_replay_original_keeps_the_original_gaps(tmp_path):
    gaps_s = (0.6, 0.1, 0.8)

    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="RP", subjects=["rp.*"], num_replicas=3)
        nc, _ = await follower_connection(cluster, "RP")
        js = nc.jetstream(timeout=10)
        stamps = []
        for i, gap in enumerate((0.0, *gaps_s)):
            await asyncio.sleep(gap)  # making the data: the stream timestamps carry these gaps
            await js.publish("rp.x", b"%d" % i)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await js.add_consumer("RP", ConsumerConfig(durable_name="O", deliver_subject=inbox, ack_policy="none",
                                                   replay_policy="original"))
        got = await collect(sub, len(gaps_s) + 1, timeout_s=20)
        for msg, _ in got:
            stamps.append(msg.metadata.timestamp.timestamp())
        await nc.close()
        await admin.close()
        return got, stamps

    got, stamps = await run_in_cluster(tmp_path, scenario)
    assert [msg.data for msg, _ in got] == [b"0", b"1", b"2", b"3"]
    arrived = [at for _, at in got]
    for i in range(3):
        original = stamps[i + 1] - stamps[i]
        seen = arrived[i + 1] - arrived[i]
        assert seen > original - 0.15, (i, original, seen)  # never sooner than the original gap
    assert arrived[-1] - arrived[0] < sum(gaps_s) + 3.0


# --- Ordered consumers ------------------------------------------------------------------------------------


async def test_ordered_consumer_receives_everything_in_order_and_recovers(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="OC", subjects=["oc.*"], num_replicas=3)
        nc, _ = await follower_connection(cluster, "OC")
        js = nc.jetstream(timeout=10)
        for i in range(1, 21):
            await js.publish("oc.x", b"%d" % i)
        sub = await js.subscribe("oc.x", ordered_consumer=True, idle_heartbeat=0.3)
        first = [await sub.next_msg(timeout=10) for _ in range(20)]
        info = await sub.consumer_info()
        await js.delete_consumer("OC", info.name)  # lost: heartbeats stop, the client makes a new one
        for i in range(21, 31):
            await js.publish("oc.x", b"%d" % i)
        rest = [await sub.next_msg(timeout=15) for _ in range(10)]
        again = await sub.consumer_info()
        await nc.close()
        await admin.close()
        return first, rest, info, again

    first, rest, info, again = await run_in_cluster(tmp_path, scenario)
    assert [m.data for m in first + rest] == [b"%d" % i for i in range(1, 31)]
    assert (getattr(info.config.ack_policy, "value", info.config.ack_policy), info.config.flow_control, info.config.mem_storage) == ("none", True, True)
    assert again.name != info.name  # recreated by the client from the last sequence it had
    assert [m.metadata.sequence.stream for m in rest] == list(range(21, 31))


async def test_kv_watch_and_object_store_get_use_ordered_consumers(tmp_path):
    async def scenario(cluster, url):
        from nats.js.api import StreamConfig

        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        # The KV bucket's stream made by hand: nats-py's `create_key_value` sends `allow_msg_ttl`, a stream
        # field jsraft does not know yet; everything the watcher needs (ordered push consumer,
        # last_per_subject, headers) is there.
        await js.add_stream(StreamConfig(name="KV_B", subjects=["$KV.B.>"], max_msgs_per_subject=5,
                                         allow_rollup_hdrs=True, deny_delete=True, allow_direct=True,
                                         discard="new", num_replicas=3))
        # Through a node that does not lead the stream: nats-py ends the watcher's initial values when a
        # consumer info (asked after the subscribe) says 0 pending, and that answer must not overtake the
        # deliveries the leader made before it (test_cross_node_order holds that window open).
        await nc.close()
        nc, _ = await follower_connection(cluster, "KV_B")
        js = nc.jetstream(timeout=10)
        kv = await js.key_value("B")
        await kv.put("a", b"1")
        await kv.put("b", b"2")
        await kv.put("a", b"3")
        watcher = await kv.watchall()
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
        store = await js.create_object_store("OBJ")
        payload = bytes(range(256)) * 1200  # 300 KiB: three chunks
        await store.put("file", payload)
        got = (await store.get("file")).data
        await nc.close()
        return seen, got == payload

    seen, same = await run_in_cluster(tmp_path, scenario)
    assert seen == [("b", b"2"), ("a", b"3"), ("b", b"4")]  # last per subject, then the live update
    assert same


# --- Failover ----------------------------------------------------------------------------------------------


async def test_push_consumer_survives_stream_leader_kill(tmp_path):
    async def scenario(cluster, url):
        admin = await nats_connect(url)
        await admin.jetstream(timeout=10).add_stream(name="F", subjects=["f.>"], num_replicas=3)
        nc, leader = await follower_connection(cluster, "F")
        js = nc.jetstream(timeout=15)
        for i in range(1, 11):
            await js.publish(f"f.{i}", b"m%d" % i)
        sub = await js.subscribe("f.>", durable="D", manual_ack=True, config=ConsumerConfig(ack_wait=1.0))
        first = [await sub.next_msg(timeout=10) for _ in range(10)]
        for msg in first[:4]:
            await msg.ack_sync()  # committed before the leader dies
        await admin.close()

        async def receive(timeout_s: float) -> list[Any]:
            return [await sub.next_msg(timeout=timeout_s)]

        redelivered = await redeliveries_after_kill(cluster, leader, receive, 6)
        info = await js.consumer_info("F", "D")
        await nc.close()
        return [m.metadata.sequence.stream for m in first], redelivered, info

    first, redelivered, info = await run_in_cluster(tmp_path, scenario)
    assert first == list(range(1, 11))
    assert sorted(redelivered) == list(range(5, 11))  # every unacked message; no acked one came back
    assert all(count >= 2 for count in redelivered.values())
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (10, 0)


# --- Config rules ------------------------------------------------------------------------------------------


async def test_push_config_rules_and_pull_requests_to_a_push_consumer(tmp_path):
    async def scenario(cluster, url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="C", subjects=["c.*"], num_replicas=3)
        errors: dict[str, Any] = {}
        for key, config in (
            ("fc_without_hb", ConsumerConfig(durable_name="X", deliver_subject="d.x", flow_control=True)),
            ("push_max_waiting", ConsumerConfig(durable_name="X", deliver_subject="d.x", max_waiting=5)),
            ("pull_rate", ConsumerConfig(durable_name="X", rate_limit_bps=1000)),
            ("pull_hb", ConsumerConfig(durable_name="X", idle_heartbeat=1.0)),
            ("small_hb", ConsumerConfig(durable_name="X", deliver_subject="d.x", idle_heartbeat=0.05)),
            ("cycle", ConsumerConfig(durable_name="X", deliver_subject="c.loop")),
        ):
            try:
                await js.add_consumer("C", config)
            except nats.js.errors.APIError as error:
                errors[key] = error.err_code
        await js.add_consumer("C", ConsumerConfig(durable_name="PUSH", deliver_subject="d.push"))
        try:
            await js.add_consumer("C", ConsumerConfig(durable_name="PUSH"))
        except nats.js.errors.APIError as error:
            errors["push_to_pull"] = (error.err_code, error.description)
        answer = await nc.request("$JS.API.CONSUMER.MSG.NEXT.C.PUSH", b"1", timeout=5)
        await nc.close()
        return errors, answer

    errors, answer = await run_in_cluster(tmp_path, scenario)
    assert errors["fc_without_hb"] == 10108 and errors["push_max_waiting"] == 10080
    assert errors["pull_rate"] == 10086 and errors["pull_hb"] == 10088
    assert errors["small_hb"] == 10083 and errors["cycle"] == 10081
    assert errors["push_to_pull"][0] == 10012
    assert answer.headers["Status"] == "409" and answer.headers["Description"] == "Consumer is push based"
