"""`ClientConn`: one NATS client connection on the node's client port (layer L5).

Owns: the connection's three tasks — reading (bytes into `protocol.ServerConnection`, events into
actions), writing (a bounded outbound buffer drained to the socket: `client_out.ConnOutbound`), pinging
(PING an idle client, close a stale one) — and its subscriptions (`ClientSubscription`), CONNECT options and closing. Routing a publish
to other connections is `ClientServer.route`'s job.

Invariants:
  1, 2. The outbound buffer is bounded, and so is a write's time (`client_out`, its invariants 1, 2).
  3. A protocol error from the client sends nats-server's `-ERR` text (when it has one), then closes
     this connection; nothing else is affected. Non-fatal errors (`Invalid Subject`, `Invalid Publish
     Subject`, `maximum subscriptions exceeded`) answer `-ERR` and keep the connection, as nats-server does.
     A subject that is not UTF-8 is not a valid subject here (nats-server accepts any bytes).
  4. A client that leaves `pings_out_max` PINGs unanswered gets `-ERR 'Stale Connection'` and is closed;
     a client that sent anything during the last interval is not pinged (nats-server's rule).
  5. Once `closed`, the connection holds no subscription in the sublist and queues no more bytes except
     its final `-ERR`; `run` returns after that is flushed or `write_deadline_s` passed.
  6. Reading pauses while this connection has `INTERNAL_INFLIGHT_MAX` messages in internal handlers (a
     client publishing to a stream faster than it stores cannot queue unbounded work), and so does the
     handling of what was already read: the bound holds however many publishes one read brought.
  7. With authentication required, nothing but CONNECT is processed until its credentials passed (in a
     worker thread: bcrypt is slow on purpose); a refused CONNECT, another operation first or no CONNECT
     in time gets `-ERR 'Authorization Violation'` (`'Authentication Timeout'`) and is closed; the log
     names the client and the reason, never a secret (`client_auth`).
  8. A user's permissions are enforced on every PUB and SUB, and a subscription overlapping its deny list
     never delivers a denied subject (`permissions`); a refusal gets `-ERR 'Permissions Violation for …'`
     and the connection stays open, as nats-server keeps it.
  9, 10. Under TLS a burst is answered in one write; on plain TCP an answer queued while the writer
     sleeps is sent by its caller (`client_out`, its invariants 3, 4).
  11. A read asks for at most `READ_BYTES_MAX` bytes: `READ_BYTES_MIN`, doubled after a read that filled
     it, halved after one that used under a quarter of it (nats-server's adaptive read buffer). A
     client streaming large messages then hands a stream many per read, hence per entry.
  12. A run of JetStream acks read as one event (`AckRun`) is handled as each of its acks would be, in
     order: permissions, `+OK` when `verbose`, the pedantic `-ERR`, the counters per ack. It goes to the
     consumer hub as one call when the port's ack shortcut is open (`ClientServer.ack_run_path`), where
     an ack answers nothing at once, so the checks' answers may all come first; else each ack is handled
     as a `PUB` of its own, the bound of invariant 6 checked between them.

Imports: stdlib, L0–L1 (`errors`, `subjects`), L4 (`protocol`), trio, server siblings (`client_out`, ...).
Reference: nats-server `server/client.go` (`processConnect`, `processSub`, `processUnsub`,
`queueOutbound`, `processPingTimer`).
"""

from __future__ import annotations

import collections
import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from jsraft.protocol import (
    NEED_DATA, AckRun, Connect, Ping, Pong, Pub, RemoteProtocolError, ServerConnection, Sub, Unsub,
)
from jsraft.protocol import errors as texts
from jsraft.protocol.wire import OK, PING, PONG
from jsraft.server.nats.client_auth import ConnSecurity, err_line
from jsraft.server.nats.client_out import ConnOutbound
from jsraft.server.nats.client_subs import ClientSubscription, is_published_subject, is_valid_subject

