"""Open membership: peers met at run time, and seed routes dialed by address alone (layer L4, trio).

Owns: `add_peer` (a peer joins the table without touching the others: one that dialed in, or one route
gossip named), `start_seed` and `seed_loop`, the dialer of one bare route (`nats://HOST:PORT`, nats-server's `--routes` without
names). It dials the address until a node of this cluster answers the handshake, serves that link as the
node's (`Transport.serve_adopted`: the node joins the peer table, open membership), and once that node has
no link any more dials the address again — the node found there the next time may be another one (a
restarted nats-style node without a stored name comes back under a new one).

Invariants:
  1. A route to this node itself is ignored: an address equal to the cluster listener's is never dialed,
     and a listener that refuses the handshake because the dialer has its own name (the node dialed
     itself through another address, say a wildcard listener) ends the loop. nats-server likewise drops
     a route whose server id is its own.
  2. Failed dials back off (`Backoff`, as the per-peer dialers do); nothing here blocks `Transport.send`.
  3. The loop ends with the transport (its nursery) and never outlives it.

This module is the transport's own extension (its peer table, nursery and link serving): it reaches into
`Transport`'s private parts, as the transport's methods do, and nothing outside the package does.

Imports: stdlib, L0, trio, transport siblings. Reference: nats-server `server/route.go` (solicited routes,
`isRouteToSelf`-style duplicate-server-id checks).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from jsraft.errors import invariant
from jsraft.transport.backoff import Backoff
from jsraft.transport.errors import HandshakeRefused
from jsraft.transport.link import LINK_ENDING_ERRORS, Address, Direction, Link
from jsraft.transport.peer import DUPLICATE_REASON, Peer
from jsraft.transport.send_queue import SendQueue
from jsraft.transport.wire import check_name

if TYPE_CHECKING:
    from jsraft.transport.transport import Transport

log = logging.getLogger("jsraft.transport")

# What an acceptor answers a dialer that presents the acceptor's own name (`wire.check_hello`).
_OWN_NAME_REFUSAL = "claims this node's own name"


def add_peer(transport: "Transport", node_id: str, address: Address | None) -> None:
    """Learn `node_id` (or give it an address) without touching the other peers. A peer already dialable
    keeps its address and its link; one given its first address gets a dialer."""
    if node_id == transport.node_id:
        return
    check_name(node_id, "peer node id")
    config = transport.config
    peer = transport._peers.get(node_id)
    if peer is None:
        peer = Peer(node_id, None, SendQueue(config.send_queue_frames_max, config.send_queue_bytes_max))
        transport._peers[node_id] = peer
    if peer.address is None and address is not None:
        peer.address = (str(address[0]), int(address[1]))
        if transport._nursery is not None and peer.dialer_scope is None:
            transport._start_dialer(peer)


def start_seed(transport: "Transport", address: Address) -> None:
    """Dial the bare route `address` for as long as `transport` runs (`seed_loop`)."""
    invariant(transport.open_membership and transport._nursery is not None, "seeds need open membership, running")
    transport._nursery.start_soon(seed_loop, transport, (str(address[0]), int(address[1])))  # type: ignore[union-attr]


def is_own_address(transport: "Transport", address: Address) -> bool:
    """Whether `address` is this transport's own cluster listener (invariant 1's cheap half)."""
    host, port = transport.listen_address
    return port == address[1] and host == address[0]


async def seed_loop(transport: "Transport", address: Address) -> None:
    """Dial the seed at `address` for as long as the transport runs (module docstring)."""
    where = f"{address[0]}:{address[1]}"
    if is_own_address(transport, address):
        log.info("transport %s: route %s is this node's own listener: ignored", transport.node_id, where)
        return
    backoff = Backoff(transport.config.backoff_initial_s, transport.config.backoff_max_s, transport._rng)
    while True:
        known = _connected_at(transport, address)
        if known is not None:  # that node is linked already (it dialed in): no second connection
            await _wait_disconnected(transport, known)
            continue
        link = await _dial_seed(transport, address)
        if link is _SELF:
            log.info("transport %s: route %s leads to this node itself: ignored", transport.node_id, where)
            return
        if link is None:
            await trio.sleep(backoff.next_delay())
            continue
        name = link.remote.node_name  # type: ignore[union-attr]
        backoff.reset()
        try:
            log.info("transport %s: route %s is node %s", transport.node_id, where, name)
            await _serve_adopted(transport, link)
        finally:
            await link.close()
        await _wait_disconnected(transport, name)
        await trio.sleep(backoff.next_delay())


_SELF = object()


async def _serve_adopted(transport: "Transport", link: Link) -> None:
    """Serve `link`, dialed to a seed and handshaken, as its node's link (the node joins the peer table),
    until it ends; at once if that node already has a link that wins (`Peer.offer`)."""
    name = link.remote.node_name  # type: ignore[union-attr]
    add_peer(transport, name, None)
    peer = transport._peers[name]
    if peer.offer(transport.node_id, link):
        await transport._serve(peer, link)


def _connected_at(transport: "Transport", address: Address) -> str | None:
    """The node with a current link whose cluster address is `address`, if one is known."""
    for name, status in transport.peer_status().items():
        if status.address == address and status.connected:
            return name
    return None


async def _wait_disconnected(transport: "Transport", name: str) -> None:
    """Return once `name` has no current link (at once if it is unknown)."""
    while (peer := transport._peers.get(name)) is not None and not peer.disconnected.is_set():
        await peer.disconnected.wait()


async def _dial_seed(transport: "Transport", address: Address) -> Link | object | None:
    """A handshaken link to whichever node listens at `address`; `_SELF` when that is this node; None
    (logged at debug level: a seed that is not up yet is normal) when the dial or handshake failed."""
    host, port = address
    try:
        with trio.fail_after(transport.config.dial_timeout_s):
            stream = await trio.open_tcp_stream(host, port, local_address=transport.bind_host)
    except (OSError, trio.TooSlowError) as exc:
        log.debug("transport %s: seed %s:%d: %s", transport.node_id, host, port, exc or "timed out")
        return None
    link = Link(stream, Direction.OUTBOUND)
    try:
        await transport.handshake_outbound(link, None)
        return link
    except HandshakeRefused as exc:
        if _OWN_NAME_REFUSAL in exc.reason:
            await link.close()
            return _SELF
        # A duplicate: the node there dialed this one first; its address arrives by gossip (`connected_at`).
        level = logging.DEBUG if DUPLICATE_REASON in exc.reason else logging.WARNING
        log.log(level, "transport %s: seed %s:%d refused: %s", transport.node_id, host, port, exc.reason)
    except (*LINK_ENDING_ERRORS, trio.TooSlowError) as exc:
        log.info("transport %s: seed %s:%d: handshake failed: %s", transport.node_id, host, port,
                 exc or "timed out")
    await link.close()
    return None
