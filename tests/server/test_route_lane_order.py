"""One lane per node pair: an `$rpc` frame leaves after the messages the routes batched for the same peer
(routes invariant 7, rpc invariant 6), without sockets.

Method: two nodes, each a `ClientServer` (never listening), its `Routes` and its `Rpc`, joined by one
in-memory link that hands every frame to the other side at once, in send order, and logs what arrived
(the transport keeps one FIFO queue per peer, so send order is arrival order). The routes' flush task is
not running: a forwarded message waits in its batch until something sends it, which is the window the
flush task leaves open on a real node while the code that published runs on. n2 calls n1; n1's handler
publishes to n2's subscriber and returns. With `before_send` wired (as `server.node` wires it) the
messages arrive before the answer; without it the answer arrives alone, which is the ordering the
first test rules out. The one exception, a consumer create's answer, goes first even when wired.
"""

from __future__ import annotations

import random
from typing import Any

import trio

from jsraft.server.groups.rpc import RPC_GROUP, Rpc
from jsraft.server.nats.client_server import ClientOptions, ClientServer
from jsraft.server.nats.route_wire import ROUTE_GROUP
from jsraft.server.nats.routes import Routes
from route_kit import Sub

NAMES = ("n1", "n2")


class Pair:
    def __init__(self, *, wired: bool) -> None:
        self.log: list[tuple[str, Any]] = []
        self.routes: dict[str, Routes] = {}
        self.rpc: dict[str, Rpc] = {}
        self.clients: dict[str, ClientServer] = {}
        for name in NAMES:
            clients = ClientServer(ClientOptions(port=0), server_id=name.upper(), server_name=name,
                                   rng=random.Random(1))
            routes = Routes(name, clients, self._sender(name), rng=random.Random(1))
            before = routes.send_pending if wired else None
            self.rpc[name] = Rpc(self._sender(name), self._handler(name), before_send=before)
            self.clients[name], self.routes[name] = clients, routes
        for name in NAMES:
            self.routes[name].on_link(self._other(name), True)

    @staticmethod
    def _other(name: str) -> str:
        return NAMES[1 - NAMES.index(name)]

    def _sender(self, me: str) -> Any:
        def send(to: str, group: str, payload: bytes, *, headroom: float = 0.0) -> bool:
            if group == ROUTE_GROUP:
                self.routes[to].on_payload(me, payload)
            else:
                assert group == RPC_GROUP
                self.log.append(("rpc", to))
                self.rpc[to].on_payload(me, payload)
            return True
        return send

    def _handler(self, me: str) -> Any:
        async def handler(from_node: str, method: str, args: dict[str, Any], blobs: list[bytes]) -> Any:
            for i in range(int(args["count"])):
                self.clients[me].publish("deliver.w", b"m%d" % i)  # batched for the peer, not yet sent
            return {"answered": True}, []
        return handler

    def subscribe(self, name: str, subject: str) -> Sub:
        sub = Sub(subject)
        original = sub.deliver

        def deliver(*args: Any) -> bool:
            self.log.append(("msg", args[4]))
            return original(*args)

        sub.deliver = deliver  # type: ignore[method-assign]
        self.clients[name].sublist.insert(sub)
        self.routes[name].flush()  # what n2's flush task does: n1 learns of the subscription
        return sub


async def _call_and_log(wired: bool, method: str = "consumer.info") -> list[tuple[str, Any]]:
    pair = Pair(wired=wired)
    pair.subscribe("n2", "deliver.w")
    pair.log.clear()
    async with trio.open_nursery() as nursery:
        for rpc in pair.rpc.values():
            await nursery.start(rpc.run)
        result, _ = await pair.rpc["n2"].call("n1", method, {"count": 3})
        assert result == {"answered": True}
        pair.routes["n1"].send_batches()  # the flush task, late: whatever still waited goes now
        nursery.cancel_scope.cancel()
    return pair.log


async def test_an_answer_leaves_after_the_messages_batched_for_its_peer():
    log = await _call_and_log(wired=True)
    # n2's request to n1, then n1's three messages, then its answer: nothing overtakes on the lane.
    assert log == [("rpc", "n1"), ("msg", b"m0"), ("msg", b"m1"), ("msg", b"m2"), ("rpc", "n2")]


async def test_without_the_hook_the_answer_overtakes_the_batch():
    log = await _call_and_log(wired=False)
    assert log == [("rpc", "n1"), ("rpc", "n2"), ("msg", b"m0"), ("msg", b"m1"), ("msg", b"m2")]


async def test_a_consumer_create_answer_goes_ahead_of_the_batch():
    """rpc `ANSWER_FIRST`: nats-server's consumer leader answers a create before its first delivery, and
    nats-py learns an ordered consumer's new name only from that answer."""
    log = await _call_and_log(wired=True, method="consumer.create")
    assert log == [("rpc", "n1"), ("rpc", "n2"), ("msg", b"m0"), ("msg", b"m1"), ("msg", b"m2")]
