"""A core-NATS cluster from bare `--routes` (nats-server's spelling, no node names), on real processes.

Method: three real `python -m jsraft serve` processes on free loopback ports, started as nats-py's own
cluster tests start nats-server: no names, no `-js`, `--cluster_listen nats://127.0.0.1:PORT`, and
`--routes` holding only the first node's cluster URL — for the first node that is a route to itself,
which must be ignored. A real nats-py client connects to the first node before the others exist; it
must learn their client URLs from INFO's `connect_urls` sent to it while connected (its
`discovered_server_cb` counts them, its server pool holds them). Then requests must cross nodes: a
responder on the third node answers a client on the first (the seed, which the third dialed) and one on
the second — the second and third know each other only by route gossip, and a routed message is never
forwarded a second time, so that reply proves they linked directly (a full mesh). Every wait is a poll
with a deadline (a request that finds no responder yet is retried until the deadline), nothing sleeps
and hopes; every process started is stopped.
"""

from __future__ import annotations

import asyncio
import socket
import time

import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from test_serve_like_nats import poll, ports_file, read_until_ready, serve, stop

DEADLINE_S = 30.0


def free_port() -> int:
    """A loopback port nothing listens on (bound, read, closed), for a cluster listener named up front."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_node(tmp_path, index: int, cluster_port: int, seed_port: int, *extra: str):
    ports_dir = tmp_path / f"ports{index}"
    ports_dir.mkdir()
    process = serve("-p", "-1", "-a", "127.0.0.1", "--cluster_listen", f"nats://127.0.0.1:{cluster_port}",
                    "--routes", f"nats://127.0.0.1:{seed_port}", "--cluster_name", "CLUSTER",
                    "--ports_file_dir", str(ports_dir), *extra)
    read_until_ready(process)
    url = poll(lambda: ports_file(ports_dir, process.pid), "the ports file")["nats"][0]
    return process, url


async def until(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def request_until_answered(nc, subject: str) -> bytes:
    """A request, retried while the responder's interest has not reached this client's node yet."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            return (await nc.request(subject, b"ping", timeout=2)).data
        except (NoRespondersError, NatsTimeoutError):
            assert time.monotonic() < deadline, f"no answer on {subject} within {DEADLINE_S}s"
            await asyncio.sleep(0.05)


async def discover_and_cross(first_url: str, start_others, **auth: str) -> None:
    discovered = 0

    async def on_discovered() -> None:
        nonlocal discovered
        discovered += 1

    first = await nats.connect(first_url, discovered_server_cb=on_discovered, allow_reconnect=False, **auth)
    clients = [first]
    try:
        others = await asyncio.to_thread(start_others)  # the second and third node, seeded by the first
        wanted = {url.removeprefix("nats://") for url in [first_url, *others]}
        await until(lambda: wanted <= {server.netloc for server in first.servers},
                    "the first node's client to learn every node's URL")
        assert discovered >= 1 and len(first.discovered_servers) == 2
        second = await nats.connect(others[0], allow_reconnect=False, **auth)
        third = await nats.connect(others[1], allow_reconnect=False, **auth)
        clients += [second, third]

        async def answer(msg) -> None:
            await third.publish(msg.reply, b"pong from the third node")

        await third.subscribe("svc", cb=answer)
        await third.flush()
        assert await request_until_answered(first, "svc") == b"pong from the third node"
        assert await request_until_answered(second, "svc") == b"pong from the third node"
    finally:
        for client in clients:
            await client.close()


def test_three_nodes_from_one_seed_route_discover_each_other_and_route_requests(tmp_path):
    cluster_ports = [free_port() for _ in range(3)]
    processes = []
    try:
        # The first node's only route is itself (ignored), as in nats-py's ClusteringDiscoveryAuthTestCase.
        first, first_url = start_node(tmp_path, 1, cluster_ports[0], cluster_ports[0], "--user", "foo",
                                      "--pass", "barbarbar")
        processes.append(first)

        def start_others() -> list[str]:
            urls = []
            for index in (2, 3):
                process, url = start_node(tmp_path, index, cluster_ports[index - 1], cluster_ports[0],
                                          "--user", "foo", "--pass", "barbarbar")
                processes.append(process)
                urls.append(url)
            return urls

        scenario = discover_and_cross(first_url, start_others, user="foo", password="barbarbar")
        asyncio.run(asyncio.wait_for(scenario, DEADLINE_S * 3))
    finally:
        for process in processes:
            stop(process)


def test_bare_routes_with_jetstream_exit_2_naming_why(tmp_path):
    process = serve("-p", "-1", "-a", "127.0.0.1", "-js", f"-sd={tmp_path / 'js'}", "--routes",
                    "nats://127.0.0.1:1")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and "needs its node's name" in stderr, stderr
    assert not (tmp_path / "js").exists()