if TYPE_CHECKING:
    from jsraft.server.nats.client_server import ClientServer

log = logging.getLogger("jsraft.server.clients")

READ_BYTES_MIN = 64 << 10
READ_BYTES_MAX = 1 << 20
INTERNAL_INFLIGHT_MAX = 1024
_BOOL_OPTIONS = ("verbose", "pedantic", "headers", "no_responders", "echo")
_STR_OPTIONS = ("name", "lang", "version")


def next_read_bytes(asked: int, got: int) -> int:
    """How much the next read asks for, after one that asked `asked` bytes and got `got` (invariant 11)."""
    if got >= asked:
        return min(asked * 2, READ_BYTES_MAX)
    if got < asked // 4:
        return max(asked // 2, READ_BYTES_MIN)
    return asked


class ClientConn(ConnSecurity, ConnOutbound):
    def __init__(self, server: "ClientServer", stream: trio.SocketStream, cid: int, peer: str) -> None:
        options = server.options
        self.server = server
        self.options = options
        self.stream = stream
        self.cid = cid
        self.peer = peer
        self.protocol = ServerConnection(ack_runs=True, max_control_line=options.max_control_line,
                                         max_payload=options.max_payload)
        self._acks_left: collections.deque[str] = collections.deque()  # of a run, one by one (invariant 12)
        self.subs: dict[str, ClientSubscription] = {}
        self.sublist = server.sublist  # its account's subscriptions (ClientServer invariant 8)
        self.verbose = self.pedantic = self.headers = self.no_responders = False
        self.echo = True
        self.name = self.lang = self.version = ""
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.start_ns = time.time_ns()
        self.closed = False
        self.close_reason = ""
        # A PONG was sent: the client is past its CONNECT handshake and reads INFO at any time from now on.
        self.handshaken = False
        self.init_security(server.authenticator is not None)  # invariants 7, 8
        self.pings_out = 0
        self.internal_inflight = 0
        self.internal_last = trio.Event()  # the internal-dispatch chain (ClientServer.dispatch_internal)
        self.internal_last.set()
        self._internal_room = trio.Event()
        self.init_outbound()  # invariants 1, 2, 9, 10 (`client_out`)
        self._closed = trio.Event()
        self._flushed = trio.Event()
        self._read_scope = trio.CancelScope()
        self._ping_scope = trio.CancelScope()
        self._last_in_s = trio.current_time()
        self._handlers = {Pub: self._on_pub, AckRun: self._on_ack_run, Sub: self._on_sub, Unsub: self._on_unsub,
                          Ping: self._on_ping, Pong: self._on_pong, Connect: self._on_connect}

    def __repr__(self) -> str:
        return f"cid:{self.cid} {self.peer}" + (f" {self.name!r}" if self.name else "")

    # --- Lifecycle --------------------------------------------------------------------------------------

    async def run(self, info: bytes | None) -> None:
        """Serve until closed (invariant 5); the caller registered it. `info`: None if sent before TLS."""
        if info is not None:
            self.send(info)
        try:
            async with trio.open_nursery() as nursery:
                if not self.authed:
                    nursery.start_soon(self._auth_timer)
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._ping_loop)
                nursery.start_soon(self._read_loop)
                await self._closed.wait()
                with trio.move_on_after(self.options.write_deadline_s):
                    await self._flushed.wait()
                nursery.cancel_scope.cancel()
        finally:
            self.close("server stopping")
            await trio.aclose_forcefully(self.stream)
            log.debug("client %r closed: %s", self, self.close_reason)

    def close(self, reason: str, err_text: str | None = None) -> None:
        """Stop reading, unsubscribe everything, flush what is queued (plus `-ERR err_text`), then close."""
        if self.closed:
            return
        if err_text is not None:
            self._out.append(err_line(err_text))
        self.closed = True
        self.close_reason = reason
        for sub in self.subs.values():
            self.sublist.remove(sub)
        self.subs.clear()
        self._read_scope.cancel()
        self._ping_scope.cancel()
        self._wake.set()
        self._internal_room.set()
        self._closed.set()

    # --- Inbound ----------------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        read_bytes = READ_BYTES_MIN
        with self._read_scope:
            while not self.closed:
                try:
                    data = await self.stream.receive_some(read_bytes)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.close("connection reset by client")
                    return
                if not data:
                    self.close("client closed the connection")
                    return
                read_bytes = next_read_bytes(read_bytes, len(data))
                self._last_in_s = trio.current_time()
                self.protocol.receive_data(data)
                self._process_events()
                self._reads += 1  # invariant 9: the writer watches the reader's progress
                while not self.closed:
                    if self._pending_connect is not None:  # invariant 7
                        await self._authenticate(self._pending_connect)
                    elif self.internal_inflight >= INTERNAL_INFLIGHT_MAX:  # invariant 6
                        self._internal_room = trio.Event()
                        await self._internal_room.wait()
                    else:
                        break
                    self._process_events()

    def _process_events(self) -> None:
        """Handle the events read so far, stopping early for a CONNECT to check (invariant 7) or when
        internal handlers hold `INTERNAL_INFLIGHT_MAX` of this connection's messages (invariant 6)."""
        try:
            while not self.closed and self._pending_connect is None \
                    and self.internal_inflight < INTERNAL_INFLIGHT_MAX:
                if self._acks_left:  # the rest of a run handled one by one (invariant 12)
                    self._on_pub(Pub(self._acks_left.popleft(), None, b""))
                    continue
                event = self.protocol.next_event()
                if event is NEED_DATA:
                    return
                if not self.authed and type(event) is not Connect:
                    self._auth_violation(f"{type(event).__name__.upper()} before CONNECT")
                    return
                self._handlers[type(event)](event)
        except RemoteProtocolError as error:  # invariant 3
            log.info("client %r: protocol error, closing: %s", self, error)
            self.server.stats.protocol_errors += 1
            self.close(f"protocol error: {error}", error.err_text)

    def internal_done(self) -> None:
        self.internal_inflight -= 1
        if self.internal_inflight < INTERNAL_INFLIGHT_MAX:
            self._internal_room.set()

    def _on_connect(self, event: Connect) -> None:
        options = event.options
        bad = [key for key in _BOOL_OPTIONS if key in options and type(options[key]) is not bool]
        bad += [key for key in _STR_OPTIONS if key in options and not isinstance(options[key], str)]
        protocol = options.get("protocol", 0)
        if bad or type(protocol) is not int:
            # nats-server fails to unmarshal the JSON into its options struct and closes without -ERR.
            self.close(f"CONNECT with mistyped options {bad or ['protocol']}")
            return
        if not 0 <= protocol <= 1:
            self.close(f"CONNECT protocol {protocol}", texts.ERR_BAD_CLIENT_PROTOCOL)
            return
        self.verbose, self.pedantic = options.get("verbose", False), options.get("pedantic", False)
        self.headers, self.no_responders = options.get("headers", False), options.get("no_responders", False)
        self.echo = options.get("echo", True)
        self.name, self.lang, self.version = (options.get(key, "") for key in _STR_OPTIONS)
        if self.no_responders and not self.headers:
            self.close("no_responders without headers", texts.ERR_NO_RESPONDERS_REQUIRES_HEADERS)
            return
        if not self.authed:
            self._pending_connect = options  # checked off the event loop, then OK (invariant 7)
            return
        if self.verbose:
            self.send(OK)

    def idle_s(self) -> float:
        """Seconds since this client last sent anything (/connz `idle`, `last_activity`)."""
        return trio.current_time() - self._last_in_s

    def _on_pub(self, event: Pub) -> None:
        if (self.perms is not None or self.verbose or self.pedantic) and not self._pub_checks(event.subject):
            return
        self.server.stats.in_msgs += 1
        received = len(event.payload) + (len(event.headers) if event.headers else 0)
        self.server.stats.in_bytes += received
        self.in_msgs += 1  # /connz and /varz (monitor_views)
        self.in_bytes += received
        self.server.route(self, event.subject, event.reply, event.headers, event.payload)

    def _pub_checks(self, subject: str) -> bool:
        """A publish's permission (invariant 8: False, refused, after its `-ERR`), then `+OK` for a
        `verbose` client and `-ERR 'Invalid Publish Subject'` for a `pedantic` one (the publish still goes)."""
        if self.perms is not None and not self._may_publish(subject):
            return False
        if self.verbose:
            self.send(OK)
        if self.pedantic and not is_valid_subject(subject):
            self.send(err_line(texts.ERR_INVALID_PUBLISH_SUBJECT))
        return True

    def _on_ack_run(self, event: AckRun) -> None:
        """Invariant 12: the acks of `event`, each as `_on_pub` would take it."""
        take = self.server.ack_run_path(self)
        if take is None:
            self._acks_left.extend(event.subjects)  # `_process_events` hands them to `_on_pub`
            return
        subjects = event.subjects
        if self.perms is not None or self.verbose or self.pedantic:
            # An answer that closes the connection (its outbound bound) ends the run there, as it would
            # end the reading of separate events.
            subjects = [subject for subject in subjects if not self.closed and self._pub_checks(subject)]
        self.server.stats.in_msgs += len(subjects)
        self.in_msgs += len(subjects)  # an ack's payload is empty: no bytes to count
        for subject in take(subjects):  # not a valid subject: routed as any publish, which reaches nobody
            self.server.route(self, subject, None, None, b"")

    def _on_sub(self, event: Sub) -> None:
        if not is_valid_subject(event.subject, wildcards=True) or \
                (event.queue is not None and not is_valid_subject(event.queue)):
            self.send(err_line(texts.ERR_INVALID_SUBJECT))
            return
        if event.sid not in self.subs:
            if len(self.subs) >= self.options.subscriptions_max:
                self.send(err_line(texts.ERR_MAX_SUBSCRIPTIONS))
                return
            if self.perms is not None and not self._may_subscribe(event.subject, event.queue):  # invariant 8
                return
            sub = ClientSubscription(self, event.sid, event.subject, event.queue)
            if self.perms is not None:
                sub.deny = self.perms.delivery_deny(event.subject)
            self.subs[event.sid] = sub
            self.sublist.insert(sub)
        if self.verbose:
            self.send(OK)

    def _on_unsub(self, event: Unsub) -> None:
        sub = self.subs.get(event.sid)
        if sub is not None:
            if event.max_msgs and event.max_msgs > sub.delivered:
                sub.max_msgs = event.max_msgs
            else:
                self._unsubscribe(sub)
        if self.verbose:
            self.send(OK)

    def _unsubscribe(self, sub: ClientSubscription) -> None:
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
            self.sublist.remove(sub)

    def _on_ping(self, event: Ping) -> None:
        self.send(PONG)
        self.handshaken = True

    def _on_pong(self, event: Pong) -> None:
        self.pings_out = 0

    # --- Keepalive --------------------------------------------------------------------------------------

    async def _ping_loop(self) -> None:
        interval_s = self.options.ping_interval_s
        with self._ping_scope:
            while True:
                await trio.sleep(interval_s)
                if trio.current_time() - self._last_in_s < interval_s:
                    continue  # invariant 4: the client spoke recently, so it is alive
                if self.pings_out + 1 > self.options.pings_out_max:
                    log.info("client %r: Stale Connection (%d PINGs unanswered); closing it", self, self.pings_out)
                    self.server.stats.stale_connections += 1
                    self.close("stale connection", texts.ERR_STALE_CONNECTION)
                    return
                self.pings_out += 1
                self.send(PING)
