"""Large DATA frames written from their pieces (`GatheredFrame`): the same bytes, never joined on plain TCP.

Method: `_send_vectored` against a fake `sendmsg` that takes a random number of bytes per call (splitting
pieces anywhere, never more than `IOV_PIECES_MAX` pieces a call) must hand over exactly the pieces' join;
then real transports on loopback (plain TCP, and mutual TLS, where the pieces are joined once) must deliver
large frames built from `bytes` parts, mixed with small frames, intact and in order, counting their bytes.
"""

from __future__ import annotations

import random
import uuid

import attrs
import pytest
import trio
from transport_helpers import CLUSTER, FAST, HOST, Node, connect, start_mesh, wait_mesh, wait_until

from jsraft.server.settings.auth_config import TlsConfig
from jsraft.server.nats.tls import TlsContexts
from jsraft.testing.certs import TestCa
from jsraft.transport import Transport
from jsraft.transport import link
from jsraft.transport.link import IOV_PIECES_MAX, _send_vectored
from jsraft.transport.wire import (
    GATHER_FRAME_BYTES_MIN, FrameDecoder, FrameKind, GatheredFrame, decode_data, encode_frame, encode_frame_parts,
    encode_group,
)

BIG = attrs.evolve(FAST, frame_bytes_max=8 << 20, send_queue_bytes_max=64 << 20)


@pytest.mark.parametrize("seed", range(20))
async def test_vectored_sends_hand_over_exactly_the_pieces_in_order(seed):
    rng = random.Random(seed)
    pieces = [rng.randbytes(rng.choice([0, 1, 7, 300, 5000, 70000])) for _ in range(rng.randint(1, 1500))]
    out = bytearray()
    calls = []

    async def sendmsg(buffers) -> int:
        calls.append(len(buffers))
        assert 1 <= len(buffers) <= IOV_PIECES_MAX
        joined = b"".join(buffers)
        taken = rng.randint(1, len(joined)) if joined and rng.random() < 0.7 else len(joined)
        out.extend(joined[:taken])
        return taken

    await _send_vectored(sendmsg, list(pieces))
    assert bytes(out) == b"".join(pieces)


def test_a_gathered_frame_is_the_joined_frame_in_pieces():
    parts = [encode_group("group"), b"a" * 100_000, b"", b"tail"]
    frame = GatheredFrame(encode_frame_parts(FrameKind.DATA, parts))
    joined = encode_frame(FrameKind.DATA, *parts)
    assert len(frame) == len(joined) and b"".join(frame.parts) == joined
    assert frame.parts[1:] == parts and all(a is b for a, b in zip(frame.parts[1:], parts))  # not copied
    decoder, position, frame = FrameDecoder(1 << 20), 0, None
    while frame is None:
        step = decoder.read_size()
        decoder.feed(joined[position:position + step])
        position += step
        frame = decoder.next_frame()
    group, payload = decode_data(frame.body)
    assert (group, bytes(payload)) == ("group", b"".join(parts[1:]))


def _payloads(rng: random.Random) -> list[list[bytes]]:
    """Sends as lists of parts: large ones of several `bytes` parts (gathered), small ones, a large one
    with a bytearray part (joined: a mutable piece is never queued as it is)."""
    sends = []
    for i in range(40):
        if i % 3 == 0:
            sends.append([b"head%d" % i, rng.randbytes(GATHER_FRAME_BYTES_MIN), rng.randbytes(rng.randint(0, 300_000))])
        elif i % 7 == 1:
            sends.append([bytearray(rng.randbytes(GATHER_FRAME_BYTES_MIN + 10))])
        else:
            sends.append([rng.randbytes(rng.randint(1, 2000))])
    return sends


async def _exchange(n1, n2, sends: list[list[bytes]]) -> None:
    sent_before = n1.status("n2").bytes_sent
    for parts in sends:
        assert n1.transport.send_parts("n2", "S-BIG", parts)
        if len(parts) > 1:
            await trio.sleep(0)  # let the writer take a few on its own, a few together
    want = [b"".join(parts) for parts in sends]
    await wait_until(lambda: len(n2.received("n1", "S-BIG")) == len(want), timeout_s=20, what="every frame")
    assert [bytes(p) for p in n2.received("n1", "S-BIG")] == want
    assert n1.status("n2").bytes_sent - sent_before == sum(
        len(encode_frame(FrameKind.DATA, encode_group("S-BIG"), *parts)) for parts in sends)


async def test_large_frames_of_bytes_parts_arrive_intact_over_plain_tcp(nursery, monkeypatch):
    vectored = []

    async def counted(sendmsg, pieces) -> None:
        vectored.append(len(pieces))
        await _send_vectored(sendmsg, pieces)
    monkeypatch.setattr(link, "_send_vectored", counted)
    n1, n2 = await start_mesh(nursery, ["n1", "n2"], config=BIG)
    await _exchange(n1, n2, _payloads(random.Random(1)))
    assert vectored, "the large frames were written from their pieces"


async def test_large_frames_arrive_intact_over_tls(nursery, tmp_path):
    ca = TestCa(tmp_path / "ca")
    cert, key = ca.issue("node")
    tls = TlsConfig(cert_file=cert, key_file=key, ca_file=ca.ca_file)
    nodes = []
    for name in ("n1", "n2"):
        holder: list = []
        transport = Transport(name, CLUSTER, uuid.uuid4(), HOST, 0, {}, config=BIG,
                              on_message=lambda sender, group, payload, holder=holder: holder[0].inbox.append(
                                  (sender, group, bytes(payload))),
                              tls=TlsContexts(tls, "cluster_tls", mutual=True))
        node = Node(transport)
        holder.append(node)

        async def run(task_status=trio.TASK_STATUS_IGNORED, node=node) -> None:
            try:
                with node.scope:
                    await node.transport.run(task_status=task_status)
            finally:
                node.stopped.set()
        await nursery.start(run)
        nodes.append(node)
    connect(nodes)
    await wait_mesh(nodes, timeout_s=15)
    await _exchange(nodes[0], nodes[1], _payloads(random.Random(2)))
