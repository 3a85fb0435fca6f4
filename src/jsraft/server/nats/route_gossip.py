"""`RouteGossip`: a core-NATS cluster that grows from seed routes into a full mesh (L5).

Owns: route discovery for nodes started with bare routes (`NodeConfig.seed_routes`, nats-server's
`--routes nats://HOST:PORT` without names). Each node tells every peer, on every new link and whenever
it learns of another node, its own cluster address and the addresses of the nodes it is linked to (a
`route_wire` GOSSIP frame on `$route`); a node that hears of one it does not know gives it to the
transport (`add_peer`), which dials it. So three nodes that each name only the first one end up linked
pairwise — nats-server's route gossip (its INFO on routes carries the cluster's route URLs). The client
URLs those nodes serve reach clients through `cluster_urls`.

Decision — gossip grows the routing mesh, never a Raft group. A node met by gossip carries subject
interest and messages (`routes`) and lends its client URL to INFO's `connect_urls`; it is not an
`online` server for the meta group (`Node.online`), so it is never placed a replica nor added as a meta
learner or voter. A JetStream cluster's membership stays what its named peers and its meta log say.

Invariants:
  1. This node itself is never added (its own name is skipped), and a node's address is taken from that
     node's own word when it has spoken (its GOSSIP's sender address), else from the first relay.
  2. An address a node advertises on a wildcard host (`0.0.0.0`, `::`) is reached at the host its link
     comes from (what nats-server does with a route's advertised URL when it has no host).
  3. Only linked nodes are relayed: a node that is gone is not spread further by this one.
  4. What a peer gossips is bounded and checked (`route_wire` invariant 1, `GOSSIP_NODES_MAX`).

Imports: stdlib, L0, L4 (`transport`'s `add_peer`), server siblings (`route_wire`).
Reference: nats-server `server/route.go` (`processRouteInfo`, `forwardNewRouteInfoToKnownServers`,
implicit routes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from jsraft.server.nats import route_wire
from jsraft.server.nats.route_wire import ROUTE_GROUP, Gossip
from jsraft.transport import add_peer

if TYPE_CHECKING:
    from jsraft.server.nats.routes import Routes
    from jsraft.transport import Transport

log = logging.getLogger("jsraft.server.nats.routes")

_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
Address = tuple[str, int]


def split_address(text: str) -> Address:
    """`"host:port"` (a bracketed IPv6 host allowed) -> `(host, port)`; `route_wire` checked its shape."""
    host, _, port = text.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


class RouteGossip:
    """See the module docstring. `own_address`: this node's cluster "host:port"; `add_peer`: the
    transport's; `send`: `Transport.send`; `linked`: the peers with a current link; `remote_host`: the
    host a peer's current link comes from (None without one)."""

    def __init__(self, node_id: str, *, own_address: Callable[[], str], add_peer: Callable[[str, Address], None],
                 send: Callable[[str, str, bytes], bool], linked: Callable[[], set[str]],
                 remote_host: Callable[[str], str | None]) -> None:
        self.node_id = node_id
        self.own_address = own_address
        self._add_peer = add_peer
        self._send = send
        self._linked = linked
        self._remote_host = remote_host
        self.addresses: dict[str, str] = {}  # node -> its cluster "host:port"
        self._heard_from: set[str] = set()  # nodes whose address came from their own word (invariant 1)
        self.frames_sent = 0

    def frame(self) -> bytes:
        linked = self._linked()
        return route_wire.encode_gossip(self.own_address(),
                                        {name: where for name, where in self.addresses.items() if name in linked})

    def on_link(self, peer: str, up: bool) -> None:
        """A new link: tell that peer what this node knows (the transport's link callback, via `Routes`)."""
        if up:
            self._send_to(peer, self.frame())

    def on_frame(self, peer: str, frame: Gossip) -> None:
        """`peer`'s GOSSIP: learn its address and the nodes it knows; tell the others if that was news."""
        learned = False
        if frame.address:
            address = self._reachable(peer, frame.address)
            if self.addresses.get(peer) != address:
                self._heard_from.add(peer)
                learned |= self._learn(peer, address)
        for name, where in frame.nodes.items():
            if name != self.node_id and name not in self._heard_from and name not in self.addresses:
                learned |= self._learn(name, where)
        if learned:
            encoded = self.frame()
            for other in sorted(self._linked() - {peer}):
                self._send_to(other, encoded)

    def _learn(self, name: str, address: str) -> bool:
        if name == self.node_id:
            return False
        self.addresses[name] = address
        log.info("routes %s: node %s is at %s", self.node_id, name, address)
        self._add_peer(name, split_address(address))
        return True

    def _reachable(self, peer: str, address: str) -> str:
        """Invariant 2: a wildcard host becomes the host `peer`'s link comes from."""
        host, port = split_address(address)
        if host not in _WILDCARD_HOSTS:
            return address
        remote = self._remote_host(peer)
        if remote is None:
            return address
        return f"[{remote}]:{port}" if ":" in remote else f"{remote}:{port}"

    def _send_to(self, peer: str, frame: bytes) -> None:
        if self._send(peer, ROUTE_GROUP, frame):
            self.frames_sent += 1


def install(name: str, transport: "Transport", routes: "Routes",
            cluster_address: Callable[[], tuple[str, int] | None], linked: Callable[[], set[str]]) -> RouteGossip:
    """Give a node's `routes` a gossip (the node was started with seed routes) and return it."""

    def own_address() -> str:
        host, port = cluster_address() or transport.listen_address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def remote_host(peer: str) -> str | None:
        status = transport.peer_status().get(peer)
        return status.remote_address[0] if status is not None and status.remote_address else None

    gossip = RouteGossip(name, own_address=own_address, add_peer=partial(add_peer, transport),
                         send=transport.send, linked=linked, remote_host=remote_host)
    routes.gossip = gossip
    return gossip
