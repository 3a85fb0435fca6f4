"""Consumer pause and resume, consumer leader stepdown, consumer advisories and ack metrics, through nats-py.

Method: one node from `jsraft.open_node` (client port 0), or a `jsraft.testing.cluster.Cluster` of three
(real nodes, TCP, files) for the stepdown; each scenario is nats-py code under asyncio in a worker thread
(`nats_kit.in_asyncio`). Answers are checked as the raw JSON nats-server sends (compared with
nats-server 2.15.1's answers to the same requests: the shapes are written out here). Events are read by
a nats-py subscription on `$JS.EVENT.>` made before the requests that raise them. A pause's end is
waited for by polling a pull request until it is served, with a deadline; "not delivered while paused"
is a `no_wait`-free fetch that must time out while the pause lasts several seconds longer.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from typing import Any

import nats.errors
import trio

import jsraft
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect, single, until
from test_consumers_nats import stream_leader

API = "$JS.API"
DEADLINE_S = 10.0


async def raw(nc: Any, subject: str, body: Any = b"") -> dict[str, Any]:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, payload, timeout=10)).data)


def rfc3339_in(seconds: float) -> str:
    """A time `seconds` from now in Go's RFC3339Nano form (no trailing zeros), as nats-server serves it."""
    moment = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    whole, fraction = moment.strftime("%Y-%m-%dT%H:%M:%S"), f"{moment.microsecond:06d}".rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"


async def on_node(tmp_path, scenario) -> Any:
    async with jsraft.open_node(single(tmp_path)) as node:
        return await in_asyncio(scenario, node.url, timeout_s=60)


