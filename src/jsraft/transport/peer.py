"""What the transport knows about one peer: its address, queue, counters and current link (layer L4).

Owns: the choice of which connection carries a node pair's traffic. Both nodes dial each other when they
have no link, so two connections can complete at once; `new_link_wins()` picks one the same way on both
sides, and `Peer.offer()` applies it.

The rule, for a new handshaken connection while another one is current:
  1. The peer's HELLO carries a new incarnation: the peer restarted, so the old connection is dead. New wins.
  2. Otherwise the connection dialed by the lower node id is canonical. A new canonical one wins (the old
     one is a leftover the dialer has given up on); a new non-canonical one wins only over another
     non-canonical one. Both nodes see the same two connections and the same ids, so they keep the same.

Invariants:
  1. A peer has at most one current link; a superseded link is cancelled as it is replaced.
  2. The send queue holds frames only while a link is current: when the last link ends the queue is
     cleared and its frames counted as dropped, so nothing stale waits for a reconnect.
  3. `disconnected` is set exactly when there is no current link (the dialer waits on it).

Imports: stdlib, L0, attrs, trio, transport siblings. Reference: nats-server likewise keeps one route per
server pair and closes the extra one (close reason `DuplicateRoute`); here the choice is a pure function
both sides evaluate identically, tested as a table.
"""

from __future__ import annotations

import logging
import uuid

import attrs
import trio

from jsraft.errors import invariant
from jsraft.transport.link import Address, Counters, Direction, Link
from jsraft.transport.send_queue import SendQueue

log = logging.getLogger("jsraft.transport")

# Why an acceptor refuses a second connection of a node pair (`Transport`, `seeds`).
DUPLICATE_REASON = "a connection between these nodes already exists"


@attrs.frozen(kw_only=True)
class PeerStatus:
    """A snapshot of one peer's link for monitoring (`/varz`-style) and tests."""

    node_id: str
    address: Address | None  # None: a peer that dialed in, whose own address is not known yet
    connected: bool
    direction: str | None  # "outbound" (we dialed) or "inbound", None when disconnected
    local_address: Address | None
    remote_address: Address | None
    storage_uuid: uuid.UUID | None  # from the peer's last HELLO
    queued_frames: int
    queued_bytes: int
    # Accepted-then-lost and refused frames: sends refused (queue full, no link), frames cleared from the
    # queue when the link died, frames of a write the dying link did not finish.
    dropped: int
    frames_sent: int  # written to the socket, PINGs included
    frames_received: int
    bytes_sent: int
    bytes_received: int
    links_established: int
    dialing: bool  # a connection attempt is in flight (connect or handshake)
    reconnects: int  # links established after a disconnection (not replacements of a live link)
    dial_failures: int
    protocol_errors: int  # links closed because the peer broke the protocol
    last_error: str | None


def new_link_wins(local_id: str, peer_id: str, new: Link, old: Link) -> bool:
    """Whether `new` replaces the current `old` (the module docstring's rule)."""
    invariant(new.remote is not None and old.remote is not None, "both links have completed a handshake")
    if new.remote.incarnation != old.remote.incarnation:  # type: ignore[union-attr]
        return True
    canonical_dialer = min(local_id, peer_id)

    def dialer(link: Link) -> str:
        return local_id if link.direction is Direction.OUTBOUND else peer_id

    return dialer(new) == canonical_dialer or dialer(old) != canonical_dialer


class Peer:
    def __init__(self, node_id: str, address: Address | None, queue: SendQueue) -> None:
        self.node_id = node_id
        self.address = address
        self.queue = queue
        self.counters = Counters()
        self.link: Link | None = None
        self.disconnected = trio.Event()
        self.disconnected.set()
        self.dialer_scope: trio.CancelScope | None = None
        self.storage_uuid: uuid.UUID | None = None
        self.links_established = 0
        self.reconnects = 0
        self.dial_failures = 0
        self.dialing = False
        self.protocol_errors = 0
        self.last_error: str | None = None

    def offer(self, local_id: str, link: Link) -> bool:
        """Make `link` current unless the current one wins; a superseded link is cancelled (invariant 1)."""
        invariant(link.remote is not None and link.remote.node_name == self.node_id, "link is to this peer")
        old = self.link
        if old is not None and not new_link_wins(local_id, self.node_id, link, old):
            return False
        if old is not None:
            old.cancel_scope.cancel()
        elif self.links_established:
            self.reconnects += 1
        self._note_identity(link)
        self.link = link
        self.links_established += 1
        if self.disconnected.is_set():
            self.disconnected = trio.Event()
        return True

    def _note_identity(self, link: Link) -> None:
        remote_uuid = link.remote.storage_uuid  # type: ignore[union-attr]
        if self.storage_uuid is not None and remote_uuid != self.storage_uuid:
            # Not refused: Raft decides what a replaced data directory means (the peer will be repairing).
            log.warning("peer %s storage UUID changed from %s to %s: its data directory was replaced",
                        self.node_id, self.storage_uuid, remote_uuid)
        self.storage_uuid = remote_uuid

    def link_ended(self, link: Link) -> None:
        """`link` stopped; if it was current, the peer is disconnected (invariants 2 and 3)."""
        if self.link is not link:
            return
        self.link = None
        self.counters.dropped += self.queue.clear()
        self.disconnected.set()

    def close(self) -> None:
        """The peer left the configuration: stop dialing it and drop its link."""
        if self.dialer_scope is not None:
            self.dialer_scope.cancel()
        if self.link is not None:
            self.link.cancel_scope.cancel()
            self.link_ended(self.link)

    def status(self) -> PeerStatus:
        link, counters = self.link, self.counters
        return PeerStatus(
            node_id=self.node_id, address=self.address, connected=link is not None,
            direction=link.direction.value if link else None,
            local_address=link.local_address if link else None,
            remote_address=link.remote_address if link else None,
            storage_uuid=self.storage_uuid, queued_frames=len(self.queue), queued_bytes=self.queue.queued_bytes,
            dropped=counters.dropped, frames_sent=counters.frames_sent, frames_received=counters.frames_received,
            bytes_sent=counters.bytes_sent, bytes_received=counters.bytes_received,
            links_established=self.links_established, dialing=self.dialing, reconnects=self.reconnects,
            dial_failures=self.dial_failures, protocol_errors=self.protocol_errors, last_error=self.last_error,
        )
