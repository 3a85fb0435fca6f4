"""`Routes`: NATS subject interest and messages between cluster nodes, on the reserved group `$route` (L5).

Owns: telling every peer which subjects and queue groups this node's clients subscribe to (a STATE when
a link becomes current, DELTAs as subscriptions come and go, a DIGEST every `digest_interval_s`), the
sublist of what each peer advertised, and forwarding: `forward` (set as `ClientServer.forward`) gives a
publish to each peer with plain interest and, for each queue group no member here took, to one peer
picked in proportion to its members, in per-peer batches sent once the publishing code yields (or a
batch is full); `on_payload` hands a peer's messages to `ClientServer.deliver_routed`. The wire format
is `route_wire`; the sync state machines `route_interest`.

Decision — internal subscriptions stay local. Every node subscribes `$JS.API.>`, the stream subjects
(`stream_publish`) and direct gets (`jsapi_direct`) for its own clients, so they are never advertised
and a forwarded message never reaches them (ClientServer invariant 5): a `$JS.API` request is answered
by the node its client is connected to, and a publish on a stream subject is stored once — the node
that received it from its client sends it to the stream leader — however many nodes forward copies to
subscribers. A reply from an internal handler is an ordinary publish, so it is forwarded to the
requester's node when the reply subject's interest lives there.

Invariants:
  1. A message from a peer is delivered here and never forwarded again (no loops; full mesh).
  2. Per publish, each peer gets at most one copy, naming the queue groups it must serve; a queue
     group gets one member in the cluster: here if a member here took it, else on exactly one peer.
  3. Interest frames to a peer carry consecutive sequences under this node's random `epoch` (new on
     every start). A frame the transport refused (queue full, no link) marks the peer dirty: it gets no
     more DELTAs, only a full STATE at the next digest tick. The receiving side resyncs too: a gap, a
     foreign epoch or a disagreeing DIGEST makes it send RESYNC (at most once per `digest_interval_s`
     per peer, unless a new gap), and a RESYNC is answered with a STATE at most twice per interval.
     So a dropped frame costs at most about one interval of stale interest, never lasting divergence.
  4. Pending DELTAs are sent before any message is forwarded, and message batches after, so a peer
     learns of a SUB before it sees a publish sent after the SUB (a request's reply interest arrives
     before the request does). One publisher's messages to one peer keep their order.
  5. A peer without a current link holds no interest here (its entries are dropped when the link goes
     down, with its unsent batch): nothing can be forwarded to it, and a request that only it could
     answer gets no-responders.
  6. Forwarded messages are at most once, like core NATS: a batch the transport refuses is dropped and
     counted (`msgs_dropped`). A batch is refused when it would leave less than `MSGS_HEADROOM` of the
     peer's send queue free, so a flood of publishes cannot starve that peer's Raft traffic.
  7. One lane per node pair, as nats-server's one route connection: whatever this node forwarded to a
     peer before it sends that peer an `$rpc` frame (an API answer, a request) reaches the peer first
     (`send_pending`, called by `Rpc` before each frame; the transport keeps one FIFO queue per peer).
     So a consumer info answered by a stream leader reaches the client after the deliveries the leader
     made before answering, as on nats-server (a KV watcher ends its initial values only after them).
     The other way round, a consumer create's reply holds back the messages read after it on its link
     until its caller has answered the client (rpc invariant 7).

Imports: stdlib, L0, L4 (`protocol.wire`, `transport`), trio, server siblings.
Reference: nats-server `server/route.go` (`sendSubsToRoute`, RS+/RS-, RMSG, `processInboundRoutedMsg`)
and `server/client.go` (`processMsgResults`: local queue members first).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Collection
from typing import Protocol

import attrs
import trio

from jsraft.protocol.wire import wire_text
from jsraft.server.nats import route_wire
from jsraft.server.nats.client_server import ClientServer, InternalSubscription
from jsraft.server.nats.route_interest import LocalInterest, Outbound, PeerView, RouteSub
from jsraft.server.nats.route_gossip import RouteGossip
from jsraft.server.nats.route_wire import (
    MSGS_BATCH_BYTES_MAX, ROUTE_GROUP, Digest, Gossip, Interest, Key, Msgs, Resync,
)
from jsraft.server.nats.sublist import Sublist
from jsraft.transport.errors import FrameTooLarge

log = logging.getLogger("jsraft.server.nats.routes")

# Forwarded messages may fill at most half of a peer's send queue: they may be lost (core NATS is at most
# once), Raft heartbeats and appends must not be crowded out by them.
MSGS_HEADROOM = 0.5
# Distinct (subject, queue) entries one peer may advertise: millions of subscriptions' worth, and a
# bound on what a broken peer can make this node hold (route_interest invariant 4).
REMOTE_ENTRIES_MAX = 1 << 22


class SendFn(Protocol):
    """`Transport.send`."""

    def __call__(self, to_node: str, group: str, payload: bytes, *, headroom: float = 0.0) -> bool: ...


@attrs.define
class RouteStats:
    msgs_forwarded: int = 0  # copies handed to the transport for peers
    msgs_received: int = 0
    msgs_dropped: int = 0  # copies the transport refused (no link, queue over its headroom), or too large
    batches_sent: int = 0
    states_sent: int = 0
    deltas_sent: int = 0
    digests_sent: int = 0
    resyncs_requested: int = 0  # RESYNC frames this node sent
    resyncs_served: int = 0  # STATEs sent because a peer asked


class Routes:
    def __init__(self, node_id: str, clients: ClientServer, send: SendFn, *, digest_interval_s: float = 1.0,
                 rng: random.Random | None = None, entries_max: int = REMOTE_ENTRIES_MAX) -> None:
        self.node_id = node_id
        self.clients = clients
        self.digest_interval_s = digest_interval_s
        self.entries_max = entries_max
        self.epoch = int.from_bytes(os.urandom(8), "little")  # differs across restarts (invariant 3)
        self.local = LocalInterest()
        self.remote = Sublist()
        self.stats = RouteStats()
        self._send_fn = send
        self._rng = rng or random.Random()
        self._out: dict[str, Outbound] = {}  # peers with a current link
        self._views: dict[str, PeerView] = {}
        self._remote_subs: dict[str, dict[Key, RouteSub]] = {}
        self._resync_asked_s: dict[str, float] = {}
        self._batches: dict[str, list[bytes]] = {}  # peer -> encoded messages not yet sent
        self._batch_bytes: dict[str, int] = {}
        self._wake = trio.Event()
        # Route discovery from seed routes (`route_gossip`); None: the peers are configured by name.
        self.gossip: RouteGossip | None = None
        clients.sublist.observers.append(self._on_local_change)
        self.remote.observers.append(clients.count_ack_rival)  # a peer's ack interest ends the ack shortcut
        clients.forward = self.forward

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush interest changes and message batches as they come (once the code that made them yields);
        every `digest_interval_s`, a DIGEST or STATE per peer."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flush_loop)
            task_status.started()
            while True:
                await trio.sleep(self.digest_interval_s)
                self.maintain()

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self.flush()
            self.send_batches()

    # --- Looking inside (monitoring, tests) -----------------------------------------------------------------

    def interested_peers(self, subject: str) -> dict[str, int]:
        """Peer -> number of its advertised entries matching the literal `subject` (plain, queue groups)."""
        result = self.remote.match(subject)
        counts: dict[str, int] = {}
        for sub in (*result.plain, *(sub for members in result.queues for sub in members)):
            counts[sub.peer] = counts.get(sub.peer, 0) + 1
        return counts

    def synced(self, peer: str) -> bool:
        """Whether this node's view of `peer`'s interest is in sync with the last frame it sent."""
        view = self._views.get(peer)
        return view is not None and view.synced

    def waiting(self, peer: str) -> int:
        """Messages for `peer` batched here and not yet handed to the transport."""
        return len(self._batches.get(peer, ()))

    def advertised_by(self, peer: str) -> dict[Key, int]:
        """`peer`'s interest as this node holds it: (subject, queue or "") -> weight."""
        view = self._views.get(peer)
        return dict(view.interest.weights) if view is not None else {}

    # --- This node's interest out -------------------------------------------------------------------------

    def _on_local_change(self, sub: object, added: bool) -> None:
        if isinstance(sub, InternalSubscription):
            return  # local only (module docstring)
        key = (sub.subject, sub.queue or "")  # type: ignore[attr-defined]
        if self.local.change(key, 1 if added else -1):
            self._wake.set()

    def flush(self) -> None:
        """Send the pending interest changes to every peer that is in sync (invariants 3 and 4)."""
        pending = self.local.take_pending()
        if not pending:
            return
        entries = sorted(pending.items())
        for peer, out in self._out.items():
            if out.dirty:
                continue  # its next STATE carries these changes
            frames = route_wire.encode_delta(self.epoch, out.seq + 1, entries)
            out.seq += len(frames)
            self.stats.deltas_sent += len(frames)
            self._send_all(peer, out, frames)

    def _send_state(self, peer: str, out: Outbound) -> None:
        frames = route_wire.encode_state(self.epoch, out.seq + 1, sorted(self.local.advertised.items()))
        out.seq += len(frames)
        out.dirty = False
        self.stats.states_sent += 1
        self._send_all(peer, out, frames)

    def _send_all(self, peer: str, out: Outbound, frames: list[bytes]) -> None:
        for frame in frames:
            if not self._send_fn(peer, ROUTE_GROUP, frame):
                log.debug("routes %s: interest frame to %s dropped; a STATE follows", self.node_id, peer)
                out.dirty = True
                return

    def maintain(self) -> None:
        """One digest tick: a STATE to each dirty peer, a DIGEST to the others; RESYNC to each peer whose
        view here is out of sync (invariant 3)."""
        self.flush()
        advertised = self.local.advertised
        for peer, out in self._out.items():
            if out.dirty:
                self._send_state(peer, out)
            elif self._send_fn(peer, ROUTE_GROUP, route_wire.encode_digest(self.epoch, out.seq, len(advertised),
                                                                           advertised.digest)):
                self.stats.digests_sent += 1
            else:
                out.dirty = True
        for peer, view in self._views.items():
            if peer in self._out and not view.synced:
                self._ask_resync(peer, force=True)

    # --- Links ----------------------------------------------------------------------------------------------

    def on_link(self, peer: str, up: bool) -> None:
        """The transport's link callback: a full STATE on every new link; a lost peer's interest dropped."""
        if self.gossip is not None:
            self.gossip.on_link(peer, up)
        if up:
            self.flush()  # the other peers get pending changes as DELTAs; this one gets them in the STATE
            out = self._out.setdefault(peer, Outbound())
            self._send_state(peer, out)
            return
        self._out.pop(peer, None)
        self._resync_asked_s.pop(peer, None)
        self.stats.msgs_dropped += len(self._batches.pop(peer, ()))
        self._batch_bytes.pop(peer, None)
        view = self._views.pop(peer, None)
        if view is not None:
            self._apply(peer, view.clear())

    # --- Frames in ------------------------------------------------------------------------------------------

    def on_payload(self, from_node: str, payload: bytes) -> None:
        """A `$route` frame from `from_node` (called synchronously by the transport's reader); a malformed
        one raises `TransportProtocolError`, which closes that link."""
        frame = route_wire.decode(payload)
        if isinstance(frame, Msgs):
            self.stats.msgs_received += len(frame.messages)
            for msg in frame.messages:
                self.clients.deliver_routed(msg.subject, msg.subject_bytes, msg.reply, msg.headers, msg.payload,
                                            msg.queues)
            return
        if isinstance(frame, Gossip):
            if self.gossip is not None:  # a node whose peers are configured by name ignores gossip
                self.gossip.on_frame(from_node, frame)
            return
        view = self._views.get(from_node)
        if view is None:
            view = self._views[from_node] = PeerView(self.entries_max)
        if isinstance(frame, Interest):
            changes, lost = view.on_interest(frame)
            self._apply(from_node, changes)
            if lost:
                self._ask_resync(from_node)
        elif isinstance(frame, Digest):
            if view.check(frame):
                self._ask_resync(from_node)
        elif isinstance(frame, Resync):
            self._serve_resync(from_node)


    def _apply(self, peer: str, changes: list[tuple[Key, int, int]]) -> None:
        subs = self._remote_subs.setdefault(peer, {})
        for key, old, new in changes:
            if new == 0:
                self.remote.remove(subs.pop(key))
            elif old == 0:
                sub = subs[key] = RouteSub(peer, key, new)
                self.remote.insert(sub)
            else:
                subs[key].weight = new  # the sublist holds the object: no reinsert needed
        if not subs:
            del self._remote_subs[peer]

    def _ask_resync(self, peer: str, *, force: bool = False) -> None:
        now = trio.current_time()
        if not force and now - self._resync_asked_s.get(peer, float("-inf")) < self.digest_interval_s:
            return
        if self._send_fn(peer, ROUTE_GROUP, route_wire.encode_resync()):
            self._resync_asked_s[peer] = now
            self.stats.resyncs_requested += 1
            log.info("routes %s: interest of %s out of sync; asked for a full STATE", self.node_id, peer)

    def _serve_resync(self, peer: str) -> None:
        out = self._out.get(peer)
        if out is None:
            return
        self.flush()
        now = trio.current_time()
        if now - out.resync_served_s >= self.digest_interval_s / 2:
            out.resync_served_s = now
            self.stats.resyncs_served += 1
            self._send_state(peer, out)
        else:
            out.dirty = True  # a peer asking this often gets its STATE at the next tick, not on demand

    # --- Messages out ---------------------------------------------------------------------------------------

    def forward(self, subject: str, reply: str | None, headers: bytes | None, payload: bytes,
                served: Collection[str], shown: str | None = None) -> bool:
        """`ClientServer.forward`: one copy to each interested peer (invariant 2), batched per peer until
        the code that published yields; True if any peer was given one. `shown`: the subject the peer's
        subscribers see instead of `subject` (`ClientServer.deliver_as`)."""
        if self.local.pending:
            self.flush()  # invariant 4
        if not len(self.remote):
            return False
        result = self.remote.match(subject)
        if not (result.plain or result.queues):
            return False
        targets: dict[str, list[str]] = {sub.peer: [] for sub in result.plain}
        for members in result.queues:
            name = members[0].queue
            if name not in served:
                targets.setdefault(self._pick(members).peer, []).append(name)
        subject_bytes = wire_text(subject)
        reply_bytes = wire_text(reply) if reply else None
        shown_bytes = wire_text(shown) if shown else None
        plain: bytes | None = None
        for peer, queues in targets.items():
            if queues:
                message = route_wire.encode_msg(subject_bytes, reply_bytes, queues, headers, payload, shown_bytes)
            else:
                if plain is None:
                    plain = route_wire.encode_msg(subject_bytes, reply_bytes, (), headers, payload, shown_bytes)
                message = plain
            self._batch(peer, message)
        return True

    def _batch(self, peer: str, message: bytes) -> None:
        batch = self._batches.setdefault(peer, [])
        if batch and self._batch_bytes[peer] + len(message) > MSGS_BATCH_BYTES_MAX:
            self._send_batch(peer)
            batch = self._batches.setdefault(peer, [])
        batch.append(message)
        self._batch_bytes[peer] = self._batch_bytes.get(peer, 0) + len(message)
        if self._batch_bytes[peer] >= MSGS_BATCH_BYTES_MAX:
            self._send_batch(peer)
        else:
            self._wake.set()

    def send_batches(self) -> None:
        """Send every peer's waiting messages (the flush task does, once the publishing code yielded)."""
        for peer in list(self._batches):
            self._send_batch(peer)

    def send_pending(self, peer: str) -> None:
        """Hand the transport, now, the interest changes and the messages waiting for `peer`: called before
        a frame of another kind (`$rpc`) goes to `peer`, so that frame follows them on the link
        (invariant 7). O(1) when nothing waits."""
        if self.local.pending:
            self.flush()
        if peer in self._batches:
            self._send_batch(peer)

    def _send_batch(self, peer: str) -> None:
        batch = self._batches.pop(peer)
        self._batch_bytes.pop(peer, None)
        frame = route_wire.encode_msgs(batch)
        try:
            sent = self._send_fn(peer, ROUTE_GROUP, frame, headroom=MSGS_HEADROOM)
        except FrameTooLarge as error:
            log.warning("routes %s: %d messages not forwarded to %s: %s", self.node_id, len(batch), peer, error)
            sent = False
        if sent:
            self.stats.msgs_forwarded += len(batch)
            self.stats.batches_sent += 1
        else:
            self.stats.msgs_dropped += len(batch)
            log.debug("routes %s: %d messages for %s dropped: no link or its queue is full",
                      self.node_id, len(batch), peer)

    def _pick(self, members: tuple[RouteSub, ...]) -> RouteSub:
        """A queue group's peer entry, at random in proportion to its members (nats-server's weights)."""
        if len(members) == 1:
            return members[0]
        point = self._rng.randrange(sum(member.weight for member in members))
        for member in members:
            point -= member.weight
            if point < 0:
                return member
        return members[-1]
