"""`Transport`: one node's links to its peers — listen, dial, handshake, multiplex, reconnect (layer L4, trio).

Owns: the listener, one dialer task per peer, and the peer table. A node pair shares one TCP connection
(both sides dial when disconnected; `peer.new_link_wins` keeps the same one on both). `send()` frames a
group's payload into the peer's bounded queue and returns at once (`send_parts()` frames a payload given
in parts, copied once, into the frame); received DATA frames go to `on_message(from_node, group,
payload)`, called synchronously from the link's reader task, `payload` a read-only view of the frame;
when it returns a `trio.Event`, that link takes no further frame until the event is set (link invariant 5).

Invariants:
  1. `send()` never blocks and never waits for a peer: it returns False (and counts a drop) when the peer is
     unknown, disconnected or its queue is full. Raft tolerates lost messages; it does not tolerate a node
     whose every group stalls behind one slow peer.
  2. A hostile or broken peer — garbage, an oversized frame, a bad CRC, another cluster, an unknown node, no
     handshake within `handshake_timeout_s` — gets its connection closed and a log line; nothing else is
     affected. Every such path ends inside the handler of that one connection (link invariant 1).
  3. Only a peer in the current peer table is served (with `open_membership`, any node of this cluster,
     which joins it; `seeds`), and its identity is what its HELLO said; messages carry that identity.
  4. Cancelling `run()` closes the listener and every link; no task outlives it.
  5. With a cluster secret (`auth`), no frame of a connection is read past the proof exchange
     (`cluster_auth`) unless the other side proved the secret; with TLS (`tls`), every connection is
     TLS with verified certificates on both ends before its first frame. A refused connection is logged
     with the peer's address and never reaches HELLO, so it can neither join, vote nor append.

`on_link(peer_id, up)`, when given, is called synchronously when a link to `peer_id` becomes current
(`up`: every link, a replacement of a live one included, so a layer that keeps per-link state resends
it) and when a link ends leaving the peer with no current link (`not up`; possibly reported twice when
a superseded link ends late). A frame sent from the `up` call goes out on that link ahead of anything
sent later.

`on_message` may raise a `JsraftError` (say, a `PeerProtocolError` from decoding) to declare the payload
hostile: the link is closed and logged like any protocol error. Any other exception is a bug and crashes
`run()`.

Imports: stdlib, L0, trio, transport siblings. Reference: DESIGN.md §1 and the transport issue; nats-server
routes (one connection per server pair).
"""

from __future__ import annotations

import logging
import os
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache, partial
from typing import Any

import trio

from jsraft.errors import InvalidConfig, JsraftError, invariant, naming_port
from jsraft.transport.backoff import Backoff
from jsraft.transport.cluster_auth import ClusterAuth, secure_inbound, secure_outbound
from jsraft.transport.config import TransportConfig
from jsraft.transport.errors import FrameTooLarge, HandshakeRefused, LinkClosed, TransportProtocolError
from jsraft.transport.link import LINK_ENDING_ERRORS, Address, Direction, Link
from jsraft.transport.peer import DUPLICATE_REASON, Peer, PeerStatus
from jsraft.transport.seeds import add_peer
from jsraft.transport.send_queue import SendQueue
from jsraft.transport.wire import (
    GATHER_FRAME_BYTES_MIN, FrameKind, GatheredFrame, Hello, check_hello, check_name, data_frame_bytes,
    encode_frame_parts, encode_group,
)

log = logging.getLogger("jsraft.transport")

OnMessage = Callable[[str, str, bytes | memoryview], "trio.Event | None"]  # a gate: link invariant 5
OnLink = Callable[[str, bool], None]


@lru_cache(maxsize=4096)
def _group_prefix(group: str) -> bytes:
    # A node sends to few groups, millions of times: encode each name once. Bounded like everything else.
    return encode_group(group)


