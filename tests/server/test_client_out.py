"""A client connection's outbound half (`server.nats.client_out.ConnOutbound`): bytes queued while the
writer sleeps leave from the caller at once (its invariant 4), a burst after them goes out in one write
of the writer's, the order is kept, and a send the socket takes only in part leaves the rest queued. A
consumer pass's run (`deliver_run(..., now=True)`) leaves at once whenever nothing is queued or in
flight, even with the writer awake, and otherwise waits behind what is. What stayed queued is noted for the
end of the Ready cycle (invariant 5), whose flush sends it from there — a PubAck queued right after a push
delivery woke the writer — unless the writer holds bytes in flight.

Method: `ConnOutbound` mixed into a minimal connection that owns a real `trio.SocketStream`, one end of a
connected TCP pair on loopback; the test reads the other end with a plain non-blocking socket. "At once"
is checked without any scheduling point between the `send` and the read (the writer task cannot have run,
so the bytes came from the caller), and the writer's behaviour by running it as a task and polling for
the bytes with a deadline. The slow-consumer bound and write deadline are covered with a real node in
`test_client_raw.py`.
"""

from __future__ import annotations

import socket

import attrs
import trio

from jsraft.server.nats.client_out import ConnOutbound
from jsraft.server.nats.client_subs import ClientSubscription


@attrs.define
class _Options:
    pending_bytes_max: int = 64 << 20
    write_deadline_s: float = 10.0


@attrs.define
class _Stats:
    out_msgs: int = 0
    out_bytes: int = 0


@attrs.define
class _Server:
    stats: _Stats = attrs.Factory(_Stats)
    unflushed: set = attrs.Factory(set)  # what `ClientServer.flush_queued` sends at a cycle's end


class _Conn(ConnOutbound):
    headers = True
    out_msgs = out_bytes = 0

    def __init__(self, stream: trio.SocketStream) -> None:
        self.options, self.stream, self.closed, self.server = _Options(), stream, False, _Server()
        self.closes: list[str] = []
        self._flushed = trio.Event()
        self.init_outbound()

    def close(self, reason: str, err_text: str | None = None) -> None:
        self.closes.append(reason)
        self.closed = True


async def _pair() -> tuple[_Conn, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server_side, _ = listener.accept()
    listener.close()
    client.setblocking(False)
    return _Conn(trio.SocketStream(trio.socket.from_stdlib_socket(server_side))), client


def _read_now(peer: socket.socket) -> bytes:
    try:
        return peer.recv(1 << 20)
    except BlockingIOError:
        return b""


async def _read_until(peer: socket.socket, size: int, timeout_s: float = 10.0) -> bytes:
    data = b""
    with trio.fail_after(timeout_s):
        while len(data) < size:
            await trio.lowlevel.wait_readable(peer)
            data += _read_now(peer)
    return data


async def _writer_parked(conn: _Conn) -> None:
    with trio.fail_after(10):
        while not conn._writer_idle:
            await trio.lowlevel.checkpoint()


async def test_an_answer_queued_while_the_writer_sleeps_leaves_at_once_and_a_burst_after_it_in_one_write():
    conn, peer = await _pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._write_loop)
        await _writer_parked(conn)
        conn.send(b"ack-1\r\n")
        # No scheduling point since the send, so the writer task has not run: the caller handed it to
        # the socket (nothing queued, nothing in flight).
        assert conn._out == [] and conn.pending_bytes == 0
        conn.send(b"ack-2\r\n")  # the writer was woken by the first: these wait for its one write
        conn.send(b"ack-3\r\n")
        assert conn._out == [b"ack-2\r\n", b"ack-3\r\n"]
        assert await _read_until(peer, 21) == b"ack-1\r\nack-2\r\nack-3\r\n"
        await _writer_parked(conn)  # idle again: the next answer goes at once
        conn.send(b"ack-4\r\n")
        assert conn._out == [] and conn.pending_bytes == 0
        assert await _read_until(peer, 7) == b"ack-4\r\n"
        nursery.cancel_scope.cancel()
    peer.close()
    assert conn.closes == []


async def test_without_a_sleeping_writer_bytes_wait_for_it():
    conn, peer = await _pair()
    conn.send(b"queued\r\n")  # the writer never ran: it is not known to be idle
    assert conn._out == [b"queued\r\n"] and _read_now(peer) == b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._write_loop)
        assert await _read_until(peer, 8) == b"queued\r\n"
        nursery.cancel_scope.cancel()
    peer.close()


