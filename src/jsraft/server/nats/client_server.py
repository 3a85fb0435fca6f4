"""`ClientServer`: the node's NATS client port — listening, connections, routing, internal subscriptions (L5).

Owns: the listener on `client_host:client_port` (port 0 picks a free one; `address` is what was bound),
the registry of `ClientConn`s, the `Sublist` of every subscription, `route` (one publish to everyone
interested: plain subscriptions, one member per queue group, internal subscriptions, peers through
`forward`; no-responders otherwise), `deliver_routed` (a message a peer forwarded), and the hook later
work serves `$JS.API.>` and stream subjects through: `subscribe_internal(subject, handler)`, where
`handler(msg)` is awaited with an `InternalMsg` that can `respond(...)`; and INFO (`info`, with the
`connect_urls` that `cluster_urls` keeps, sent again to handshaken clients by `announce_info`).

Invariants:
  1. A publish reaches each matching plain subscription once and exactly one live member of each
     matching queue group, chosen at random (nats-server does the same); never the publisher's own
     subscriptions when it connected with `echo: false`. In a cluster a member on this node is
     preferred; only a group no member here took is left to the peers (invariant 5). Wildcard tokens
     are routed as nats-server's (`t.a.>` reaches `t.*.>`, not `t.a.b`); invalid subjects reach nobody.
  2. No-responders: a publish with a reply subject that reached nobody here or at a peer (`forward` sent
     it nowhere), from a client whose CONNECT had `headers` and `no_responders`, gets `HMSG <reply> <sid>
     16 16` + `NATS/1.0 503` on its own subscription matching the reply (nats-server `processInboundClientMsg`).
  3. Internal handlers for messages from one connection start in the order the messages arrived (each
     waits for its predecessor to have started), so a handler that queues its work before its first
     checkpoint keeps the publisher's order; a `sync` handler (stream publishes) is called at once, in
     arrival order, with no task. At most `INTERNAL_INFLIGHT_MAX` messages are in internal handlers per
     connection (ClientConn invariant 6) and per server for messages published internally — a message
     counts until `InternalMsg.done()` — beyond that an internal message is dropped and logged.
  4. A misbehaving client closes only its own connection; an internal handler's `JsraftError` is its own
     business (the handler answers it); anything else is a bug and crashes the node.
  5. Cluster routing: after local delivery a publish is offered to `forward` (set by `routes.Routes`)
     with the queue groups served here. A message a peer forwarded (`deliver_routed`) reaches this
     node's client subscriptions only — never an internal one: every node holds its own `$JS.API`,
     stream-subject and direct-get subscriptions and serves its own clients, so serving a peer's
     message again would answer a request twice or store a publish twice — and is never forwarded
     again, so a message crosses at most one link (the nodes form a full mesh, as nats-server routes do).
  6. Ack shortcut (`set_ack_path`, `ack_shortcut.AckShortcut`): a publish on `$JS.ACK.…` goes straight to
     the consumer hub's handler (no sublist match, `InternalMsg` or `forward`) only while the hub's
     subscription is the only one that could match, here or at a peer: `ack_rivals` counts the others,
     local and advertised by peers (sublist observers on `sublist` and the routes' `remote`;
     `could_match_ack`), and only when the subject is valid (the handler checks: it takes only those).
     Else `route` as any. A connection's run of acks (`AckRun`) takes it as one call (`ack_run_path`)
     exactly when each of its acks would.
  7. With an `Authenticator` or `TlsContexts`, a client is accepted as `client_auth.accept_client` says:
     TLS first where configured, INFO with `auth_required`/`nonce`/`tls_required`, authentication first.
  8. Accounts: a client of an isolated account has its account's own sublist (`account_sublists`), and
     its publishes reach only that (`client_auth.route_isolated`): never another account, an internal
     subscription (JetStream serves the main account) or a peer (routes carry the main account only).
  9. Lame duck mode (`server.ops.lame_duck`): once `stop_accepting` returned the listening sockets are closed
     and no client is accepted again; the connected ones are served on. With `lame_duck` set every INFO
     carries `"ldm": true` (nats-server's lame duck notice; the caller sends it again with `announce_info`).

Imports: stdlib, L0–L1 (`subjects`), L4 (`protocol`), attrs, trio, server siblings.
Reference: nats-server `server/client.go` (`processMsgResults`), `server/server.go` (`Info`).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import attrs
import trio

from jsraft import limits, subjects
from jsraft.jsapi.api_level import API_LEVEL, version_for_level
from jsraft.protocol import errors as texts
from jsraft.protocol.wire import wire_text
from jsraft.server.nats.ack_shortcut import ACK_PREFIX, AckShortcut
from jsraft.server.nats.auth import Authenticator
from jsraft.server.nats.client_accept import accept_client
from jsraft.server.nats.client_deliver import Delivery, deliver_as as deliver_run
from jsraft.server.nats.client_conn import INTERNAL_INFLIGHT_MAX, ClientConn, err_line, is_published_subject, is_valid_subject
from jsraft.server.nats.client_stats import ClientStats
from jsraft.server.nats.tls import TlsContexts
from jsraft.server.nats.sublist import Sublist
from jsraft.server.nats.client_auth import route_isolated, security_info

log = logging.getLogger("jsraft.server.clients")

# The nats-server version this node advertises (INFO's and /varz's `version`): the release that introduced
# the JetStream API level it serves, so a client's version checks and `_nats.ver` agree with the features
# actually served. jsraft's own version is under /varz's `jsraft` key.
NATS_VERSION = version_for_level(API_LEVEL)


@attrs.frozen(kw_only=True)
class ClientOptions:
    host: str = "127.0.0.1"
    port: int = 4222
    max_payload: int = limits.payload_bytes_default
    max_control_line: int = limits.control_line_bytes_max
    pending_bytes_max: int = limits.client_pending_bytes_default
    ping_interval_s: float = 120.0
    pings_out_max: int = 2
    write_deadline_s: float = 10.0
    connections_max: int = limits.client_connections_max
    subscriptions_max: int = limits.client_subscriptions_max

    @classmethod
    def of(cls, config: Any) -> "ClientOptions":
        """From a `NodeConfig` (its client fields)."""
        return cls(host=config.client_host, port=config.client_port, max_payload=config.max_payload,
                   pending_bytes_max=config.client_pending_bytes_max,
                   ping_interval_s=config.client_ping_interval_ms / 1000, pings_out_max=config.client_pings_out_max,
                   write_deadline_s=config.client_write_deadline_ms / 1000)


class InternalMsg:
    """A message delivered to an internal subscription; `respond` publishes on its reply subject.

    `done()` ends its accounting (invariant 3's bound): `_run_internal` calls it when an async handler
    returns; a sync handler (or whatever it handed the message to) must call it once it has answered.
    """

    __slots__ = ("server", "subject", "reply", "headers", "payload", "origin", "_counted")

    def __init__(self, server: "ClientServer", subject: str, reply: str | None, headers: bytes | None,
                 payload: bytes, origin: ClientConn | None = None) -> None:
        self.server = server
        self.subject = subject
        self.reply = reply
        self.headers = headers
        self.payload = payload
        self.origin = origin
        self._counted = False

    def respond(self, payload: bytes, headers: bytes | None = None) -> bool:
        """Publish `payload` to the reply subject; False when there is none or nobody listens."""
        if not self.reply:
            return False
        return self.server.publish(self.reply, payload, headers=headers)

    def done(self) -> None:
        """This message no longer counts toward its origin's in-flight bound. Idempotent."""
        if self._counted:
            self._counted = False
            self.server.internal_finished(self.origin)


Handler = Callable[[InternalMsg], Awaitable[None]]
# (subject, reply, headers, payload, queue groups served on this node) -> whether any peer was sent it
Forward = Callable[[str, str | None, bytes | None, bytes, Collection[str]], bool]
SyncHandler = Callable[[InternalMsg], None]


class InternalSubscription:
    """A subscription served by the node itself (sublist duck type: `subject`, `queue`). A `sync` one's
    handler is a plain function called at once, in arrival order, with no task of its own (invariant 3)."""

    __slots__ = ("server", "subject", "queue", "handler", "sync")

    def __init__(self, server: "ClientServer", subject: str, handler: Handler | SyncHandler, queue: str | None,
                 sync: bool = False) -> None:
        self.server = server
        self.subject = subject
        self.queue = queue
        self.handler = handler
        self.sync = sync

    def deliver(self, origin: ClientConn | None, subject: bytes, reply: bytes | None, headers: bytes | None,
                payload: bytes) -> bool:
        return self.server.dispatch_internal(self, origin, subject, reply, headers, payload)


class ClientServer(AckShortcut):
    def __init__(self, options: ClientOptions, *, server_id: str, server_name: str,
                 rng: random.Random | None = None, authenticator: Authenticator | None = None,
                 tls: TlsContexts | None = None) -> None:
        self.options = options
        self.authenticator = authenticator
        self.tls = tls
        self.server_id = server_id
        self.server_name = server_name
        self.sublist = Sublist()  # the main account's (invariant 8)
        self.account_sublists: dict[str, Sublist] = {}
        self.clients: dict[int, ClientConn] = {}
        self.stats = ClientStats()
        self.address: tuple[str, int] | None = None
        # Called before each route, so a hook can bring its internal subscriptions up to date first.
        self.before_route: list[Callable[[], None]] = []
        # Set by the cluster routes (`routes.Routes`): offers each publish to the peers with interest.
        self.forward: Forward | None = None
        # Set by `cluster_urls.ClusterUrls` on a clustered node: INFO's `connect_urls`; None leaves it out.
        self.connect_urls: list[str] | None = None
        self._rng = rng or random.Random()
        self._next_cid = 0
        self._nursery: trio.Nursery | None = None
        self._internal_inflight = 0
        self._internal_last = trio.Event()
        self._internal_last.set()
        self.listeners: list[trio.SocketListener] = []  # bound already (`jsraft serve`): served, not bound
        self._accepting = trio.CancelScope()
        self._accept_done: trio.Event | None = None  # set once the listening sockets are closed
        self.lame_duck = False  # INFO's `ldm` (invariant 9)
        self.unflushed: set[ClientConn] = set()  # client_out invariant 5
        self.init_ack_shortcut()  # invariant 6

    def flush_queued(self) -> None:  # at the end of each Ready cycle (`runtime.progress` 3; client_out 5)
        unflushed, self.unflushed = self.unflushed, set()
        for conn in unflushed:
            conn.flush_queued()

    # --- Lifecycle --------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, report `started((host, port))`, serve clients until cancelled."""
        listeners = self.listeners or await trio.open_tcp_listeners(self.options.port, host=self.options.host)
        self.address = (self.options.host, listeners[0].socket.getsockname()[1])
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self._accept, listeners)
                log.info("NATS clients on nats://%s:%d (max_payload %d)", *self.address, self.options.max_payload)
                task_status.started(self.address)
        finally:
            self._nursery = None  # closed: `start_soon` and internal dispatch say no from now on

    async def _accept(self, listeners: list[Any], *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept until `stop_accepting` (invariant 9) or cancelled; connections live in the server's nursery."""
        self._accept_done = trio.Event()
        try:
            with self._accepting:
                await trio.serve_listeners(self._serve_client, listeners, handler_nursery=self._nursery,
                                           task_status=task_status)
        finally:
            for listener in listeners:
                listener.socket.close()  # a client dialing now is refused, not left waiting in the backlog
            self._accept_done.set()

    async def stop_accepting(self) -> None:
        """Invariant 9: no new client from now on (the listening sockets closed when this returns); the
        connected ones stay."""
        self._accepting.cancel()
        if self._accept_done is not None:
            await self._accept_done.wait()

    async def _serve_client(self, stream: trio.SocketStream) -> None:
        await accept_client(self, stream)  # TLS, INFO, then the connection (invariant 7)

    def info(self, conn: ClientConn) -> dict[str, Any]:
        host, port = self.address or (self.options.host, self.options.port)
        return {"server_id": self.server_id, "server_name": self.server_name, "version": NATS_VERSION,
                "proto": 1, "host": host, "port": port, "headers": True, "max_payload": self.options.max_payload,
                "jetstream": True, "client_id": conn.cid, "client_ip": conn.peer.rpartition(":")[0],
                **security_info(self, conn),
                **({"connect_urls": list(self.connect_urls)} if self.connect_urls is not None else {}),
                **({"ldm": True} if self.lame_duck else {})}

    def announce_info(self) -> None:
        """Send INFO again to every client past its handshake (`cluster_urls` invariant 4): the cluster's
        `connect_urls` changed."""
        for conn in list(self.clients.values()):
            if conn.handshaken and not conn.closed:
                conn.send(self.info_line(conn))

    def info_line(self, conn: ClientConn) -> bytes:
        return b"INFO %s\r\n" % json.dumps(self.info(conn), separators=(",", ":")).encode()

    # --- Routing ----------------------------------------------------------------------------------------

    def publish(self, subject: str, payload: bytes, *, reply: str | None = None, headers: bytes | None = None) -> bool:
        """Publish from the node itself (no publisher connection); True when someone received it."""
        return self.route(None, subject, reply, headers, payload)

    def route(self, origin: ClientConn | None, subject: str, reply: str | None, headers: bytes | None,
              payload: bytes) -> bool:
        """Deliver one publish (invariants 1, 2, 5 and 6); True when it reached anyone, here or at a peer."""
        if origin is not None and origin.sublist is not self.sublist:
            return route_isolated(self, origin, subject, reply, headers, payload)
        for hook in self.before_route:
            hook()
        if subject.startswith(ACK_PREFIX) and self._ack_handler is not None and not self.ack_rivals \
                and self._nursery is not None and self._ack_handler(subject, reply, payload):
            return True  # invariant 6: only the hub's subscription matches; the handler checked the subject
        result = self.sublist.match(subject) if is_published_subject(subject) else None
        delivered, served = False, []  # served: queue groups a member here took: peers must not serve them
        if result is not None and (result.plain or result.queues):
            delivered, served = self._deliver_matches(result, origin, wire_text(subject),
                                                      wire_text(reply) if reply else None, headers, payload)
        if result is not None and self.forward is not None:
            delivered = self.forward(subject, reply, headers, payload, served) or delivered
        if not delivered and reply and origin is not None and origin.no_responders:
            origin.send_no_responders(reply)
        return delivered

    def _deliver_matches(self, result: Any, origin: ClientConn | None, subject: bytes, reply: bytes | None,
                         headers: bytes | None, payload: bytes) -> tuple[bool, list[str]]:
        """Each plain match and one member of each queue group: (delivered to any, queue groups served)."""
        delivered, served = False, []
        for sub in result.plain:
            delivered = sub.deliver(origin, subject, reply, headers, payload) or delivered
        for members in result.queues:
            if self._deliver_queue(members, origin, subject, reply, headers, payload):
                delivered = True
                served.append(members[0].queue)
        return delivered, served

    def deliver_as(self, subject: str, run: list[Delivery], now: bool = False) -> bool:
        """Publish from the node to `subject`'s subscribers (here and, through `forward`, at peers) a run of
        messages, each seen as a message on its `shown` subject with its own reply: a JetStream delivery
        goes to the pull request's reply subject and carries the stream message's own subject, as
        nats-server's `deliverMsg` sends it (`client_deliver`: one match and one write for a fetch's batch;
        `now`: written to each client's socket at once)."""
        return deliver_run(self, subject, run, now)

    def deliver_routed(self, subject: str, subject_bytes: bytes, reply: bytes | None, headers: bytes | None,
                       payload: bytes, queues: Collection[str]) -> bool:
        """A message a peer forwarded (invariant 5): to this node's client subscriptions only — each
        matching plain one, one member of each queue group in `queues` — and never forwarded again."""
        result = self.sublist.match(subject)
        delivered = False
        for sub in result.plain:
            if type(sub) is not InternalSubscription:
                delivered = sub.deliver(None, subject_bytes, reply, headers, payload) or delivered
        if queues:
            for members in result.queues:
                if members[0].queue in queues:
                    clients = tuple(sub for sub in members if type(sub) is not InternalSubscription)
                    if clients:
                        delivered = self._deliver_queue(clients, None, subject_bytes, reply, headers,
                                                        payload) or delivered
        return delivered

    def _deliver_queue(self, members: tuple[Any, ...], origin: ClientConn | None, subject: bytes,
                       reply: bytes | None, headers: bytes | None, payload: bytes) -> bool:
        """One member of a queue group, at random; the next ones in turn if it cannot take it."""
        start = self._rng.randrange(len(members))
        for offset in range(len(members)):
            if members[(start + offset) % len(members)].deliver(origin, subject, reply, headers, payload):
                return True
        return False

    # --- Internal subscriptions -------------------------------------------------------------------------

    def subscribe_internal(self, subject: str, handler: Handler | SyncHandler, *, queue: str | None = None,
                           sync: bool = False) -> InternalSubscription:
        """`handler(msg)` for each message on `subject`: awaited in a task of its own, or with `sync`
        called at once (it must not block, and must see to `msg.done()`)."""
        subjects.validate(subject, wildcards=True)
        sub = InternalSubscription(self, subject, handler, queue, sync)
        self.sublist.insert(sub)
        return sub

    def start_soon(self, fn: Callable[..., Awaitable[None]], *args: Any) -> bool:
        """Run `fn(*args)` as a task of the client port (for work a sync handler hands on); False when
        the port is not running."""
        if self._nursery is None:
            return False
        self._nursery.start_soon(fn, *args)
        return True

    def unsubscribe_internal(self, sub: InternalSubscription) -> None:
        self.sublist.remove(sub)

    def dispatch_internal(self, sub: InternalSubscription, origin: ClientConn | None, subject: bytes,
                          reply: bytes | None, headers: bytes | None, payload: bytes) -> bool:
        """Start `sub.handler` for one message, in arrival order per origin (invariant 3)."""
        if self._nursery is None:
            return False
        if origin is None:
            if self._internal_inflight >= INTERNAL_INFLIGHT_MAX:
                self.stats.internal_dropped += 1
                log.warning("internal message on %r dropped: %d handlers busy", sub.subject, self._internal_inflight)
                return False
            self._internal_inflight += 1
        else:
            origin.internal_inflight += 1
        msg = InternalMsg(self, subject.decode("utf-8", "surrogateescape"),
                          reply.decode("utf-8", "surrogateescape") if reply else None, headers, payload, origin)
        msg._counted = True
        if sub.sync:
            # Started now, so before every later message of this origin (invariant 3), with no task.
            sub.handler(msg)
            return True
        if origin is None:
            previous, self._internal_last = self._internal_last, trio.Event()
            mine = self._internal_last
        else:
            previous, origin.internal_last = origin.internal_last, trio.Event()
            mine = origin.internal_last
        self._nursery.start_soon(self._run_internal, sub.handler, msg, previous, mine)
        return True

    def internal_finished(self, origin: ClientConn | None) -> None:
        """One internal message of `origin` (None: the node's own) was handled (`InternalMsg.done`)."""
        if origin is None:
            self._internal_inflight -= 1
        else:
            origin.internal_done()

    async def _run_internal(self, handler: Handler, msg: InternalMsg, previous: trio.Event, mine: trio.Event) -> None:
        try:
            await previous.wait()
            mine.set()  # no checkpoint between this and the handler's first: the next one starts after
            await handler(msg)
        finally:
            mine.set()
            msg.done()