class Transport:
    """Node-to-node messaging for one node; see the module docstring. Start with `nursery.start(t.run)`,
    which returns the bound `(host, port)`; stop by cancelling."""

    def __init__(self, node_id: str, cluster_name: str, storage_uuid: uuid.UUID | str, listen_host: str,
                 listen_port: int, peers: Mapping[str, Address], *, on_message: OnMessage,
                 config: TransportConfig | None = None, bind_host: str | None = None,
                 rng: random.Random | None = None, on_link: OnLink | None = None,
                 auth: ClusterAuth | None = None, tls: Any = None, open_membership: bool = False) -> None:
        self.config = config if config is not None else TransportConfig()
        self.config.validate()
        check_name(node_id, "node id")
        check_name(cluster_name, "cluster name")
        self.node_id = node_id
        # The incarnation proves a restart to peers (wire docstring). It must differ across restarts even
        # when tests inject equal seeds, so it comes from the OS, not from `rng`.
        self.hello = Hello(cluster_name=cluster_name, node_name=node_id,
                           storage_uuid=uuid.UUID(str(storage_uuid)),
                           incarnation=int.from_bytes(os.urandom(8), "little"))
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.bind_host = bind_host
        self._on_message = on_message
        self._on_link = on_link
        self.auth = auth
        # Duck-typed (the server's `TlsContexts`): `.server`/`.client` ssl contexts, read per connection
        # so a reload takes effect on the next one; `.handshake_timeout_s`.
        self.tls = tls
        self.refused_auth = 0
        self.open_membership = open_membership  # invariant 3; Raft groups are untouched by it
        self._rng = rng if rng is not None else random.Random()
        self._peers: dict[str, Peer] = {}
        self._nursery: trio.Nursery | None = None
        self._inbound_handshakes = 0
        self.dropped_unknown = 0
        self.update_peers(peers)

    @property
    def listen_address(self) -> Address:
        return (self.listen_host, self.listen_port)

    @property
    def inbound_handshakes_pending(self) -> int:
        """Inbound connections still in their handshake (bounded by `config.inbound_handshakes_max`)."""
        return self._inbound_handshakes

    # --- Public API ---------------------------------------------------------------------------------

    async def run(self, *, listen: bool = True,
                  task_status: trio.TaskStatus[Address | None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen (unless `listen` is False: a node with no peers opens no cluster port), dial every peer,
        serve links until cancelled (invariant 4). Reports the address listened on, or None."""
        listeners = []
        if listen:
            with naming_port("cluster", self.listen_host, self.listen_port):  # "address in use" alone does not say which
                listeners = await trio.open_tcp_listeners(self.listen_port, host=self.listen_host)
        if listen and len(listeners) != 1:
            # A name resolving to several addresses (IPv4 and IPv6) would listen on several ports when
            # `listen_port` is 0, and peers are given one address: insist on one.
            for listener in listeners:
                await listener.aclose()
            raise InvalidConfig(f"transport: listen_host {self.listen_host!r} must be a single address")
        if listeners:
            self.listen_port = listeners[0].socket.getsockname()[1]
        try:
            async with trio.open_nursery() as nursery:
                if listeners:
                    await nursery.start(trio.serve_listeners, self._handle_inbound, listeners)
                    log.info("transport %s listening on %s:%d", self.node_id, self.listen_host, self.listen_port)
                self._nursery = nursery
                for peer in self._peers.values():
                    if peer.address is not None:
                        self._start_dialer(peer)
                task_status.started(self.listen_address if listeners else None)
        finally:
            self._nursery = None
            # Every dialer ran in the nursery that just closed; a later run() starts fresh ones.
            for peer in self._peers.values():
                peer.dialer_scope = None

    def send(self, to_node: str, group: str, payload: bytes | bytearray | memoryview, *,
             headroom: float = 0.0) -> bool:
        """Queue `payload` for `group` on `to_node`; False if it was dropped instead (invariant 1).
        `headroom` (0 to 1) drops it also when it would leave less than that fraction of the peer's queue
        free: traffic that may be lost (forwarded NATS messages) must not crowd out Raft's.
        Raises `FrameTooLarge` if the frame exceeds `config.frame_bytes_max` (no peer would accept it)."""
        return self.send_parts(to_node, group, (payload,), headroom=headroom)

    def send_parts(self, to_node: str, group: str, parts: Sequence[bytes | bytearray | memoryview], *,
                   headroom: float = 0.0) -> bool:
        """`send` of the payload `b"".join(parts)`, joined only into the frame itself (one copy), or, for a
        large frame of `bytes` parts, not at all: the link's writer sends its pieces (`GatheredFrame`)."""
        peer = self._peers.get(to_node)
        if peer is None:
            self.dropped_unknown += 1
            return False
        prefix = _group_prefix(group)
        size = data_frame_bytes(prefix, sum(len(part) for part in parts))
        if size > self.config.frame_bytes_max:
            raise FrameTooLarge(f"{size}-byte frame for group {group!r} exceeds {self.config.frame_bytes_max}")
        if peer.link is None or not peer.queue.has_room(size, headroom):
            peer.counters.dropped += 1
            return False
        frame = encode_frame_parts(FrameKind.DATA, (prefix, *parts))  # a large one is not joined (wire)
        queued = peer.queue.put(GatheredFrame(frame) if size >= GATHER_FRAME_BYTES_MIN
                                and all(type(part) is bytes for part in parts) else b"".join(frame))
        invariant(queued, "has_room() held and nothing ran in between")
        return True

    def update_peers(self, peers: Mapping[str, Address]) -> None:
        """Replace the peer table (membership change). A removed peer's link is closed; a peer whose
        address changed is redialed; this node's own id in `peers` is ignored."""
        wanted = {node_id: (str(host), int(port)) for node_id, (host, port) in peers.items()
                  if node_id != self.node_id}
        for node_id, peer in list(self._peers.items()):
            if wanted.get(node_id) != peer.address:
                del self._peers[node_id]
                peer.close()
        for node_id, address in wanted.items():
            if node_id not in self._peers:
                check_name(node_id, "peer node id")
                peer = Peer(node_id, address, SendQueue(self.config.send_queue_frames_max,
                                                        self.config.send_queue_bytes_max))
                self._peers[node_id] = peer
                if self._nursery is not None:
                    self._start_dialer(peer)

    def peer_status(self) -> dict[str, PeerStatus]:
        return {node_id: peer.status() for node_id, peer in sorted(self._peers.items())}

    # --- Dialing ------------------------------------------------------------------------------------

    def _start_dialer(self, peer: Peer) -> None:
        invariant(self._nursery is not None and peer.dialer_scope is None, "one dialer per peer, while running")
        peer.dialer_scope = trio.CancelScope()
        self._nursery.start_soon(self._dial_loop, peer, peer.dialer_scope)  # type: ignore[union-attr]

    async def _dial_loop(self, peer: Peer, scope: trio.CancelScope) -> None:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s, self._rng)
        with scope:
            while True:
                # Dial only while there is no link: an inbound connection serves the pair just as well.
                await peer.disconnected.wait()
                peer.dialing = True
                try:
                    link = await self._dial(peer)
                finally:
                    peer.dialing = False
                if link is None:
                    peer.dial_failures += 1
                    await trio.sleep(backoff.next_delay())
                    continue
                started = trio.current_time()
                try:
                    if peer.offer(self.node_id, link):
                        await self._serve(peer, link)
                finally:
                    await link.close()
                if trio.current_time() - started >= self.config.link_stable_s:
                    backoff.reset()
                # Even after a healthy link, wait a little: a peer that accepts and drops at once must not
                # be redialed in a tight loop.
                await trio.sleep(backoff.next_delay())

    async def _dial(self, peer: Peer) -> Link | None:
        """A handshaken outbound link to `peer`, or None (logged, recorded) if that failed."""
        invariant(peer.address is not None, "a dialer runs only for a peer with an address")
        host, port = peer.address  # type: ignore[misc]
        try:
            with trio.fail_after(self.config.dial_timeout_s):
                stream = await trio.open_tcp_stream(host, port, local_address=self.bind_host)
        except (OSError, trio.TooSlowError) as exc:
            peer.last_error = f"dial {host}:{port}: {exc or 'timed out'}"
            log.debug("transport %s: %s", self.node_id, peer.last_error)
            return None
        link = Link(stream, Direction.OUTBOUND)
        try:
            await self.handshake_outbound(link, peer.node_id)
            return link
        except HandshakeRefused as exc:
            await self._note_refusal(peer, link, exc)
        except (*LINK_ENDING_ERRORS, trio.TooSlowError) as exc:
            peer.last_error = f"handshake with {host}:{port}: {exc or 'timed out'}"
            hostile = isinstance(exc, TransportProtocolError)
            peer.protocol_errors += hostile
            log.log(logging.WARNING if hostile else logging.INFO, "transport %s: %s", self.node_id, peer.last_error)
        await link.close()
        return None

    async def handshake_outbound(self, link: Link, expected_node: str | None) -> None:
        """The dialer's half of the handshake on `link` (`expected_node` None: any node of this cluster, a
        seed's); raises `HandshakeRefused`, a link-ending error or `trio.TooSlowError`."""
        with trio.fail_after(self.config.handshake_timeout_s):
            await secure_outbound(link, self.auth, self.tls)
            await link.send_hello(self.hello)
            remote = await link.receive_hello()
        check_hello(self.hello, remote, expected_node=expected_node)
        link.accept_remote(remote, self.config.frame_bytes_max)

    async def _note_refusal(self, peer: Peer, link: Link, exc: HandshakeRefused) -> None:
        repeated = peer.last_error == str(exc)
        peer.last_error = str(exc)
        if DUPLICATE_REASON in exc.reason:
            # The normal outcome of a simultaneous dial: the other connection carries the pair.
            log.debug("transport %s: %s refused a duplicate connection", self.node_id, peer.node_id)
            return
        # A misconfiguration repeats on every redial: warn when the reason is new, not every backoff step.
        log.log(logging.DEBUG if repeated else logging.WARNING, "transport %s: handshake with %s failed: %s",
                self.node_id, peer.node_id, exc)
        if not exc.reason.startswith("peer refused"):
            await link.refuse(exc.reason)

    # --- Accepting ----------------------------------------------------------------------------------

    async def _handle_inbound(self, stream: trio.SocketStream) -> None:
        """One inbound connection, from accept to close; nothing the peer does escapes (invariant 2)."""
        link = Link(stream, Direction.INBOUND)
        try:
            remote = await self._accept_handshake(link)
            if remote is not None and self.open_membership and remote.node_name not in self._peers:
                add_peer(self, remote.node_name, None)  # its address comes by gossip, later
            peer = self._peers.get(remote.node_name) if remote is not None else None
            if peer is None:
                return
            if not peer.offer(self.node_id, link):
                await link.refuse(DUPLICATE_REASON)
                return
            await self._serve(peer, link, hello_first=True)
        finally:
            await link.close()

    async def _accept_handshake(self, link: Link) -> Hello | None:
        """The dialer's HELLO if it may talk to this node; otherwise None, with the refusal sent and logged."""
        where = _show(link.remote_address)
        if self._inbound_handshakes >= self.config.inbound_handshakes_max:
            log.warning("transport %s: closing connection from %s: %d handshakes already pending",
                        self.node_id, where, self._inbound_handshakes)
            return None
        self._inbound_handshakes += 1
        try:
            with trio.fail_after(self.config.handshake_timeout_s):
                refusal = await secure_inbound(link, self.auth, self.tls)
                if refusal is not None:
                    self.refused_auth += 1
                    log.warning("transport %s: refused connection from %s: %s", self.node_id, where, refusal)
                    return None
                remote = await link.receive_hello()
            check_hello(self.hello, remote, known_nodes=None if self.open_membership else self._peers)
            link.accept_remote(remote, self.config.frame_bytes_max)
            return remote
        except HandshakeRefused as exc:
            log.warning("transport %s: refused connection from %s: %s", self.node_id, where, exc.reason)
            await link.refuse(exc.reason)
        except trio.TooSlowError:
            log.warning("transport %s: closing connection from %s: no handshake within %s s",
                        self.node_id, where, self.config.handshake_timeout_s)
        except LINK_ENDING_ERRORS as exc:
            # Garbage is hostile or a misdirected client; a connect-and-close (a port probe) is not news.
            level = logging.WARNING if isinstance(exc, TransportProtocolError) else logging.INFO
            log.log(level, "transport %s: closing connection from %s during handshake: %s", self.node_id, where, exc)
        finally:
            self._inbound_handshakes -= 1
        return None

    # --- Serving ------------------------------------------------------------------------------------

    async def _serve(self, peer: Peer, link: Link, *, hello_first: bool = False) -> None:
        """Run a current link until it ends; then the peer is disconnected unless superseded."""
        log.info("transport %s: %s up", self.node_id, link.describe())
        reported = False
        try:
            # The acceptor answers HELLO only after offer() made the link current, so the dialer never sees
            # a HELLO on a connection this side is about to drop as a duplicate.
            if hello_first and not await self._answer_hello(link):
                return
            if self._on_link is not None and peer.link is link:
                reported = True
                self._on_link(peer.node_id, True)
            await link.serve(peer.queue, partial(self._on_message, peer.node_id), peer.counters,
                             keepalive_s=self.config.keepalive_s, idle_timeout_s=self.config.idle_timeout_s)
        finally:
            peer.link_ended(link)
            self._log_link_end(peer, link)
            # Down only while the peer has no current link: a superseded link ends with its replacement
            # already up, and a peer re-added at a new address reports its own links.
            current = self._peers.get(peer.node_id, peer) is peer
            if reported and self._on_link is not None and peer.link is None and current:
                self._on_link(peer.node_id, False)

    async def _answer_hello(self, link: Link) -> bool:
        with trio.move_on_after(self.config.handshake_timeout_s) as timer:
            try:
                await link.send_hello(self.hello)
            except LINK_ENDING_ERRORS as exc:
                link.close_error = exc
                return False
        if timer.cancelled_caught:
            link.close_error = LinkClosed("peer did not read this node's HELLO")
            return False
        return True

    def _log_link_end(self, peer: Peer, link: Link) -> None:
        error = link.close_error
        if error is None:
            log.info("transport %s: %s closed (superseded or shut down)", self.node_id, link.describe())
            return
        peer.last_error = f"{type(error).__name__}: {error}"
        if isinstance(error, LinkClosed) or not isinstance(error, JsraftError):
            log.info("transport %s: %s closed: %s", self.node_id, link.describe(), peer.last_error)
            return
        # The peer broke the protocol (or sent a payload the application rejected): hostile or buggy.
        peer.protocol_errors += 1
        log.warning("transport %s: %s closed after a protocol error: %s", self.node_id, link.describe(),
                    peer.last_error)


def _show(address: Address | None) -> str:
    return "an unknown address" if address is None else f"{address[0]}:{address[1]}"