async def test_what_the_socket_does_not_take_stays_queued_in_order():
    conn, peer = await _pair()
    conn.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    big = bytes(range(256)) * (4 << 10)  # 1 MiB: far more than the socket takes at once
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._write_loop)
        await _writer_parked(conn)
        conn.send(big)
        assert 0 < conn.pending_bytes < len(big)  # a part left at once, the rest is the writer's
        conn.send(b"after")
        assert await _read_until(peer, len(big) + 5, 30) == big + b"after"
        nursery.cancel_scope.cancel()
    peer.close()


def _run(tag: str) -> list[tuple[str, str | None, bytes | None, bytes]]:
    return [("s.x", f"$JS.ACK.S.C.1.{n}.{n}.1.0", None, tag.encode()) for n in range(3)]


def _frames(sid: bytes, run: list) -> bytes:
    return b"".join(b"MSG s.x %s %s %d\r\n%s\r\n" % (sid, reply.encode(), len(payload), payload)
                    for _, reply, _, payload in run)


async def test_a_consumer_run_sent_now_leaves_at_once_while_the_writer_is_awake():
    conn, peer = await _pair()
    sub = ClientSubscription(conn, "7", "_INBOX.x", None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._write_loop)
        await _writer_parked(conn)
        conn.send(b"first\r\n")  # at once; the writer is woken and no longer idle (it has not run since)
        assert conn._out == [] and not conn._writer_idle
        one, two, three = _run("one"), _run("two"), _run("three")
        conn.deliver_run(sub, one, now=True)  # nothing queued, nothing in flight: from the caller
        assert conn._out == [] and conn.pending_bytes == 0
        conn.deliver_run(sub, two)  # a plain run waits for the writer ...
        conn.deliver_run(sub, three, now=True)  # ... and a `now` run behind it keeps the order
        assert conn.pending_bytes == len(_frames(b"7", two)) + len(_frames(b"7", three))
        expected = b"first\r\n" + _frames(b"7", one) + _frames(b"7", two) + _frames(b"7", three)
        assert await _read_until(peer, len(expected)) == expected
        nursery.cancel_scope.cancel()
    peer.close()
    assert sub.delivered == 9 and conn.out_msgs == 9 and conn.closes == []


async def _writer_holding_bytes(conn: _Conn) -> bytes:
    """Send 1 MiB through a 4 KiB socket buffer: a part leaves at once, the rest goes to the writer, which
    blocks on the full socket with it in flight. Returns what was sent."""
    conn.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    big = bytes(range(256)) * (4 << 10)
    await _writer_parked(conn)
    conn.send(big)
    with trio.fail_after(10):
        while not (conn._inflight_bytes and not conn._out):
            await trio.lowlevel.checkpoint()
    return big


async def test_a_consumer_run_sent_now_waits_while_the_writer_has_bytes_in_flight():
    conn, peer = await _pair()
    sub = ClientSubscription(conn, "7", "_INBOX.x", None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._write_loop)
        big = await _writer_holding_bytes(conn)
        run = _run("late")
        conn.deliver_run(sub, run, now=True)
        assert conn._out and conn._out_bytes == len(_frames(b"7", run))  # queued behind the bytes in flight
        expected = big + _frames(b"7", run)
        assert await _read_until(peer, len(expected), 30) == expected
        nursery.cancel_scope.cancel()
    peer.close()


async def test_what_a_cycle_left_queued_leaves_at_its_end_not_at_the_writers_turn():
    conn, peer = await _pair()
    sub = ClientSubscription(conn, "7", "_INBOX.x", None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._write_loop)
        await _writer_parked(conn)
        push = _run("push")
        conn.deliver_run(sub, push)  # a push consumer that keeps up, as its entry applies: at once
        assert conn._out == [] and not conn._writer_idle and conn.server.unflushed == set()
        conn.send(b"+PUBACK\r\n")  # the entry's PubAck: the writer is awake, so it waits ...
        assert conn._out == [b"+PUBACK\r\n"] and conn.server.unflushed == {conn}
        conn.flush_queued()  # ... until the cycle's end flushes it, with no scheduling point in between:
        assert conn._out == [] and conn.pending_bytes == 0  # the caller sent it, not the writer
        expected = _frames(b"7", push) + b"+PUBACK\r\n"
        assert await _read_until(peer, len(expected)) == expected
        nursery.cancel_scope.cancel()
    peer.close()
    assert conn.closes == []


async def test_the_cycle_flush_leaves_bytes_behind_those_in_flight():
    conn, peer = await _pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._write_loop)
        big = await _writer_holding_bytes(conn)
        conn.send(b"after")
        conn.flush_queued()  # the writer holds bytes in flight: these must follow them, not jump ahead
        assert conn._out == [b"after"]
        assert await _read_until(peer, len(big) + 5, 30) == big + b"after"
        nursery.cancel_scope.cancel()
    peer.close()
