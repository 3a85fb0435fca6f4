"""`ConnOutbound`: a client connection's outbound half — its bounded buffer and its writer (layer L5).

Owns: the part of `ClientConn` that queues bytes for the client (`send`, `deliver` of a MSG/HMSG,
`deliver_run` of many to one subscription, the 503 no-responders status), the slow-consumer close,
the writer task (`_write_loop`) that drains the buffer to the socket, and the direct send of an answer
queued while the writer sleeps. Mixed into `ClientConn`, which provides `server`, `options`, `stream`,
`closed`, `close`, `headers`, `responses`, `sublist`, `_unsubscribe`, `_flushed`, and calls
`init_outbound` from its constructor.

Invariants (ClientConn's 1, 2, 9 and 10):
  1. Outbound bytes are bounded: queued plus in-flight bytes never exceed `pending_bytes_max`. The write
     that would exceed it drops what is queued, queues `-ERR 'Slow Consumer'`, closes this connection and
     logs it; the publisher and every other connection carry on (nats-server: `MaxPending`).
  2. A write that does not finish within `write_deadline_s` also makes a slow consumer; the socket is
     then closed without a word (it is not taking bytes).
  3. Under TLS, a burst the client sent is answered in one write: TLS reads hand over one record each,
     with a scheduling point between, so the writer first yields until the reader went `TLS_IDLE_ROUNDS`
     rounds without a read (at most `TLS_DRAIN_ROUNDS_MAX`). Else a second answer could follow a client's
     close_notify — nats-py then reports APPLICATION_DATA_AFTER_CLOSE_NOTIFY (its `test_tls_reconnect`).
  4. Bytes queued while nothing else is queued or in flight and the writer sleeps go to the socket at
     once, from the caller (one non-blocking send, plain TCP only; what the socket does not take stays
     queued): a sync publisher's PubAck leaves without waiting for the writer's wake-up (issue #18,
     bench/README.md "The sync publish path"). The writer is woken either way and is from then on not
     idle, so the bytes queued after it (an async publisher's burst of acks) go out in one write of its
     own, and bytes leave in the order they were queued. A `deliver_run(..., now=True)` (a consumer
     pass's run, consumer_service invariant 7) is sent the same way whenever nothing else is queued or
     in flight, even while the writer is awake: the next run is read only after this one left.
  5. Bytes that invariant 4 left queued are noted in the server's `unflushed`, and at the end of every
     Ready cycle (`runtime.progress` invariant 3) `flush_queued` sends each noted connection's queue from
     there in one non-blocking write whenever nothing of it is in flight, before the writer's turn: a
     cycle's answers leave with the cycle. A push consumer that keeps up is sent its messages as their
     entry applies, before the entry's PubAcks (consumer_push invariant 6); on the same connection that
     send woke the writer, and the PubAck waited for the writer's turn behind the rest of the cycle. The
     writer, when it runs, finds nothing and sleeps; the order is kept as in invariant 4.

Imports: stdlib, L4 (`protocol` wire and headers), trio.
Reference: nats-server `server/client.go` (`queueOutbound`, `flushOutbound`).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import trio

from jsraft.protocol import errors as texts
from jsraft.protocol.headers import NO_RESPONDERS_HEADERS
from jsraft.protocol.wire import CRLF, msg_head, wire_text

if TYPE_CHECKING:
    from jsraft.server.nats.client_subs import ClientSubscription

log = logging.getLogger("jsraft.server.clients")

# Invariant 3 (one round can look idle only because of the order tasks ran in, so two).
TLS_IDLE_ROUNDS = 2
TLS_DRAIN_ROUNDS_MAX = 16


class ConnOutbound:
    """Mixed into `ClientConn` (module docstring)."""

    server: Any
    options: Any
    stream: Any
    closed: bool

    def init_outbound(self) -> None:
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._inflight_bytes = 0
        self._wake = trio.Event()
        self._writer_idle = False  # the writer waits for `_wake` with nothing queued (invariant 4)
        self._reads = 0  # reads handled (invariant 3)

    @property
    def pending_bytes(self) -> int:
        """Bytes queued for this client and not yet written (/connz `pending_bytes`)."""
        return self._out_bytes + self._inflight_bytes

    def send(self, data: bytes) -> None:
        """Queue bytes for the client (invariant 1), or send them now (invariant 4)."""
        if self.closed:
            return
        self._out.append(data)
        self._queued(len(data))

    def _queued(self, size: int, now: bool = False) -> None:
        self._out_bytes += size
        if self._out_bytes + self._inflight_bytes > self.options.pending_bytes_max:
            self._slow_consumer(f"MaxPending of {self.options.pending_bytes_max} Exceeded")
            return
        # Invariant 4; plain TCP only (checked each time: a connection may be upgraded to TLS).
        if self._out_bytes == size and (self._writer_idle or (now and not self._inflight_bytes)) and \
                not self.closed and type(self.stream) is trio.SocketStream:
            self._send_now()
        else:
            self.server.unflushed.add(self)  # invariant 5
        self._wake.set()

    def _send_now(self) -> None:
        """Invariant 4: what is queued (nothing else is, and nothing is in flight) in one non-blocking
        send; the rest stays queued for the writer, which is woken either way and is no longer idle."""
        self._writer_idle = False
        chunk = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        try:
            sent = os.write(self.stream.socket.fileno(), chunk)
        except (BlockingIOError, InterruptedError):
            return  # the socket's buffer is full: the writer waits for it
        except OSError:
            return  # the writer's own send meets the error and closes the connection
        self._out.clear()
        self._out_bytes -= sent
        if sent < len(chunk):
            self._out.append(chunk[sent:])

    def flush_queued(self) -> None:
        """Invariant 5: what is queued leaves now in one non-blocking send, unless the writer holds bytes
        in flight (they must go first) or the connection is closed or not plain TCP."""
        if self._out and not self._inflight_bytes and not self.closed and type(self.stream) is trio.SocketStream:
            self._send_now()

    def deliver(self, sub: ClientSubscription, subject: bytes, reply: bytes | None, headers: bytes | None,
                payload: bytes) -> bool:
        """Queue one MSG/HMSG for `sub`; honours `UNSUB <sid> <max>`. False when nothing was queued."""
        if self.closed:
            return False
        if headers is not None and not self.headers:
            headers = None  # nats-server strips headers for a client that did not ask for them
        if reply and self.responses is not None:
            self.responses.received(reply.decode("utf-8", "surrogateescape"), trio.current_time())
        out = self._out
        out.append(msg_head(subject, sub.sid_bytes, reply, headers, len(payload)))
        size = len(out[-1]) + len(payload) + 2
        if headers:
            out.append(headers)
            size += len(headers)
        out.append(payload)
        out.append(CRLF)
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self._unsubscribe(sub)
        sent = len(payload) + (len(headers) if headers else 0)  # as nats-server counts: headers and payload
        self.out_msgs += 1  # /connz and /varz (monitor_views)
        self.out_bytes += sent
        self.server.stats.out_msgs += 1
        self.server.stats.out_bytes += sent
        self._queued(size)
        return True

    def deliver_run(self, sub: ClientSubscription,
                    run: list[tuple[str, str | None, bytes | None, bytes]], now: bool = False) -> None:
        """`deliver` of many messages to `sub` — (subject, reply, headers, payload) each, as text: each
        frame is encoded and built here, in one pass — queued with one `_queued` (invariants 1 and 4 hold
        for the run as a whole; `now`: invariant 4's last case): the consumer hub's pull batches. The caller has checked that nothing
        `deliver` does per message applies (`UNSUB <sid> <max>`, response tracking)."""
        if self.closed or not run:
            return
        keep_headers, sid = self.headers, sub.sid_bytes
        out: list[bytes] = []  # queued whole, after the last frame is built (an encoding error queues none)
        subjects: dict[str, bytes] = {}  # a run's messages often share their subject
        size = sent = 0
        for shown, reply, headers, payload in run:
            subject = subjects.get(shown)
            if subject is None:
                subject = subjects[shown] = wire_text(shown)
            if headers is not None and not keep_headers:
                headers = None  # as `deliver`: stripped for a client that did not ask for them
            if headers is None:
                head = b"MSG %s %s %s %d\r\n" % (subject, sid, wire_text(reply), len(payload)) if reply else \
                    b"MSG %s %s %d\r\n" % (subject, sid, len(payload))  # msg_head, inline
                out += (head, payload, CRLF)
                body = len(payload)
            else:
                head = msg_head(subject, sid, wire_text(reply) if reply else None, headers, len(payload))
                out += (head, headers, payload, CRLF)
                body = len(payload) + len(headers)
            size += len(head) + body + 2
            sent += body
        self._out += out
        count = len(run)
        sub.delivered += count
        self.out_msgs += count
        self.out_bytes += sent
        self.server.stats.out_msgs += count
        self.server.stats.out_bytes += sent
        self._queued(size, now)

    def send_no_responders(self, reply: str) -> None:
        """The 503 status message on `reply`, to this client's subscription that matches it (if any)."""
        for sub in self.sublist.match(reply).plain:
            if getattr(sub, "conn", None) is self:
                head = msg_head(wire_text(reply), sub.sid_bytes, None, NO_RESPONDERS_HEADERS, 0)
                self.send(head + NO_RESPONDERS_HEADERS + CRLF)
                return

    def _slow_consumer(self, why: str) -> None:
        log.warning("client %r: Slow Consumer Detected: %s; closing it", self, why)
        self.server.stats.slow_consumers += 1
        self._out.clear()
        self._out_bytes = 0
        self.close(f"slow consumer: {why}", texts.ERR_SLOW_CONSUMER)

    async def _write_loop(self) -> None:
        while True:
            if not self._out:
                if self.closed:
                    self._flushed.set()
                    return
                self._writer_idle = True
                await self._wake.wait()
                self._writer_idle = False
                self._wake = trio.Event()
                continue
            if type(self.stream) is trio.SSLStream:
                await self._let_reader_drain()  # invariant 3
                if not self._out:
                    continue  # a slow consumer's queue was dropped meanwhile
            chunk = b"".join(self._out)
            self._out.clear()
            self._inflight_bytes, self._out_bytes = self._out_bytes, 0
            try:
                with trio.move_on_after(self.options.write_deadline_s) as deadline:
                    await self.stream.send_all(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.close("connection lost while writing")
                self._flushed.set()
                return
            self._inflight_bytes = 0
            if deadline.cancelled_caught:  # invariant 2
                self._slow_consumer(f"WriteDeadline of {self.options.write_deadline_s}s exceeded")
                self._flushed.set()
                return

    async def _let_reader_drain(self) -> None:
        """Yield until the reader went `TLS_IDLE_ROUNDS` scheduling rounds without handling a read (it is
        waiting for the network, not working through records already received), at most
        `TLS_DRAIN_ROUNDS_MAX` rounds: a client that never stops sending must still be answered."""
        idle = 0
        for _ in range(TLS_DRAIN_ROUNDS_MAX):
            reads = self._reads
            await trio.lowlevel.checkpoint()
            idle = idle + 1 if self._reads == reads else 0
            if idle >= TLS_IDLE_ROUNDS:
                return
