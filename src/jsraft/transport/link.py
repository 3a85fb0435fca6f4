"""One TCP connection to one peer: its handshake steps and its read and write loops (layer L4, trio).

Owns: a connected stream and its `FrameDecoder`. The handshake helpers read and write HELLO / REFUSE;
`serve()` then runs a reader (frames in, DATA handed to a callback) and a writer (the peer's
`SendQueue` out, batched, with a PING when idle) until the link ends, and records why it ended.

Invariants:
  1. Nothing a peer sends can raise out of `serve()`: every way a link can end — EOF, a socket error, an
     idle or stalled connection, a protocol error, a `JsraftError` from the DATA callback saying the
     payload was bad — ends only this link and is recorded in `close_error` for the caller to log.
     Other exceptions are bugs and propagate.
  2. A link is closed when nothing has been received for `idle_timeout_s`, or when one write has been
     blocked that long: a paused or partitioned peer cannot keep a dead link (and its full queue) looking
     connected. Each side sends a PING after `keepalive_s` without traffic, so a healthy idle link stays
     up. One watchdog task per link checks these clocks every `keepalive_s / 2` (so a PING leaves at most
     1.5 × `keepalive_s` after the last write, and a dead link closes at most that late): the read and
     write loops only note the time, with no deadline or cancel scope per read or write, which cost as
     much CPU as the rest of a busy link's work.
  4. Every frame taken from the queue is either written (`frames_sent`) or, if the link ends mid-write,
     counted in `dropped`.
  3. Frames are written in queue order, at most `WRITE_BATCH_BYTES_MAX` per write (plus one frame). A
     `GatheredFrame`'s pieces are written with vectored sends on a plain TCP link, never joined (joined
     once on a TLS one): the same bytes, in the same order.
  5. Frames are handed to `on_data` in arrival order, and a frame whose `on_data` returns a `trio.Event`
     (a gate) is the last one handed on until that event is set: the frames read after it wait in the
     decoder (and the socket), so whatever the gate's owner does before setting it happens before
     anything that followed the frame on the link (rpc invariant 7).

Imports: stdlib, L0, trio, transport siblings. Reference: trio docs, "Handling cancellation";
TigerBeetle's bounded message bus.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from jsraft.errors import JsraftError
from jsraft.transport.errors import HandshakeRefused, LinkClosed, TransportProtocolError
from jsraft.transport.send_queue import SendQueue
from jsraft.transport.wire import (
    PING_FRAME, Frame, FrameDecoder, FrameKind, GatheredFrame, Hello, decode_data, decode_hello,
    decode_refuse, encode_hello, encode_refuse,
)

# One write per batch of frames amortises the syscall without holding a huge join buffer.
WRITE_BATCH_BYTES_MAX = 256 << 10
# Pieces per `sendmsg` of a gathered write: well within Linux's IOV_MAX (1024).
IOV_PIECES_MAX = 512
# A REFUSE is a courtesy before closing; a peer that will not read it does not get to hold us up.
REFUSE_SEND_TIMEOUT_S = 1.0
# What ends a link without being a bug (invariant 1). JsraftError covers TransportError and whatever the
# DATA callback raises to say "this peer sent a bad message".
LINK_ENDING_ERRORS = (JsraftError, OSError, trio.BrokenResourceError, trio.ClosedResourceError)

Address = tuple[str, int]
# (group, payload) -> None, or a gate: take no further frame until it is set (invariant 5).
OnData = Callable[[str, memoryview], "trio.Event | None"]


class Direction(enum.Enum):
    OUTBOUND = "outbound"  # this node dialed
    INBOUND = "inbound"  # the peer dialed


class Counters:
    """Traffic counters of one peer, updated by its links; read through `Transport.peer_status()`."""

    __slots__ = ("frames_sent", "frames_received", "bytes_sent", "bytes_received", "dropped")

    def __init__(self) -> None:
        self.dropped = 0
        self.frames_sent = 0
        self.frames_received = 0
        self.bytes_sent = 0
        self.bytes_received = 0


def _address(get: Callable[[], object]) -> Address | None:
    try:
        host, port = get()[:2]  # type: ignore[index]
    except (OSError, TypeError, ValueError):
        return None
    return (str(host), int(port))


class Link:
    """A connected stream to a peer. `remote` is set once the peer's HELLO has been accepted."""

    def __init__(self, stream: trio.SocketStream, direction: Direction) -> None:
        self.stream = stream
        self.direction = direction
        self.decoder = FrameDecoder()
        self.remote: Hello | None = None
        self.cancel_scope = trio.CancelScope()
        self.close_error: BaseException | None = None
        self.local_address = _address(stream.socket.getsockname)
        self.remote_address = _address(stream.socket.getpeername)
        # Invariant 2's clocks (trio time), set by `serve()` and the loops, read by the watchdog.
        self._received_at = self._sent_at = 0.0
        self._writing_since: float | None = None

    def describe(self) -> str:
        name = self.remote.node_name if self.remote else "?"
        return f"{self.direction.value} link to {name} ({_show(self.remote_address)})"

    # --- Handshake steps (the caller bounds them with the handshake timeout) -------------------------

    async def receive_frame(self) -> Frame:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            data = await self.stream.receive_some(self.decoder.read_size())
            if not data:
                raise LinkClosed("peer closed the connection")
            self.decoder.feed(data)

    async def receive_hello(self) -> Hello:
        """The peer's HELLO; a REFUSE becomes `HandshakeRefused`, anything else a protocol error."""
        frame = await self.receive_frame()
        if frame.kind is FrameKind.REFUSE:
            raise HandshakeRefused(f"peer refused: {decode_refuse(frame.body)}")
        if frame.kind is not FrameKind.HELLO:
            raise TransportProtocolError(f"expected HELLO, got {frame.kind.name}")
        return decode_hello(frame.body)

    def accept_remote(self, remote: Hello, frame_bytes_max: int) -> None:
        """The peer is known now: allow full-size frames (wire invariant 3)."""
        self.remote = remote
        self.decoder.allow_frames_up_to(frame_bytes_max)

    async def start_tls(self, context: ssl.SSLContext, *, server_side: bool) -> None:
        """Run the rest of this connection over TLS (the caller bounds it with the handshake timeout)."""
        tls_stream = trio.SSLStream(self.stream, context, server_side=server_side, https_compatible=True)
        await tls_stream.do_handshake()
        self.stream = tls_stream  # type: ignore[assignment]

    async def send_hello(self, hello: Hello) -> None:
        await self.stream.send_all(encode_hello(hello))

    async def refuse(self, reason: str) -> None:
        """Tell the peer why before closing, best effort: it logs the reason instead of guessing."""
        with trio.move_on_after(REFUSE_SEND_TIMEOUT_S):
            try:
                await self.stream.send_all(encode_refuse(reason))
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def close(self) -> None:
        await trio.aclose_forcefully(self.stream)

    # --- Serving -------------------------------------------------------------------------------------

    async def serve(self, queue: SendQueue, on_data: OnData, counters: Counters, *, keepalive_s: float,
                    idle_timeout_s: float) -> None:
        """Run until the link ends (invariant 1); the reason is left in `close_error`."""
        now = trio.current_time()
        self._received_at = self._sent_at = now
        with self.cancel_scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, self._write_loop, queue, counters)
                nursery.start_soon(self._guard, self._read_loop, on_data, counters)
                nursery.start_soon(self._guard, self._watchdog, queue, keepalive_s, idle_timeout_s)

    async def _guard(self, loop: Callable[..., object], *args: object) -> None:
        try:
            await loop(*args)  # type: ignore[misc]
        except LINK_ENDING_ERRORS as exc:
            if self.close_error is None:
                self.close_error = exc
        # Any of the loops ending ends the link: the others must not run on alone.
        self.cancel_scope.cancel()

    async def _watchdog(self, queue: SendQueue, keepalive_s: float, idle_timeout_s: float) -> None:
        """Invariant 2's clocks, read every `keepalive_s / 2`; raises `LinkClosed` when one ran out."""
        while True:
            await trio.sleep(keepalive_s / 2)
            now = trio.current_time()
            if now - self._received_at > idle_timeout_s:
                raise LinkClosed(f"nothing received for {idle_timeout_s} s")
            writing_since = self._writing_since
            if writing_since is not None:
                if now - writing_since > idle_timeout_s:
                    raise LinkClosed(f"peer has not read for {idle_timeout_s} s")
            elif now - self._sent_at >= keepalive_s and not len(queue):
                # The writer is idle on an empty queue: a PING through the queue wakes it (only the
                # writer writes, so frames are never interleaved). An empty queue always has room.
                queue.put(PING_FRAME)

    async def _read_loop(self, on_data: OnData, counters: Counters) -> None:
        # Frames that arrived with the HELLO are already in the decoder.
        gate = self._dispatch(on_data, counters)
        decoder, clock = self.decoder, trio.current_time
        stream = self.stream
        # A plain TCP link reads its socket directly: `SocketStream.receive_some` adds a conflict detector
        # and an error-translating context manager per call, and this loop is the only reader.
        receive_some = stream.socket.recv if type(stream) is trio.SocketStream else stream.receive_some
        while True:
            while gate is not None:  # invariant 5: the frames after a gating one wait until it opens
                await gate.wait()
                gate = self._dispatch(on_data, counters)
            data = await receive_some(decoder.read_size())
            if not data:
                raise LinkClosed("peer closed the connection")
            self._received_at = clock()
            counters.bytes_received += len(data)
            decoder.feed(data)
            gate = self._dispatch(on_data, counters)

    def _dispatch(self, on_data: OnData, counters: Counters) -> trio.Event | None:
        """Hand the decoded frames to `on_data` until one returns a gate (invariant 5), which is returned."""
        while (frame := self.decoder.next_frame()) is not None:
            counters.frames_received += 1
            if frame.kind is FrameKind.DATA:
                group, payload = decode_data(frame.body)
                gate = on_data(group, payload)
                if gate is not None:
                    return gate
            elif frame.kind is FrameKind.REFUSE:
                raise LinkClosed(f"peer dropped the link: {decode_refuse(frame.body)}")
            elif frame.kind is not FrameKind.PING:
                raise TransportProtocolError(f"unexpected {frame.kind.name} after the handshake")
        return None

    async def _write_loop(self, queue: SendQueue, counters: Counters) -> None:
        clock = trio.current_time
        stream = self.stream
        # As the reader: a plain TCP link writes to its socket directly (this loop is the only writer).
        plain = type(stream) is trio.SocketStream
        send_all = partial(_send_all, stream.socket.send) if plain else stream.send_all
        send_vectored = partial(_send_vectored, stream.socket.sendmsg) if plain else None
        while True:
            batch = await queue.take(WRITE_BATCH_BYTES_MAX)
            gathered = any(type(frame) is GatheredFrame for frame in batch)
            if gathered:  # a large frame's pieces, written as they are (plain TCP) or joined once (TLS)
                pieces = [piece for frame in batch
                          for piece in (frame.parts if type(frame) is GatheredFrame else (frame,))]
                data = pieces if send_vectored is not None else b"".join(pieces)
            else:
                data = batch[0] if len(batch) == 1 else b"".join(batch)
            # A peer that stops reading fills its TCP window; the watchdog gives up on it rather than
            # hold the link (invariant 2).
            self._writing_since = clock()
            try:
                await (send_vectored(data) if gathered and send_vectored is not None else send_all(data))
            except BaseException:
                # Whatever ends the link mid-write (cancellation included), these frames were accepted by
                # send() and will never arrive: count them, so every accepted frame is sent or dropped.
                counters.dropped += len(batch)
                raise
            self._sent_at, self._writing_since = self._writing_since, None
            counters.frames_sent += len(batch)
            counters.bytes_sent += sum(len(frame) for frame in batch) if gathered else len(data)


async def _send_all(send: Callable[[bytes | memoryview], Awaitable[int]], data: bytes) -> None:
    """All of `data` through a socket's `send` (what `SocketStream.send_all` does, minus its per-call
    guards); a socket error propagates as `OSError`, which ends the link (invariant 1)."""
    sent = await send(data)
    if sent < len(data):
        with memoryview(data) as view:
            while sent < len(view):
                sent += await send(view[sent:])


async def _send_vectored(sendmsg: Callable[[list], Awaitable[int]], pieces: list) -> None:
    """All of `pieces`, in order, through a socket's `sendmsg` (at most `IOV_PIECES_MAX` a call), none of
    them joined; a socket error propagates as `OSError`, which ends the link (invariant 1)."""
    while pieces:
        sent = await sendmsg(pieces[:IOV_PIECES_MAX])
        done = 0
        while done < len(pieces) and sent >= len(pieces[done]):
            sent -= len(pieces[done])
            done += 1
        pieces = pieces[done:]
        if sent:
            pieces[0] = memoryview(pieces[0])[sent:]


def _show(address: Address | None) -> str:
    return "unknown address" if address is None else f"{address[0]}:{address[1]}"
