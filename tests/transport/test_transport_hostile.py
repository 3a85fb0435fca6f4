"""Hostile and broken peers: each gets its own connection closed and logged; nothing else is affected.

Method: a transport `n1` runs with a good peer `n2` (one shared connection, checked by local and remote
address). A raw socket then connects to `n1` and sends exactly one kind of bad input — bytes that are not
a frame, a length prefix beyond any bound, a bad CRC, an unknown kind, a HELLO from another cluster,
version or node, nothing at all — or first completes a valid handshake as configured peer `n3` and then
misbehaves. Each case must (1) see its connection closed (with a REFUSE carrying the reason where the
input was a well-formed but unacceptable HELLO), (2) leave a WARNING in the `jsraft.transport` log, and
(3) leave the n1–n2 connection exactly as it was, still delivering both ways.
"""

from __future__ import annotations

import logging
import struct
import uuid

import attrs
import pytest
import trio
from transport_helpers import CLUSTER, FAST, HOST, RawPeer, connect, start_node, wait_mesh, wait_until

from jsraft.raft import TimeoutNow
from jsraft.transport import PROTOCOL_VERSION, decode_message, encode_message
from jsraft.transport.wire import FrameKind, Hello, decode_hello, encode_data, encode_frame, encode_group, encode_hello

CONFIG = FAST  # handshake_timeout_s=0.5


def _on_message(inbox: list):
    def deliver(sender: str, group: str, payload: bytes) -> None:
        # Like the runtime: Raft groups' payloads are decoded, and a bad one raises RaftCodecError.
        inbox.append((sender, group, decode_message(payload) if group == "raft" else payload))
    return deliver


@pytest.fixture
async def cluster(nursery):
    inbox1: list = []
    n1 = await start_node(nursery, "n1", on_message=_on_message(inbox1))
    n1.inbox = inbox1
    n2 = await start_node(nursery, "n2")
    connect([n1, n2])
    await wait_mesh([n1, n2])
    # n3 is configured but not running: a raw socket may impersonate it.
    n1.transport.update_peers({"n2": n2.address, "n3": (HOST, 1)})
    return n1, n2


async def _good_peer_unaffected(n1, n2, before) -> None:
    after = n1.status("n2")
    assert after.connected and after.local_address == before.local_address, "the good link was never touched"
    assert after.protocol_errors == 0
    token = b"still-%d" % len(n2.inbox)
    assert n1.transport.send("n2", "meta", token) and n2.transport.send("n1", "meta", token)
    await wait_until(lambda: token in n2.received("n1") and token in n1.received("n2"), what="n1<->n2 traffic")


def _hello_frame(**fields) -> bytes:
    values = dict(cluster_name=CLUSTER, node_name="n3", storage_uuid=uuid.uuid4(), incarnation=5)
    values.update(fields)
    return encode_hello(Hello(**values))


def _flip_crc(frame: bytes) -> bytes:
    return frame[:4] + bytes([frame[4] ^ 0x01]) + frame[5:]


BAD_FIRST_BYTES = {
    "http request": b"GET / HTTP/1.1\r\nHost: jsraft\r\n\r\n",
    "nats client": b"CONNECT {\"verbose\":false}\r\nPING\r\n",
    "huge length prefix": struct.pack("<I", 0xFFFFFFFF) + b"\x00" * 16,
    "length below header": struct.pack("<I", 3) + b"\x00" * 16,
    "oversized handshake frame": encode_frame(FrameKind.HELLO, b"\x01\x00" + b"x" * 2000),
    "bad crc": _flip_crc(_hello_frame()),
    "unknown kind": encode_frame(99, b"hello"),  # type: ignore[arg-type]
    "data before hello": encode_data(encode_group("meta"), b"payload"),
    "truncated hello body": encode_frame(FrameKind.HELLO, b"\x01\x00\x05clu"),
}


@pytest.mark.parametrize("name", sorted(BAD_FIRST_BYTES))
async def test_malformed_first_bytes_close_only_that_connection(cluster, caplog, name):
    n1, n2 = cluster
    before = n1.status("n2")
    with caplog.at_level(logging.WARNING, logger="jsraft.transport"):
        raw = await RawPeer.connect(n1.address)
        await raw.send(BAD_FIRST_BYTES[name])
        frames = await raw.read_until_closed()
        await raw.aclose()
    assert frames == [], "no answer to a connection that never said a valid HELLO"
    assert "closing connection from" in caplog.text
    await _good_peer_unaffected(n1, n2, before)


@pytest.mark.parametrize("fields, reason", [
    (dict(cluster_name="another-cluster"), "cluster 'another-cluster'"),
    (dict(protocol_version=PROTOCOL_VERSION + 1), "protocol version"),
    (dict(node_name="n9"), "not a configured peer"),
    (dict(node_name="n1"), "own name"),
])
async def test_unacceptable_hello_is_refused_with_a_reason(cluster, caplog, fields, reason):
    n1, n2 = cluster
    before = n1.status("n2")
    with caplog.at_level(logging.WARNING, logger="jsraft.transport"):
        raw = await RawPeer.connect(n1.address)
        await raw.send(_hello_frame(**fields))
        frames = await raw.read_until_closed()
        await raw.aclose()
    assert [frame.kind for frame in frames] == [FrameKind.REFUSE]
    assert reason in frames[0].body.decode()
    assert "refused connection" in caplog.text and reason in caplog.text
    await _good_peer_unaffected(n1, n2, before)


