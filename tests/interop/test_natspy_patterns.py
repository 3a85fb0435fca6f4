"""nats-py's everyday patterns against real `jsraft serve` processes, one node and three, as nats-py's own
test suite (`tests/test_js.py` of nats.py v2.15.0) and its users write them — no retries, no name flags.

Method: one module-scoped jsraft system per topology (`bench/nats_servers.py`'s `JsraftServers`: one
`jsraft serve` process per node started by `scripts/cluster.py up`, polled until ready). Each scenario
runs under `asyncio.run` with its own timeout, on streams and subjects of its own, so scenarios do not see
each other. In the three-node system the publisher and the subscriber sit on different nodes where the
scenario is about routing, and the JetStream client talks to a node chosen to not be the stream's leader
when it matters (every stream here is R3 there). Each scenario fails on the first wrong answer: a
503 / no-responders, a missing or extra message, or a timeout.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from bench_servers import load_servers

servers = load_servers()
nats = pytest.importorskip("nats")
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy  # noqa: E402
from nats.js.errors import KeyNotFoundError, NotFoundError  # noqa: E402


@pytest.fixture(scope="module", params=[1, 3], ids=["one-node", "three-nodes"])
def system(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"natspy{request.param}")
    with servers.JsraftServers(str(root), nodes=request.param) as jsraft_system:
        yield jsraft_system


def run(scenario, *args, timeout_s: float = 60.0):
    return asyncio.run(asyncio.wait_for(scenario(*args), timeout_s))


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8].upper()}"


async def connect(url: str):
    return await nats.connect(url, connect_timeout=10, allow_reconnect=False)


def replicas(system) -> int:
    return len(system.urls)


# --- Core NATS: publishes whose subject has wildcard tokens ----------------------------------------------


async def wildcard_publishes(publisher_url: str, subscriber_url: str) -> dict[str, list[str]]:
    pub, sub = await connect(publisher_url), await connect(subscriber_url)
    try:
        got: dict[str, list[str]] = {}
        for pattern in ("t.*.>", "t.a.b", "t.>", "t.*.b", "t.a.*"):
            got[pattern] = []

            async def take(msg, pattern=pattern):
                got[pattern].append(msg.subject)

            await sub.subscribe(pattern, cb=take)
        await sub.flush()
        # The subscriber's node must have told the publisher's node of these subscriptions before it
        # publishes: interest travels in order, so a request to a responder subscribed after them is
        # answered once theirs has arrived there too.
        async def answer(msg):
            await msg.respond(b"ok")

        responder = await sub.subscribe("u.ready", cb=answer)
        await sub.flush()
        for _ in range(200):
            try:
                await pub.request("u.ready", b"", timeout=0.5)
                break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                await asyncio.sleep(0.05)
        await responder.unsubscribe()
        for subject in ("t.a.>", "t.*.b", "t.>", "t.*", "t.a.b"):
            await pub.publish(subject, b"x")
        await pub.flush()
        expected = sum(len(v) for v in EXPECTED_ROUTING.values())
        for _ in range(400):
            if sum(len(v) for v in got.values()) >= expected:
                break
            await asyncio.sleep(0.01)
        await sub.flush()
        return got
    finally:
        await pub.close()
        await sub.close()


# What nats-server 2.15.1 delivers for the publishes above (seen against it): a `*` or `>` token of a
# published subject is matched only by a wildcard in the subscription.
EXPECTED_ROUTING = {
    "t.*.>": ["t.a.>", "t.*.b", "t.a.b"],
    "t.a.b": ["t.a.b"],
    "t.>": ["t.a.>", "t.*.b", "t.>", "t.*", "t.a.b"],
    "t.*.b": ["t.*.b", "t.a.b"],
    "t.a.*": ["t.a.>", "t.a.b"],
}


def test_publishes_with_wildcard_tokens_are_routed_as_nats_server_routes_them(system):
    got = run(wildcard_publishes, system.urls[0], system.urls[-1])
    assert got == EXPECTED_ROUTING


# --- Pull consumers on wildcard filters, fetched right after create ---------------------------------------


async def pull_on_filter(url: str, num_replicas: int, filter_token: str, durable: bool, count: int) -> list[str]:
    nc = await connect(url)
    try:
        js = nc.jetstream()
        name = unique("WC")
        await js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=num_replicas)
        for i in range(count):
            await js.publish(f"{name}.s{i}.x" if filter_token == ">" else f"{name}.s{i}", b"m")
        durable_name = "worker" if durable else None
        psub = await js.pull_subscribe(f"{name}.{filter_token}", durable=durable_name)
        msgs = await psub.fetch(count, timeout=10)  # the first fetch right after create: no retry
        for msg in msgs:
            await msg.ack()
        return [msg.subject for msg in msgs]
    finally:
        await nc.close()


@pytest.mark.parametrize("filter_token", [">", "*"])
@pytest.mark.parametrize("durable", [True, False], ids=["durable", "ephemeral"])
def test_pull_subscribe_on_a_wildcard_filter_fetches_at_once(system, filter_token, durable):
    subjects = run(pull_on_filter, system.urls[-1], replicas(system), filter_token, durable, 5)
    assert len(subjects) == 5 and len(set(subjects)) == 5, subjects


# --- Interest before the answer: publish and fetch right after the create answers -------------------------


async def use_right_after_create(url: str, num_replicas: int, rounds: int) -> list[int]:
    """Create a stream, publish to it, create a durable and an ephemeral pull consumer and fetch from each
    — every step right after the answer of the one before, with no retry."""
    nc = await connect(url)
    fetched = []
    try:
        js = nc.jetstream()
        for _ in range(rounds):
            name = unique("RA")
            await js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=num_replicas)
            await js.publish(f"{name}.a", b"first")
            for durable in ("d", None):
                psub = await js.pull_subscribe(f"{name}.a", durable=durable, stream=name)
                (msg,) = await psub.fetch(1, timeout=10)
                await msg.ack()
                fetched.append(msg.metadata.sequence.stream)
                await psub.unsubscribe()
    finally:
        await nc.close()
    return fetched


def test_a_stream_and_its_consumers_serve_right_after_their_create_answers(system):
    for url in system.urls:  # the client on every node: leader and followers alike
        assert run(use_right_after_create, url, replicas(system), 3, timeout_s=120) == [1] * 6


# --- The plain pull loop over a large stream ----------------------------------------------------------------


async def pull_loop(url: str, num_replicas: int, total: int) -> tuple[int, int]:
    """The issue's loop: `total` x 128 B published with `publish_async`, then `fetch(500, timeout=5)` with
    an ack for each message until all arrived. nats-py's `pull_subscribe` sets the subject as the
    consumer's filter: the filtered read path (a stall after ~1,500 messages, each fetch slower than the
    last, when every read listed the rest of its block) is the one under test."""
    nc = await connect(url)
    try:
        js = nc.jetstream()
        name = unique("PL")
        await js.add_stream(name=name, subjects=[f"{name}.x"], num_replicas=num_replicas)
        for _ in range(total):
            await js.publish_async(f"{name}.x", b"x" * 128)
        await js.publish_async_completed()
        config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                                max_ack_pending=10_000, ack_wait=60)
        psub = await js.pull_subscribe(f"{name}.x", durable="A", stream=name, config=config)
        received, timeouts, seen = 0, 0, set()
        while received < total and timeouts < 3:
            try:
                msgs = await psub.fetch(500, timeout=5)
            except nats.errors.TimeoutError:
                timeouts += 1
                continue
            for msg in msgs:
                seen.add(msg.metadata.sequence.stream)
                await msg.ack()
            received += len(msgs)
        assert seen == set(range(1, total + 1)), f"{len(seen)} distinct of {total}"
        return received, timeouts
    finally:
        await nc.close()


def test_the_nats_py_pull_loop_receives_30000_without_a_stall(system):
    assert run(pull_loop, system.urls[-1], replicas(system), 30_000, timeout_s=300) == (30_000, 0)


# --- Read-your-writes for stream updates ---------------------------------------------------------------------


async def update_then_read(url: str, num_replicas: int) -> list[tuple[int, int]]:
    """`update_stream(max_msgs=500)` on a stream of 2,000: what the update answers, then what an
    immediate `stream_info` answers — (messages, first_seq) each."""
    nc = await connect(url)
    try:
        js = nc.jetstream()
        name = unique("UP")
        await js.add_stream(name=name, subjects=[f"{name}.x"], num_replicas=num_replicas)
        for _ in range(2000):
            await js.publish_async(f"{name}.x", b"m")
        await js.publish_async_completed()
        answered = await js.update_stream(name=name, subjects=[f"{name}.x"], num_replicas=num_replicas,
                                          max_msgs=500)
        info = await js.stream_info(name)
        assert answered.config.max_msgs == info.config.max_msgs == 500
        return [(answered.state.messages, answered.state.first_seq), (info.state.messages, info.state.first_seq)]
    finally:
        await nc.close()


def test_a_stream_update_is_read_your_writes(system):
    for url in system.urls:
        for _ in range(2):
            assert run(update_then_read, url, replicas(system)) == [(500, 1501), (500, 1501)]


# --- An ordered push consumer (flow control and idle heartbeats) ---------------------------------------------


async def ordered_consumer(url: str, num_replicas: int) -> tuple[int, bytes]:
    """nats-py's `test_ordered_consumer`: 1 MiB published as 1,024 chunks of 1 KiB (with a header),
    concurrently, to an ordered consumer (flow control and a 0.3 s idle heartbeat, as nats-py sets them)."""
    nc = await connect(url)
    try:
        js = nc.jetstream()
        name = unique("OC")
        await js.add_stream(name=name, subjects=[name], num_replicas=num_replicas)
        received: list = []

        async def take(msg):
            received.append(msg)
            await msg.ack()

        sub = await js.subscribe(name, cb=take, ordered_consumer=True, idle_heartbeat=0.3)
        payload = bytes(range(256)) * 4096
        tasks = []
        for at in range(0, len(payload), 1024):
            tasks.append(asyncio.create_task(js.publish(name, payload[at:at + 1024], headers={"data": "true"})))
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        for _ in range(500):  # a deadline, not a sleep: done as soon as the last chunk arrived
            if len(received) >= 1024:
                break
            await asyncio.sleep(0.01)
        sequences = [msg.metadata.sequence.stream for msg in received]
        assert sequences == sorted(set(sequences)), "out of order or duplicated"
        info = await sub.consumer_info()
        assert info.num_pending == 0
        return len(received), b"".join(msg.data for msg in received)
    finally:
        await nc.close()


def test_an_ordered_consumer_receives_1024_of_1024_with_flow_control(system):
    count, data = run(ordered_consumer, system.urls[-1], replicas(system))
    assert count == 1024 and data == bytes(range(256)) * 4096


# --- KV keys with wildcard tokens (test_kv_simple, test_key_validation_bypass) ------------------------------
# nats-server stores a message published to `$KV.B.hello.*` (a KV purge of `hello.*`) under that literal
# subject, and its `Nats-Rollup: sub` purges what the subject matches as a filter; a key `x.>` written with
# `validate_keys=False` is stored and read back the same way. The expected answers are nats-server 2.15.1's.


async def purge_wildcard_key(url: str, replicas: int) -> dict:
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=10)
        kv = await js.create_key_value(bucket=unique("W"), history=5, replicas=replicas)
        await kv.put("hello", b"world")
        for i in range(10):
            await kv.put(f"hello.{i}", b"v")
        await kv.purge("hello.*")  # published to `$KV.<bucket>.hello.*`
        out: dict = {"values": (await kv.status()).values}
        try:
            await kv.get("hello.5")
        except NotFoundError as error:  # KeyNotFoundError is one
            out["hello.5"] = type(error).__name__
        out["hello"] = ((await kv.get("hello")).value, (await kv.get("hello")).revision)
        seq = await kv.put("x.>", b"a", validate_keys=False)
        got = await kv.get("x.>", validate_keys=False)
        seq2 = await kv.update("x.>", b"b", last=seq, validate_keys=False)
        await kv.delete("x.>", validate_keys=False)
        try:
            await kv.get("x.>", validate_keys=False)
        except KeyNotFoundError as error:
            out["x.> after delete"] = error.op
        out["x.>"] = (got.value, seq2 > seq)
        return out
    finally:
        await nc.close()


def test_a_kv_purge_of_a_wildcard_key_and_wildcard_keys_behave_as_on_nats_server(system):
    out = run(purge_wildcard_key, system.urls[0], replicas(system), timeout_s=120.0)
    assert out == {"values": 2, "hello.5": "KeyNotFoundError", "hello": (b"world", 1),
                   "x.> after delete": "DEL", "x.>": (b"a", True)}
