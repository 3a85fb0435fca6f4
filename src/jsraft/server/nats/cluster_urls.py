"""The client URLs of the cluster's nodes, for INFO's `connect_urls` (L5).

Owns: the `node.client_url` request (this node's client `host:port`), learning each connected peer's
with it, the list INFO advertises (`ClusterUrls.connect_urls`: this node's first, then its connected
peers' in name order, as nats-server lists its own first), and the asynchronous INFO sent to the
clients when that list changes, so a client learns of a node that came up after it connected — what
nats-server does when a route comes or goes. nats-py adds every listed URL to its server pool and
reconnects to one of them when its server goes away.

Invariants:
  1. Only connected peers' URLs are advertised: a peer whose link went down drops out at the next
     refresh, and is asked again once it is back (its port may have changed).
  2. A standalone node advertises none (INFO has no `connect_urls`, as a standalone nats-server's).
  3. A node bound to a wildcard host (`0.0.0.0`, `::`) advertises no URL of its own: it cannot know
     which of its addresses a client can reach (nats-server's `client_advertise` is not supported).
  4. The asynchronous INFO goes only to clients past their handshake (`ClientConn.handshaken`: a PONG
     was sent), so it never lands between a client's CONNECT and its first PONG.
  5. Every linked node counts, configured or met by route gossip (`Node.route_peers`), and a link that
     comes or goes refreshes at once (`wake`), not only every `refresh_s`: a client learns of a node
     that joined within a round trip, as from nats-server.
  6. Lame duck mode (`server.ops.lame_duck`): a node in it advertises no URL of its own (to its clients and
     to peers that ask) and tells each linked peer (`leave`), which drops its URL at once and asks it no
     more until its link goes down (a node back after that is a new process) — what nats-server's LDM
     INFO to routes does, so clients told to move are not sent back to it.
  7. `lame_ducks()`: the linked peers in lame duck mode and this node once it entered it — what the meta
     leader places no new replica on (`meta_service` invariant 5) and a lame duck hands no leadership to.

Imports: stdlib, L0, trio, server siblings (the client server, under TYPE_CHECKING). Reference: nats-server `server/route.go`
(`addConnectURLsAndSendINFOToClients`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import JsraftError

if TYPE_CHECKING:
    from jsraft.server.nats.client_server import ClientServer

# `Rpc.call` as used here: (peer, method, args, timeout_s=) -> (answer, blobs).
AskPeer = Callable[..., Awaitable[tuple[Any, Any]]]

ASK_TIMEOUT_S = 1.0
ASK_AGAIN_S = 0.05
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class ClusterUrls:
    """Learns the peers' client URLs and keeps the node's clients told (module docstring)."""

    def __init__(self, *, clients: "ClientServer", client_address: Callable[[], tuple[str, int] | None],
                 route_peers: Callable[[], set[str]], ask_peer: AskPeer, enabled: bool, refresh_s: float) -> None:
        self.clients = clients
        self.client_address = client_address  # this node's bound client address, once bound
        self.route_peers = route_peers  # every linked node (invariant 5)
        self.ask_peer = ask_peer
        self.enabled = enabled  # clustered, or started with seed routes (invariant 2)
        self.refresh_s = refresh_s
        self.peer_urls: dict[str, str] = {}  # connected peer -> its client host:port
        self.connect_urls: list[str] | None = None  # None: not clustered, INFO has no key (invariant 2)
        self.lame_duck_peers: set[str] = set()  # linked peers in lame duck mode (invariant 6)
        self._wake = trio.Event()

    def wake(self) -> None:
        """A link came or went: refresh now (invariant 5)."""
        self._wake.set()

    def register(self, table: dict[str, Any]) -> None:
        table["node.client_url"] = self.client_url
        table["node.lame_duck"] = self._peer_lame_duck

    def own_url(self) -> str:
        """This node's client `host:port`, or "" when it is bound to a wildcard host (invariant 3) or in lame
        duck mode (invariant 6)."""
        address = self.client_address()
        if address is None or address[0] in _WILDCARD_HOSTS or self.clients.lame_duck:
            return ""
        host = f"[{address[0]}]" if ":" in address[0] else address[0]
        return f"{host}:{address[1]}"

    async def client_url(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, tuple[()]]:
        return {"url": self.own_url()}, ()

    async def run(self) -> None:
        """Refresh every `refresh_s` until cancelled."""
        if not self.enabled:
            return
        while True:
            self._wake = trio.Event()
            await self.refresh()
            with trio.move_on_after(self.refresh_s):
                await self._wake.wait()

    async def refresh(self, *, announce: bool = True) -> None:
        online = self.route_peers()
        self.lame_duck_peers &= online  # invariant 6: a link that went down forgets it
        self.peer_urls = {peer: url for peer, url in self.peer_urls.items()
                          if peer in online and peer not in self.lame_duck_peers}  # invariants 1, 6
        async with trio.open_nursery() as nursery:
            for peer in sorted(online - set(self.peer_urls) - self.lame_duck_peers):
                nursery.start_soon(self._ask, peer)
        own = self.own_url()
        urls = ([own] if own else []) + [self.peer_urls[peer] for peer in sorted(self.peer_urls)]
        if urls != self.connect_urls:
            self.connect_urls = urls
            self.clients.connect_urls = urls
            if announce:
                self.clients.announce_info()

    def lame_ducks(self) -> set[str]:
        """Invariant 7."""
        return self.lame_duck_peers | ({self.clients.server_name} if self.clients.lame_duck else set())

    async def leave(self) -> None:
        """This node entered lame duck mode (invariant 6): INFO's list without its own URL (the caller
        announces it), and every linked peer told, together, each for at most `ASK_TIMEOUT_S`."""
        if not self.enabled:
            return
        await self.refresh(announce=False)

        async def tell(peer: str) -> None:
            try:
                await self.ask_peer(peer, "node.lame_duck", {"name": self.clients.server_name},
                                    timeout_s=ASK_TIMEOUT_S)
            except JsraftError:
                pass  # down, or of a build without lame duck mode: its list drops us when the link goes
        async with trio.open_nursery() as nursery:
            for peer in sorted(self.route_peers()):
                nursery.start_soon(tell, peer)

    async def _peer_lame_duck(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, tuple[()]]:
        """A peer entered lame duck mode: its URL leaves the list now (invariant 6)."""
        self.lame_duck_peers.add(str(args.get("name") or ""))
        self.wake()
        return {"ok": True}, ()

    async def _ask(self, peer: str) -> None:
        """Ask `peer` for its client URL; a peer that has none yet (linked before its client listener was
        bound) is asked again every `ASK_AGAIN_S` for `ASK_TIMEOUT_S`, then at the next refresh."""
        deadline = trio.current_time() + ASK_TIMEOUT_S
        while True:
            try:
                answer, _ = await self.ask_peer(peer, "node.client_url", {}, timeout_s=ASK_TIMEOUT_S)
            except JsraftError:
                return  # asked again at the next refresh
            url = str(answer.get("url") or "") if isinstance(answer, dict) else ""
            if url:
                self.peer_urls[peer] = url
                return
            if trio.current_time() + ASK_AGAIN_S > deadline:
                return
            await trio.sleep(ASK_AGAIN_S)
