"""The monitoring HTTP listener (`jsraft.server.ops.monitor.Monitor`) on a real node, over real TCP.

Method: a single real node (`jsraft.open_node`, real files under `tmp_path`, loopback listeners on port 0)
with a `Monitor` started next to it in the test's nursery. Requests are raw bytes over a trio TCP stream
(so malformed requests can be sent at all); the answers' status lines and JSON bodies are checked against
the node's own state (the stream store's state tuple, the meta group's leader). Bad requests must be
answered 4xx and leave the monitor serving. Readiness (`/varz` 503 until a meta leader is known and the
node caught up) is shown with one voter of three on fixed free cluster ports, then a second one.
"""

from __future__ import annotations

import json
import socket

import pytest
import trio

import jsraft
from jsraft.server import NodeConfig
from jsraft.server.ops import monitor as monitor_module
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.ops.monitor import HttpError, Monitor, format_uptime, parse_request_head


def config(tmp_path) -> NodeConfig:
    return NodeConfig(name="m1", store_dir=str(tmp_path / "data"), cluster_name="mon", cluster_port=0,
                      client_port=0, tick_ms=20, election_ticks=5, test_mode=True, cluster_listen=True)


async def raw_request(address: tuple[str, int], data: bytes, *, close_write: bool = True) -> tuple[int, dict, bytes]:
    """Send `data`, read the whole answer; `(status, headers, body)`."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(data)
        if close_write:
            await stream.send_eof()
        answer = bytearray()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                answer += chunk
    head, _, body = bytes(answer).partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert int(headers["Content-Length"]) == len(body) or data.startswith(b"HEAD ")
    return status, headers, body


async def get(address: tuple[str, int], path: str) -> tuple[int, dict]:
    status, _, body = await raw_request(address, f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
    return status, json.loads(body)


async def test_views_follow_the_node(tmp_path):
    async with jsraft.open_node(config(tmp_path)) as node:
        monitor = Monitor(node.monitor_parts, "127.0.0.1", 0)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(monitor.run)
            assert await get(address, "/healthz") == (503, {"status": "unavailable", "status_code": 503,
                                                            "error": "node is not running"})
            assert (await get(address, "/jsz"))[0] == 503
            monitor.mark_running()
            assert await get(address, "/healthz") == (200, {"status": "ok"})

            js = node.jetstream()
            await js.add_stream(name="ORDERS", subjects=["ORDERS.*"], num_replicas=1)
            for i in range(25):
                await js.publish(f"ORDERS.{i % 3}", f"order {i}".encode())
            await js.delete_msg("ORDERS", 3)
            status, jsz = await get(address, "/jsz")
            assert status == 200
            assert jsz["meta_cluster"]["leader"] == "m1" and jsz["meta_cluster"]["cluster_size"] == 1
            assert (jsz["streams"], jsz["messages"], jsz["api"]["level"]) == (1, 24, 2)  # nats-server's counts
            (stream,) = jsz["jsraft"]["streams"]  # jsraft's own view, under its own key
            state = node.streams.replicas["ORDERS"].store.state()
            assert (stream["name"], stream["leader"], stream["replicas"]) == ("ORDERS", "m1", ["m1"])
            assert stream["local"]["first_seq"] == state.first_seq == 1
            assert stream["local"]["last_seq"] == state.last_seq == 25
            assert stream["local"]["messages"] == state.msgs == 24
            assert stream["local"]["digest"] == f"{state.digest:016x}"
            assert stream["local"]["health"] == "current"

            status, varz = await get(address, "/varz")
            assert status == 200
            assert (varz["server_name"], varz["port"], varz["http_port"]) == ("m1", node.client_port, address[1])
            assert varz["jsraft"]["client_listener"] is True and node.client_port != 0  # port 0: a free port
            assert varz["cluster"]["name"] == "mon" and varz["cluster"]["port"] == node.cluster_address[1]
            assert varz["jsraft"]["running"] is True and varz["uptime"].endswith("s") and varz["jsraft"]["uptime_s"] >= 0
            assert varz["in_msgs"] == 0 and varz["jetstream"]["config"]["store_dir"] == node.config.store_dir

            monitor.mark_stopped()
            assert (await get(address, "/healthz"))[0] == 503
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("request_bytes, status", [
    (b"garbage\r\n\r\n", 400),
    (b"GET /varz HTTP/2.0\r\n\r\n", 400),
    (b"GET varz HTTP/1.0\r\n\r\n", 400),
    (b"GET /v\xc3\xa4rz HTTP/1.0\r\n\r\n", 400),
    (b"GET /nope HTTP/1.0\r\n\r\n", 404),
    (b"POST /jsz HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}", 405),
    (b"GET /healthz HTTP/1.0\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n", 431),
    (b"GET /heal", 400),  # truncated by EOF
])
async def test_bad_requests_are_refused_and_the_monitor_keeps_serving(tmp_path, request_bytes, status):
    async with jsraft.open_node(config(tmp_path)) as node:
        monitor = Monitor(node.monitor_parts, "127.0.0.1", 0)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(monitor.run)
            monitor.mark_running()
            got, headers, body = await raw_request(address, request_bytes)
            assert got == status and "error" in json.loads(body)
            if status == 405:
                assert headers["Allow"] == "GET, HEAD"
            assert await get(address, "/healthz?verbose=1") == (200, {"status": "ok"})
            nursery.cancel_scope.cancel()


async def test_slow_and_silent_clients(tmp_path, monkeypatch):
    monkeypatch.setattr(monitor_module, "REQUEST_TIMEOUT_S", 0.3)
    async with jsraft.open_node(config(tmp_path)) as node:
        monitor = Monitor(node.monitor_parts, "127.0.0.1", 0)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(monitor.run)
            monitor.mark_running()
            silent = await trio.open_tcp_stream(*address)  # connects, sends nothing, closes
            await silent.aclose()
            got, _, _ = await raw_request(address, b"GET /varz HTTP/1.0\r\n", close_write=False)
            assert got == 408  # a head that never ends is cut off, not waited on for ever
            status, headers, body = await raw_request(address, b"HEAD /varz HTTP/1.0\r\n\r\n")
            assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
            assert (await get(address, "/"))[1]["endpoints"] == ["/healthz", "/varz", "/jsz", "/connz", "/metrics"]
            assert (await get(address, "/varz/"))[0] == 200
            nursery.cancel_scope.cancel()


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


async def test_varz_waits_until_the_node_is_ready(tmp_path):
    """One voter of three has no meta leader: alive (/healthz?js-enabled-only 200) but not ready (/varz and
    /healthz 503, with the reason). A second voter makes a quorum; /varz turns 200 once a leader is known and this node caught up,
    and stays 200 (latched) after that."""
    ports = dict(zip(("r1", "r2", "r3"), free_ports(3)))

    def voter(name: str) -> NodeConfig:
        peers = {other: f"127.0.0.1:{port}" for other, port in ports.items() if other != name}
        return NodeConfig(name=name, store_dir=str(tmp_path / name), cluster_name="ready", cluster_port=ports[name],
                          client_port=0, peers=peers, tick_ms=20, election_ticks=5, test_mode=True)

    async with jsraft.open_node(voter("r1"), ready_timeout_s=None) as node:
        monitor = Monitor(node.monitor_parts, "127.0.0.1", 0)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(monitor.run)
            monitor.mark_running()
            # Alive (JetStream is enabled) but not current: nats-server's /healthz parameters tell them apart.
            assert await get(address, "/healthz?js-enabled-only=true") == (200, {"status": "ok"})
            assert await get(address, "/healthz") == (503, {
                "status": "unavailable", "status_code": 503,
                "error": "JetStream is not current: no meta leader is known"})
            status, body = await get(address, "/varz")
            assert (status, body) == (503, {"server_name": "r1", "error": "node is not ready: no meta leader is known"})
            async with jsraft.open_node(voter("r2"), ready_timeout_s=None):
                with trio.fail_after(20):
                    while (status := (await get(address, "/varz"))[0]) == 503:
                        await trio.sleep(0.02)
                assert status == 200
                # Ready is latched for the meta leader's term (readiness invariant 2): a meta entry that
                # commits after /varz said ready does not make the node unready again. Only a new
                # leadership (an election under load) starts the rule over; then it is not asserted.
                term = meta_term(node)
                reason = node.readiness.reason()
                assert reason is None or meta_term(node) != term, reason
                assert node.meta_leader() in ("r1", "r2")
            # r2 is gone: no quorum any more, but /varz keeps describing the node (monitor invariant 3).
            with trio.fail_after(20):
                while node.meta_leader() is not None:
                    await trio.sleep(0.02)
            assert node.readiness.reason() is not None
            assert (await get(address, "/varz"))[0] == 200
            nursery.cancel_scope.cancel()


def meta_term(node) -> tuple:
    status = node.runtime.status(META_GROUP).raft
    return status.leader_id, status.current_term


def test_request_parsing_and_uptime():
    assert parse_request_head(b"GET /jsz?streams=true HTTP/1.1\r\nHost: a\r\n\r\n") == ("GET", "/jsz")
    assert parse_request_head(b"HEAD / HTTP/1.0\n\n") == ("HEAD", "/")
    for bad in (b"", b"GET\r\n", b"get /jsz HTTP/1.0", b"GET /jsz HTTP/1.0 extra", b"GET /a b HTTP/1.0"):
        with pytest.raises(HttpError) as info:
            parse_request_head(bad)
        assert info.value.status == 400
    assert [format_uptime(s) for s in (0, 12.7, 60, 3725, 90061)] == ["0s", "12s", "1m0s", "1h2m5s", "1d1h1m1s"]
