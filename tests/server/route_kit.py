"""Helpers for the cluster-routing tests: an in-memory mesh of `Routes` (no sockets) and fake subscriptions.

Method: `Mesh` builds one `ClientServer` (never listening) and one `Routes` per node name and joins them
with links that queue frames in memory; `pump()` delivers every queued frame in order, so a test decides
exactly when frames move and what happens to them. Two kinds of loss, as on the real transport: a send
the transport refuses (`refuse`: queue full — the sender sees False) and a frame that was accepted and
then lost (`lose`: the link died mid-write — the sender does not know). `Sub` stands in for a client
subscription and records what it was given.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from jsraft.server.nats.client_server import ClientOptions, ClientServer
from jsraft.server.nats.route_wire import ROUTE_GROUP, Kind, decode
from jsraft.server.nats.routes import Routes

FrameFilter = Callable[[str, str, bytes], bool]  # (from, to, payload) -> True to drop it


class Sub:
    """A client subscription as the sublist and `deliver_routed` see one."""

    def __init__(self, subject: str, queue: str | None = None) -> None:
        self.subject = subject
        self.queue = queue
        self.got: list[tuple[bytes, bytes | None, bytes | None, bytes]] = []

    def deliver(self, origin: Any, subject: bytes, reply: bytes | None, headers: bytes | None,
                payload: bytes) -> bool:
        self.got.append((subject, reply, headers, payload))
        return True

    def payloads(self) -> list[bytes]:
        return [payload for _, _, _, payload in self.got]

    def __repr__(self) -> str:
        return f"Sub({self.subject!r}, {self.queue!r})"


def kind_of(payload: bytes) -> Kind:
    return Kind(payload[0])


class Mesh:
    def __init__(self, names: list[str], *, seed: int = 1, digest_interval_s: float = 1.0) -> None:
        self.names = names
        self.clients: dict[str, ClientServer] = {}
        self.routes: dict[str, Routes] = {}
        self.frames: deque[tuple[str, str, bytes]] = deque()
        self.links: set[frozenset[str]] = set()
        self.refuse: FrameFilter = lambda *_: False
        self.lose: FrameFilter = lambda *_: False
        self.seed = seed
        self.digest_interval_s = digest_interval_s
        for name in names:
            self.start(name)

    def start(self, name: str) -> Routes:
        """(Re)build node `name`: a fresh ClientServer and Routes (a new epoch, as after a restart)."""
        clients = ClientServer(ClientOptions(port=0), server_id=name.upper(), server_name=name,
                               rng=random.Random(self.seed))
        routes = Routes(name, clients, lambda to, group, payload, headroom=0.0: self._send(name, to, group, payload),
                        digest_interval_s=self.digest_interval_s, rng=random.Random(self.seed))
        self.clients[name], self.routes[name] = clients, routes
        return routes

    def _send(self, origin: str, to: str, group: str, payload: bytes) -> bool:
        assert group == ROUTE_GROUP
        decode(payload)  # whatever a node sends must decode
        if frozenset((origin, to)) not in self.links or self.refuse(origin, to, payload):
            return False
        if not self.lose(origin, to, payload):
            self.frames.append((origin, to, payload))
        return True

    def up(self, a: str, b: str) -> None:
        self.links.add(frozenset((a, b)))
        self.routes[a].on_link(b, True)
        self.routes[b].on_link(a, True)

    def down(self, a: str, b: str) -> None:
        self.links.discard(frozenset((a, b)))
        self.frames = deque(f for f in self.frames if {f[0], f[1]} != {a, b})
        self.routes[a].on_link(b, False)
        self.routes[b].on_link(a, False)

    def connect_all(self) -> None:
        for i, a in enumerate(self.names):
            for b in self.names[i + 1:]:
                self.up(a, b)
        self.pump()

    def pump(self, frames_max: int = 100_000) -> int:
        """Deliver queued frames in order (each may queue more) until none is left; how many moved."""
        moved = 0
        while self.frames:
            assert moved < frames_max, "frames keep coming: a loop between nodes?"
            origin, to, payload = self.frames.popleft()
            self.routes[to].on_payload(origin, payload)
            moved += 1
        return moved

    def subscribe(self, name: str, subject: str, queue: str | None = None) -> Sub:
        sub = Sub(subject, queue)
        self.clients[name].sublist.insert(sub)
        return sub

    def unsubscribe(self, name: str, sub: Sub) -> None:
        assert self.clients[name].sublist.remove(sub)

    def publish(self, name: str, subject: str, payload: bytes = b"", reply: str | None = None,
                headers: bytes | None = None) -> bool:
        delivered = self.clients[name].route(None, subject, reply, headers, payload)
        self.routes[name].send_batches()  # what the flush task does once the publisher yields
        self.pump()
        return delivered

    def flush(self) -> None:
        """What each node's flush task does after subscriptions changed, then deliver it."""
        for routes in self.routes.values():
            routes.flush()
        self.pump()

    async def tick(self) -> None:
        """Let one digest interval pass (use `autojump_clock`), run every node's digest tick, deliver."""
        await trio.sleep(self.digest_interval_s)
        for routes in self.routes.values():
            routes.maintain()
        self.pump()
