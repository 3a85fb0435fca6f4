"""Bounded send queues: a peer that stops reading makes `send()` return False, never block or grow memory.

Method: `n1` is configured with peers `n2` and `n3`. `n3` is a real transport. `n2` is a raw socket that
completes the handshake and then never reads again — the TCP window fills, `n1`'s writer blocks in
`send_all`, and the queue behind it fills. The test sends 32 KiB payloads to `n2` (with a checkpoint
between sends so the writer can fill the kernel buffers) until the first refusal, checking the queue's
frame and byte bounds after every call; then it calls `send()` a thousand more times without yielding at
all — each must return False at once, be counted as a drop, and leave the queue at its bound. Meanwhile
`n3` must keep receiving. Finally the stalled link must be closed by the idle timeout (link invariant 2),
which clears the queue.
"""

from __future__ import annotations

import uuid

import attrs
import trio
from transport_helpers import FAST, HOST, connect, start_node, wait_mesh, wait_until

from jsraft.transport import TransportConfig
from jsraft.transport.wire import FRAME_HEADER_BYTES, FrameDecoder, FrameKind, Hello, encode_group, encode_hello

CONFIG = attrs.evolve(FAST, frame_bytes_max=64 << 10, send_queue_frames_max=16, send_queue_bytes_max=256 << 10,
                      keepalive_s=0.1, idle_timeout_s=1.0)
PAYLOAD = b"p" * (32 << 10)


async def _stalled_peer(listener: trio.SocketListener, cluster: str, task_status=trio.TASK_STATUS_IGNORED):
    """Accept one connection, answer the handshake as n2, then never read again."""
    task_status.started()
    stream = await listener.accept()
    decoder = FrameDecoder()
    while (frame := decoder.next_frame()) is None:
        decoder.feed(await stream.receive_some(1024))
    assert frame.kind is FrameKind.HELLO
    await stream.send_all(encode_hello(Hello(cluster_name=cluster, node_name="n2", storage_uuid=uuid.uuid4(),
                                             incarnation=2)))
    await trio.sleep_forever()  # stalled: holds the socket open, reads nothing


async def test_stalled_receiver_makes_send_return_false_with_bounded_memory(nursery):
    assert isinstance(CONFIG, TransportConfig)
    listener = (await trio.open_tcp_listeners(0, host=HOST))[0]
    n1 = await start_node(nursery, "n1", config=CONFIG)
    await nursery.start(_stalled_peer, listener, n1.transport.hello.cluster_name)
    n3 = await start_node(nursery, "n3", config=CONFIG)
    connect([n1, n3])
    await wait_mesh([n1, n3])
    n1.transport.update_peers({"n2": listener.socket.getsockname()[:2], "n3": n3.address})
    await wait_until(lambda: n1.status("n2").connected, what="n1 connected to the stalled peer")

    def bounded() -> bool:
        status = n1.status("n2")
        return (status.queued_frames <= CONFIG.send_queue_frames_max
                and status.queued_bytes <= CONFIG.send_queue_bytes_max)

    accepted = 0
    with trio.fail_after(10):
        while n1.transport.send("n2", "S-BIG", PAYLOAD):
            accepted += 1
            assert bounded()
            await trio.sleep(0)  # a checkpoint: let the writer push frames into the kernel buffers
    full = n1.status("n2")
    assert full.connected and full.dropped == 1
    frame_bytes = len(PAYLOAD) + FRAME_HEADER_BYTES + len(encode_group("S-BIG"))
    assert (full.queued_frames == CONFIG.send_queue_frames_max
            or full.queued_bytes + frame_bytes > CONFIG.send_queue_bytes_max), "refused because the queue is full"
    assert accepted >= full.queued_frames

    # Not one yield from here: a blocking send() would hang, an unbounded one would grow the queue.
    results = [n1.transport.send("n2", "S-BIG", PAYLOAD) for _ in range(1000)]
    assert not any(results)
    after = n1.status("n2")
    assert after.dropped == 1001 and bounded()
    assert (after.queued_frames, after.queued_bytes) == (full.queued_frames, full.queued_bytes)

    # The stalled peer costs nothing to the others.
    assert n1.transport.send("n3", "meta", b"unaffected")
    await wait_until(lambda: n3.received("n1") == [b"unaffected"], what="n1->n3 while n2 is stalled")

    # The stalled link is closed by the idle timeout, and its queued frames are counted as dropped.
    await wait_until(lambda: not n1.status("n2").connected, timeout_s=CONFIG.idle_timeout_s * 3,
                     what="the stalled link to close")
    closed = n1.status("n2")
    assert closed.queued_frames == 0 and closed.queued_bytes == 0
    assert closed.dropped >= 1001 + full.queued_frames
    assert "has not read" in closed.last_error or "nothing received" in closed.last_error
