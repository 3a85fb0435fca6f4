"""A node short of file descriptors refuses what it cannot open and serves the rest; it never dies of it
(`server/groups/replica_descriptors.py`, `streams` invariant 11, `meta_service` invariant 6).

Method: real `jsraft serve` processes on free loopback ports, started with a low open-file limit (soft and
hard, set in the child by `preexec_fn`, so raising the soft limit to the hard one changes nothing), driven
through nats-py. Every wait polls a condition with a deadline.

  - Creates past the limit: streams are created until one is refused; the refusal is nats-server's
    `JSInsufficientResourcesErr` (503, 10023), and so is a KV bucket's and an object store's create. The
    node still serves: an earlier stream takes a publish and serves it back, a new client connects.
  - A store directory with more streams than a lowered limit allows (made under the normal limit, each
    stream with acknowledged messages): the node starts, logs one ERROR naming the limit and the remedy
    for each stream it does not open, serves the ones it opened (a new client, a publish). Restarted
    under the normal limit, every stream is back with every acknowledged message, counted.
"""

from __future__ import annotations

import asyncio
import re
import resource
import signal
import subprocess
import sys
import time

import nats
import pytest
from nats.js.errors import APIError

from test_serve import free_ports, get, poll, stop

DEADLINE_S = 60.0
CREATES_MAX = 200  # a bound on the first test's create loop: far above what its limit allows
LOW_LIMIT = 200  # room for a few dozen replicas beside the client reserve (64)
START_LIMIT = 120  # room for about a dozen replicas: fewer than `STREAMS`
STREAMS = 30
MESSAGES = 3
NOT_OPENED = re.compile(r"\[ERR\] .*stream (\S+): replica not opened on this node, out of file descriptors")

pytestmark = pytest.mark.skipif(not hasattr(resource, "RLIMIT_NOFILE"), reason="needs RLIMIT_NOFILE")


class Server:
    """`jsraft serve -js` on free ports, its stderr kept in a file, optionally under an open-file limit."""

    def __init__(self, tmp_path) -> None:
        self.client, self.monitor = free_ports(2)
        self.store_dir = str(tmp_path / "store")
        self.log_path = tmp_path / "serve.log"
        self.process: subprocess.Popen | None = None

    def start(self, limit: int | None = None) -> None:
        def limited() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        self.log_path.write_text("")
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jsraft", "serve", "-js", "-sd", self.store_dir, "-p", str(self.client),
                 "-m", str(self.monitor)], stdout=subprocess.DEVNULL, stderr=log, preexec_fn=limited)
        poll(lambda: self.alive() and get(self.monitor, "/varz")[0] == 200, DEADLINE_S, "serving")

    def alive(self) -> bool:
        assert self.process is not None
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            code, _ = stop(self.process, signal.SIGTERM)
            assert code == 0, self.log()
        self.process = None

    def local_streams(self) -> set[str]:
        status, body = get(self.monitor, "/jsz")
        entries = (body or {}).get("jsraft", {}).get("streams", []) if status == 200 else []
        return {entry["name"] for entry in entries if entry.get("local") is not None}  # a replica runs here


@pytest.fixture
def server(tmp_path):
    made = Server(tmp_path)
    try:
        yield made
    finally:
        if made.process is not None and made.process.poll() is None:
            stop(made.process, signal.SIGKILL)


async def connect(server: Server):
    return await nats.connect(f"nats://127.0.0.1:{server.client}", connect_timeout=5, max_reconnect_attempts=0)


def in_asyncio(scenario, *args):
    return asyncio.run(asyncio.wait_for(scenario(*args), 240))


async def refused(create) -> APIError:
    with pytest.raises(APIError) as caught:
        await create
    return caught.value


def test_creates_past_the_limit_are_refused_and_the_node_serves_on(server):
    server.start(LOW_LIMIT)

    async def scenario() -> None:
        nc = await connect(server)
        js = nc.jetstream(timeout=10)
        created, refusal = 0, None
        for i in range(CREATES_MAX):
            try:
                await js.add_stream(name=f"S{i}", subjects=[f"s{i}"])
            except APIError as error:
                refusal = error
                break
            created += 1
        assert refusal is not None, f"{CREATES_MAX} creates under a limit of {LOW_LIMIT}, none refused"
        assert created > 0
        assert (refusal.code, refusal.err_code, refusal.description) == (503, 10023, "insufficient resources")
        for create in (js.create_key_value(bucket="KV"), js.create_object_store(bucket="OBJ")):
            error = await refused(create)
            assert (error.code, error.err_code) == (503, 10023)
        ack = await js.publish("s0", b"after the refusal")
        assert (await js.get_msg("S0", ack.seq)).data == b"after the refusal"
        await nc.close()
        newcomer = await connect(server)  # a new client still gets a descriptor
        assert (await newcomer.jetstream(timeout=10).stream_info("S0")).state.messages == 1
        await newcomer.close()

    in_asyncio(scenario)
    assert server.alive(), server.log()
    assert "[ERR]" not in server.log()  # refused up front: nothing ran out


def test_a_store_with_more_streams_than_the_limit_allows_serves_some_and_loses_none(server):
    server.start()

    async def fill() -> dict[str, int]:
        nc = await connect(server)
        js = nc.jetstream(timeout=10)
        acked: dict[str, int] = {}
        for i in range(STREAMS):
            await js.add_stream(name=f"S{i}", subjects=[f"s{i}"])
            for k in range(MESSAGES):
                await js.publish(f"s{i}", f"m{k}".encode())
            acked[f"S{i}"] = MESSAGES
        await nc.close()
        return acked

    acked = in_asyncio(fill)
    server.stop()

    server.start(START_LIMIT)
    everything = set(acked)

    def settled() -> tuple[set[str], set[str]] | None:
        opened, not_opened = server.local_streams(), set(NOT_OPENED.findall(server.log()))
        return (opened, not_opened) if opened | not_opened == everything else None

    opened, not_opened = poll(settled, DEADLINE_S, "every stream opened or logged as not opened")
    assert opened and not_opened and not opened & not_opened, (opened, not_opened)
    errors = [line for line in server.log().splitlines() if NOT_OPENED.search(line)]
    assert len(errors) == len(not_opened), "one ERROR per stream not opened"
    assert all(f"limit {START_LIMIT}" in line and "ulimit -n" in line for line in errors), errors[0]

    async def serve_opened() -> None:
        nc = await connect(server)  # the reserve kept a descriptor for it
        js = nc.jetstream(timeout=10)
        name = sorted(opened)[0]
        assert (await js.stream_info(name)).state.messages == acked[name]
        await js.publish(f"s{name[1:]}", b"while short")
        acked[name] += 1
        await nc.close()

    in_asyncio(serve_opened)
    assert server.alive(), server.log()
    server.stop()

    server.start()

    async def count() -> dict[str, int]:
        nc = await connect(server)
        js = nc.jetstream(timeout=10)
        deadline = time.monotonic() + DEADLINE_S
        counted: dict[str, int] = {}
        while set(counted) != everything and time.monotonic() < deadline:
            for name in everything - set(counted):
                try:
                    counted[name] = (await js.stream_info(name)).state.messages
                except (APIError, nats.errors.TimeoutError):
                    await asyncio.sleep(0.1)
        await nc.close()
        return counted

    assert in_asyncio(count) == acked
    assert server.alive(), server.log()