async def test_no_handshake_within_the_timeout_is_closed(cluster, caplog):
    n1, n2 = cluster
    before = n1.status("n2")
    with caplog.at_level(logging.WARNING, logger="jsraft.transport"):
        raw = await RawPeer.connect(n1.address)
        started = trio.current_time()
        frames = await raw.read_until_closed(timeout_s=CONFIG.handshake_timeout_s * 4)
        elapsed = trio.current_time() - started
        await raw.aclose()
    assert frames == []
    assert elapsed >= CONFIG.handshake_timeout_s * 0.8, "closed by the handshake timeout, not earlier"
    assert "no handshake within" in caplog.text
    await _good_peer_unaffected(n1, n2, before)


async def _handshake_as_n3(n1) -> RawPeer:
    raw = await RawPeer.connect(n1.address)
    await raw.send(_hello_frame(node_name="n3"))
    answer = await raw.read_frame()
    assert answer.kind is FrameKind.HELLO and decode_hello(answer.body).node_name == "n1"
    return raw


def _oversized_header() -> bytes:
    return struct.pack("<IIB", CONFIG.frame_bytes_max + 1, 0, FrameKind.DATA)


BAD_AFTER_HANDSHAKE = {
    "length beyond frame_bytes_max": _oversized_header() + b"\x00" * 64,
    "bad crc on data": _flip_crc(encode_data(encode_group("meta"), b"payload")),
    "empty group name": encode_frame(FrameKind.DATA, b"\x00\x00payload"),
    "group length past the body": encode_frame(FrameKind.DATA, b"\xff\x00meta"),
    "group name not utf-8": encode_frame(FrameKind.DATA, b"\x02\x00\xff\xfe"),
    "second hello": _hello_frame(node_name="n3"),
    "malformed raft message": encode_data(encode_group("raft"), b"\x01\x07\x02n3"),
}


@pytest.mark.parametrize("name", sorted(BAD_AFTER_HANDSHAKE))
async def test_known_peer_breaking_the_protocol_is_closed(cluster, caplog, name):
    n1, n2 = cluster
    before = n1.status("n2")
    with caplog.at_level(logging.WARNING, logger="jsraft.transport"):
        raw = await _handshake_as_n3(n1)
        await wait_until(lambda: n1.status("n3").connected, what="n1 to adopt the impersonated n3")
        good = encode_message(TimeoutNow(from_id="n3", to_id="n1", term=4))
        await raw.send(encode_data(encode_group("raft"), good) + BAD_AFTER_HANDSHAKE[name])
        frames = await raw.read_until_closed()
        await raw.aclose()
    assert all(frame.kind is FrameKind.PING for frame in frames)
    assert ("n3", "raft", TimeoutNow(from_id="n3", to_id="n1", term=4)) in n1.inbox, "good frame before the bad one"
    await wait_until(lambda: not n1.status("n3").connected, what="n1 to drop n3")
    assert n1.status("n3").protocol_errors == 1
    assert "closed after a protocol error" in caplog.text
    await _good_peer_unaffected(n1, n2, before)


async def test_handshake_flood_is_bounded(nursery, caplog):
    config = attrs.evolve(FAST, inbound_handshakes_max=3, handshake_timeout_s=5.0, idle_timeout_s=10.0)
    n1 = await start_node(nursery, "n1", config=config)
    waiting = [await RawPeer.connect(n1.address) for _ in range(3)]
    await wait_until(lambda: n1.transport.inbound_handshakes_pending == 3, what="3 pending handshakes")
    with caplog.at_level(logging.WARNING, logger="jsraft.transport"):
        extra = await RawPeer.connect(n1.address)
        assert await extra.read_until_closed(timeout_s=2.0) == [], "closed at once, long before the timeout"
    assert "handshakes already pending" in caplog.text
    assert n1.transport.inbound_handshakes_pending == 3
    for raw in [*waiting, extra]:
        await raw.aclose()
    await wait_until(lambda: n1.transport.inbound_handshakes_pending == 0, what="closed handshakes released")


async def test_known_peer_that_falls_silent_gets_pings_and_is_closed(cluster, caplog):
    # Link invariant 2, kept by the link's watchdog: n1 PINGs an idle link every keepalive_s, and closes
    # it once nothing has come from the peer for idle_timeout_s, with no deadline on any single read.
    n1, n2 = cluster
    before = n1.status("n2")
    with caplog.at_level(logging.WARNING, logger="jsraft.transport"):
        raw = await _handshake_as_n3(n1)
        started = trio.current_time()
        frames = await raw.read_until_closed(timeout_s=CONFIG.idle_timeout_s * 4)
        lasted = trio.current_time() - started
        await raw.aclose()
    assert lasted >= CONFIG.idle_timeout_s, f"closed after {lasted:.2f} s, before the idle timeout"
    pings = [frame for frame in frames if frame.kind is FrameKind.PING]
    assert len(pings) == len(frames) and len(pings) >= 3, f"keepalive PINGs while silent: {frames}"
    await wait_until(lambda: "nothing received" in (n1.status("n3").last_error or ""), what="n1 to close n3")
    await _good_peer_unaffected(n1, n2, before)