class Events:
    """Every message on `$JS.EVENT.>` from the moment it subscribed."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def start(self, nc: Any) -> "Events":
        async def collect(msg: Any) -> None:
            self.seen.append((msg.subject, json.loads(msg.data)))
        await nc.subscribe("$JS.EVENT.>", cb=collect)
        await nc.flush()
        return self

    def of(self, prefix: str) -> list[dict[str, Any]]:
        return [body for subject, body in self.seen if subject.startswith(prefix)]

    async def wait(self, prefix: str, count: int = 1) -> list[dict[str, Any]]:
        deadline = time.monotonic() + DEADLINE_S
        while len(self.of(prefix)) < count:
            assert time.monotonic() < deadline, f"no {prefix} event (saw {[s for s, _ in self.seen]})"
            await asyncio.sleep(0.01)
        return self.of(prefix)


async def pull_one(nc: Any, stream: str, consumer: str, expires_s: float) -> Any:
    """One pull request for one message: the message, or a status message, or None (nothing at all)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, max_msgs=1)
    body = json.dumps({"batch": 1, "expires": int(expires_s * 1e9)}).encode()
    await nc.publish(f"{API}.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, reply=inbox)
    try:
        return await sub.next_msg(timeout=expires_s + 2)
    except nats.errors.TimeoutError:
        return None


# --- Pause ----------------------------------------------------------------------------------------------


async def test_pause_and_resume_answers_info_and_advisories(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        events = await Events().start(nc)
        await js.add_stream(name="S", subjects=["s.>"])
        await raw(nc, f"{API}.CONSUMER.CREATE.S.C", {"stream_name": "S",
                                                     "config": {"durable_name": "C", "ack_policy": "explicit"}})
        seen: dict[str, Any] = {"resume_idle": await raw(nc, f"{API}.CONSUMER.PAUSE.S.C")}
        until_text = rfc3339_in(60)
        seen["pause"] = await raw(nc, f"{API}.CONSUMER.PAUSE.S.C", {"pause_until": until_text})
        seen["info_paused"] = await raw(nc, f"{API}.CONSUMER.INFO.S.C")
        seen["resume"] = await raw(nc, f"{API}.CONSUMER.PAUSE.S.C", b"{}")
        seen["info_resumed"] = await raw(nc, f"{API}.CONSUMER.INFO.S.C")
        seen["past"] = await raw(nc, f"{API}.CONSUMER.PAUSE.S.C", {"pause_until": "2020-01-01T00:00:00Z"})
        seen["not_found"] = await raw(nc, f"{API}.CONSUMER.PAUSE.S.X")
        seen["stream_not_found"] = await raw(nc, f"{API}.CONSUMER.PAUSE.X.X")
        seen["unknown"] = await raw(nc, f"{API}.CONSUMER.PAUSE.S.C", b'{"foo": 5}')
        seen["number"] = await raw(nc, f"{API}.CONSUMER.PAUSE.S.C", b'{"pause_until": 5}')
        seen["bad_time"] = await raw(nc, f"{API}.CONSUMER.PAUSE.S.C", b'{"pause_until": "nope"}')
        pauses = await events.wait("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.C", 3)
        created = await events.wait("$JS.EVENT.ADVISORY.CONSUMER.CREATED.S.C")
        await nc.close()
        return seen, until_text, pauses, created

    seen, until_text, pauses, created = await on_node(tmp_path, scenario)
    kind = "io.nats.jetstream.api.v1.consumer_pause_response"
    assert seen["resume_idle"] == {"type": kind, "paused": False, "pause_until": "0001-01-01T00:00:00Z"}
    pause = seen["pause"]
    assert (pause["type"], pause["paused"], pause["pause_until"]) == (kind, True, until_text)
    assert 55e9 < pause["pause_remaining"] <= 60e9
    assert seen["info_paused"]["paused"] is True and seen["info_paused"]["pause_remaining"] > 55e9
    assert seen["info_paused"]["config"]["pause_until"] == until_text
    assert seen["resume"] == {"type": kind, "paused": False, "pause_until": "0001-01-01T00:00:00Z"}
    assert "paused" not in seen["info_resumed"] and "pause_until" not in seen["info_resumed"]["config"]
    assert seen["past"] == {"type": kind, "paused": False, "pause_until": "2020-01-01T00:00:00Z"}
    zero = {"paused": False, "pause_until": "0001-01-01T00:00:00Z"}
    assert seen["not_found"] == {"type": kind, "error": {"code": 404, "err_code": 10014,
                                                         "description": "consumer not found"}, **zero}
    assert seen["stream_not_found"]["error"]["err_code"] == 10059
    assert seen["unknown"]["error"] == {"code": 400, "err_code": 10025,
                                        "description": 'invalid JSON: json: unknown field "foo"'}
    assert seen["number"]["error"]["err_code"] == 10025
    assert seen["bad_time"]["error"]["err_code"] == 10025
    # nats-server raises a pause advisory for each change of pause_until (not for the idle resume).
    assert [(p["paused"], p["pause_until"]) for p in pauses] == [
        (True, until_text), (False, "0001-01-01T00:00:00Z"), (False, "2020-01-01T00:00:00Z")]
    assert pauses[0]["type"] == "io.nats.jetstream.advisory.v1.consumer_pause"
    assert set(pauses[0]) == {"type", "id", "timestamp", "stream", "consumer", "paused", "pause_until"}
    assert created[0]["type"] == "io.nats.jetstream.advisory.v1.consumer_action"
    assert (created[0]["stream"], created[0]["consumer"], created[0]["action"]) == ("S", "C", "create")


async def test_a_paused_consumer_delivers_nothing_until_the_pause_runs_out(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        events = await Events().start(nc)
        await js.add_stream(name="S", subjects=["s.>"])
        await js.publish("s.a", b"one")
        # Created paused (`pause_until` in the create config): the advisory comes with the creation.
        until_text = rfc3339_in(3)
        await raw(nc, f"{API}.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {
            "durable_name": "C", "ack_policy": "explicit", "pause_until": until_text}})
        held = await pull_one(nc, "S", "C", expires_s=1.0)  # well inside the pause
        # One request waiting across the pause's end, and nothing else happening: only the leader's
        # pause timer can serve it before it expires.
        got = await pull_one(nc, "S", "C", expires_s=8.0)
        resumed_at = datetime.datetime.now(datetime.timezone.utc)
        pauses = await events.wait("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.C", 2)
        info = await raw(nc, f"{API}.CONSUMER.INFO.S.C")
        await nc.close()
        return held, got, until_text, resumed_at, pauses, info

    held, got, until_text, resumed_at, pauses, info = await on_node(tmp_path, scenario)
    # Held: the expired request's 408, never the message.
    assert held is None or held.data == b"" and held.headers.get("Status") == "408"
    assert got is not None and got.data == b"one", got and got.headers
    until = datetime.datetime.fromisoformat(until_text.replace("Z", "+00:00"))
    assert until <= resumed_at < until + datetime.timedelta(seconds=3)
    assert [(p["paused"], p["pause_until"]) for p in pauses] == [(True, until_text), (False, until_text)]
    assert "paused" not in info and info["delivered"]["stream_seq"] == 1


# --- Ack metrics, NAK and TERM advisories ---------------------------------------------------------------


async def test_ack_metrics_follow_sample_freq_and_nak_term_raise_advisories(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        events = await Events().start(nc)
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(4):
            await js.publish("s.a", str(i).encode())
        await raw(nc, f"{API}.CONSUMER.CREATE.S.ALL", {"stream_name": "S", "config": {
            "durable_name": "ALL", "ack_policy": "explicit", "sample_freq": "100%"}})
        await raw(nc, f"{API}.CONSUMER.CREATE.S.NONE", {"stream_name": "S", "config": {
            "durable_name": "NONE", "ack_policy": "explicit"}})
        await raw(nc, f"{API}.CONSUMER.CREATE.S.BARE", {"stream_name": "S", "config": {
            "durable_name": "BARE", "ack_policy": "explicit", "sample_freq": "100"}})
        for name in ("ALL", "NONE", "BARE"):
            sub = await js.pull_subscribe_bind(name, "S")
            first = await sub.fetch(2, timeout=5)
            await first[0].nak()
            await first[1].term()
            for msg in await sub.fetch(3, timeout=5):  # the NAKed one again, then the last two
                await msg.ack_sync()
        metrics = await events.wait("$JS.EVENT.METRIC.CONSUMER.ACK.S.ALL", 3)
        bare = await events.wait("$JS.EVENT.METRIC.CONSUMER.ACK.S.BARE", 3)
        naked = await events.wait("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.ALL")
        termed = await events.wait("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.ALL")
        none = events.of("$JS.EVENT.METRIC.CONSUMER.ACK.S.NONE")
        await nc.close()
        return metrics, bare, naked, termed, none

    metrics, bare, naked, termed, none = await on_node(tmp_path, scenario)
    assert none == []
    assert len(metrics) == len(bare) == 3
    assert [m["stream_seq"] for m in metrics] == [1, 3, 4]
    redelivered = metrics[0]
    assert redelivered["type"] == "io.nats.jetstream.metric.v1.consumer_ack"
    assert list(redelivered) == ["type", "id", "timestamp", "stream", "consumer", "consumer_seq", "stream_seq",
                                 "ack_time", "deliveries"]
    assert (redelivered["consumer_seq"], redelivered["deliveries"]) == (3, 2)
    assert 0 < redelivered["ack_time"] < 10e9
    assert naked[0] == {**naked[0], "type": "io.nats.jetstream.advisory.v1.nak", "stream": "S", "consumer": "ALL",
                        "consumer_seq": 1, "stream_seq": 1, "deliveries": 1}
    assert termed[0]["type"] == "io.nats.jetstream.advisory.v1.terminated"
    assert (termed[0]["stream_seq"], termed[0]["deliveries"]) == (2, 1)


async def test_a_partial_sample_freq_samples_some_acks(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        events = await Events().start(nc)
        await js.add_stream(name="S", subjects=["s.>"])
        for i in range(200):
            await js.publish("s.a", str(i).encode())
        await raw(nc, f"{API}.CONSUMER.CREATE.S.HALF", {"stream_name": "S", "config": {
            "durable_name": "HALF", "ack_policy": "explicit", "sample_freq": "50%"}})
        sub = await js.pull_subscribe_bind("HALF", "S")
        acked = 0
        while acked < 200:
            for msg in await sub.fetch(50, timeout=5):
                acked += 1
                # The last ack is a double ack: confirmed after the pass that took every ack before it
                # (one lane, in order) raised their metrics, which went out on this connection first.
                await (msg.ack_sync() if acked == 200 else msg.ack())
        await nc.flush()
        count = len(events.of("$JS.EVENT.METRIC.CONSUMER.ACK.S.HALF"))
        await nc.close()
        return count

    count = await on_node(tmp_path, scenario)
    assert 40 <= count <= 160  # binomial(200, 0.5): outside this range with probability < 1e-17


async def test_deleting_a_consumer_raises_the_deleted_advisory(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        events = await Events().start(nc)
        await js.add_stream(name="S", subjects=["s.>"])
        await raw(nc, f"{API}.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {"durable_name": "C"}})
        await raw(nc, f"{API}.CONSUMER.DELETE.S.C")
        deleted = await events.wait("$JS.EVENT.ADVISORY.CONSUMER.DELETED.S.C")
        await nc.close()
        return deleted

    deleted = await on_node(tmp_path, scenario)
    assert [(d["type"], d["action"]) for d in deleted] == [("io.nats.jetstream.advisory.v1.consumer_action", "delete")]


# --- Leader stepdown ------------------------------------------------------------------------------------


async def test_consumer_leader_stepdown_on_one_node_is_cluster_required(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        await raw(nc, f"{API}.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {"durable_name": "C"}})
        answers = [await raw(nc, f"{API}.CONSUMER.LEADER.STEPDOWN.{s}.{c}") for s, c in (("S", "C"), ("X", "X"))]
        await nc.close()
        return answers

    answers = await on_node(tmp_path, scenario)
    for answer in answers:
        assert answer == {"type": "io.nats.jetstream.api.v1.consumer_leader_stepdown_response",
                          "error": {"code": 503, "err_code": 10010,
                                    "description": "JetStream clustering support required"}}


async def test_consumer_leader_stepdown_moves_the_stream_leader_and_delivery_continues(tmp_path):
    async def scenario(cluster, url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        events = await Events().start(nc)
        await js.add_stream(name="S", subjects=["s.>"], num_replicas=3)
        await js.add_stream(name="ONE", subjects=["one.>"], num_replicas=1)
        for i in range(3):
            await js.publish("s.a", str(i).encode())
        await raw(nc, f"{API}.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {
            "durable_name": "C", "ack_policy": "explicit"}})
        await raw(nc, f"{API}.CONSUMER.CREATE.ONE.C", {"stream_name": "ONE", "config": {"durable_name": "C"}})
        sub = await js.pull_subscribe_bind("C", "S")
        (first,) = await sub.fetch(1, timeout=5)
        await first.ack_sync()
        await until(lambda: stream_leader(cluster, "S") is not None, "a leader for S")
        before = trio.from_thread.run_sync(stream_leader, cluster, "S")
        seen = {"success": await raw(nc, f"{API}.CONSUMER.LEADER.STEPDOWN.S.C")}
        await until(lambda: stream_leader(cluster, "S") not in (None, before), "a new leader for S")
        after = trio.from_thread.run_sync(stream_leader, cluster, "S")
        elected = await events.wait("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.S.C", 2)
        seen["r1"] = await raw(nc, f"{API}.CONSUMER.LEADER.STEPDOWN.ONE.C")
        seen["missing"] = await raw(nc, f"{API}.CONSUMER.LEADER.STEPDOWN.S.X")
        seen["no_stream"] = await raw(nc, f"{API}.CONSUMER.LEADER.STEPDOWN.X.X")
        seen["unknown_peer"] = await raw(nc, f"{API}.CONSUMER.LEADER.STEPDOWN.S.C",
                                         {"placement": {"preferred": "nope"}})
        rest = []
        deadline = time.monotonic() + 20
        while len(rest) < 2 and time.monotonic() < deadline:  # a fetch in flight may meet the election's 409
            try:
                rest += [msg.data for msg in await sub.fetch(2 - len(rest), timeout=2)]
            except nats.errors.TimeoutError:
                continue
        info = await js.consumer_info("S", "C")
        one = events.of("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ONE.")
        await nc.close()
        return seen, rest, info, (before, after, elected, one)

    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=25) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            seen, rest, info, leaders = await in_asyncio(scenario, cluster, cluster.node(cluster.names[0]).url, timeout_s=90)
    kind = "io.nats.jetstream.api.v1.consumer_leader_stepdown_response"
    assert seen["success"] == {"type": kind, "success": True}
    assert seen["r1"] == {"type": kind, "success": True}  # as a clustered nats-server answers an R1 consumer
    assert seen["missing"]["error"] == {"code": 404, "err_code": 10014, "description": "consumer not found"}
    assert seen["no_stream"]["error"]["err_code"] == 10059
    assert seen["unknown_peer"]["error"] == {"code": 400, "err_code": 10005,
                                             "description": 'preferred server "nope" not known'}
    assert rest == [b"1", b"2"]
    before, after, elected, one = leaders
    assert [e["leader"] for e in elected] == [before, after]  # at its creation, then after the stepdown
    assert elected[-1]["type"] == "io.nats.jetstream.advisory.v1.consumer_leader_elected"
    assert sorted(r["name"] for r in elected[-1]["replicas"]) == sorted(cluster.names)
    assert one == []  # an R1 stream's consumers have no election to announce
    assert info.ack_floor.stream_seq == 1 and info.delivered.stream_seq >= 3


# --- The sampling decision and the pause watch, without a node ------------------------------------------


def test_should_sample_parses_sample_freq_as_nats_server_does():
    import random

    from jsraft.replica.consumer_events import should_sample

    rng = random.Random(7)
    assert all(should_sample("100%", rng) for _ in range(100)) and all(should_sample("100", rng) for _ in range(100))
    assert not any(should_sample(value, rng) for value in (None, "0", "0%", "x%") for _ in range(100))
    assert 400 < sum(should_sample("50%", rng) for _ in range(1000)) < 600
    assert 200 < sum(should_sample("30", rng) for _ in range(1000)) < 400


def test_a_pause_seen_in_force_is_announced_once_when_it_runs_out():
    from types import SimpleNamespace

    from jsraft.replica.advisories import AdvisoryLog
    from jsraft.replica.consumer_events import PAUSE_TYPE, ConsumerEvents

    log = AdvisoryLog("n1")
    events = ConsumerEvents("S", log)
    entry = SimpleNamespace(paused_until_ns=2_000)
    leading = {"C": SimpleNamespace(name="C", entry=entry)}
    assert events.pause_due_ns(leading.values(), now_ns=1_000) == 2_000
    events.expire_pauses(leading, now_ns=1_500)
    events.flush()
    assert log.entries(type=PAUSE_TYPE) == []
    events.expire_pauses(leading, now_ns=2_000)
    events.expire_pauses(leading, now_ns=3_000)
    events.flush()
    announced = log.entries(type=PAUSE_TYPE)
    assert [(a["consumer"], a["paused"], a["pause_until"]) for a in announced] == [
        ("C", False, "1970-01-01T00:00:00.000002Z")]
    assert events.pause_due_ns(leading.values(), now_ns=3_000) is None
