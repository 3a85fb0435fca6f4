"""A consumer create's answer reaches the client before the new consumer's first delivery when the client
talks to a node that does not lead the stream (rpc invariant 7, link invariant 5).

nats-server's consumer leader answers a create before its first delivery, both on one ordered route
connection, and the client's server hands both on in that order. nats-py's ordered consumer relies on
it: after a reset it learns the new consumer's name only from the answer, so a delivery first leaves it
naming the deleted consumer, and its next consumer info gets 404 (seen in
test_consumers_push.py::test_ordered_consumer_receives_everything_in_order_and_recovers under load).

Method: a real three-node `jsraft.testing.cluster.Cluster` (TCP, files) in the test's trio loop and a raw
NATS client (`nats_kit.RawClient`: what it reads is the wire order) on a node that does not lead the
stream. The leader already sends its `$rpc` answer ahead of the deliveries (rpc invariant 6); the window
was on the client's node, where the answer wakes the waiting API task while the link's reader hands the
next frames, the deliveries, to the client at once. A hook on the leader widens it every time: the
create's reply to the client's node waits for the first batch carrying the new consumer's deliveries,
and the two are queued together, in their order (answer first), so they leave in one write and arrive
in one read. Before the fix the reader handed the deliveries to the client in that same read, ahead of
the answer, on every create (checked against 8da1afd); now the reply's gate holds the rest of the read
until the API task has answered.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from jsraft.protocol import Msg, Ping
from jsraft.server.groups.rpc import REPLY, RPC_GROUP, decode_frame
from jsraft.server.nats import route_wire
from jsraft.testing.cluster import Cluster
from nats_kit import RawClient
from test_consumers_nats import ELECTION_TICKS, stream_leader

STREAM = "ANS"
MESSAGES = 20
CREATES = 5


def answer_with_the_first_deliveries(leader: Any, peer: str) -> list[str]:
    """On `leader`: its `consumer.create` replies to `peer` wait for the first message batch to `peer`
    carrying a delivery to that consumer's deliver subject; then reply and batch are queued back to back.
    Returns the deliver subjects whose reply went out that way."""
    rpc, routes = leader.rpc, leader.routes
    send_rpc, send_route = rpc._send, routes._send_fn
    waiting: dict[str, bytes] = {}  # deliver subject -> the reply frame held for it
    joined: list[str] = []

    def held_rpc(to: str, group: str, frame: bytes) -> bool:
        kind, _, method, body, _ = decode_frame(frame)
        if to == peer and kind == REPLY and method == "consumer.create":
            waiting[body["config"]["deliver_subject"]] = frame
            return True
        return send_rpc(to, group, frame)

    def joined_route(to: str, group: str, frame: bytes, *, headroom: float = 0.0) -> bool:
        if to == peer and waiting:
            decoded = route_wire.decode(frame)
            if isinstance(decoded, route_wire.Msgs):
                for subject in {msg.subject for msg in decoded.messages} & set(waiting):
                    send_rpc(to, RPC_GROUP, waiting.pop(subject))
                    joined.append(subject)
        return send_route(to, group, frame, headroom=headroom)

    rpc._send, routes._send_fn = held_rpc, joined_route
    return joined


async def first_of(client: RawClient, answer: str, consumer: str) -> str:
    """Which of the create's answer (on `answer`) and consumer `consumer`'s first delivery (told by its
    `$JS.ACK` reply: a delivery is shown on the message's stream subject) reached the client first; reads
    until both came, skipping earlier consumers' deliveries."""
    seen: list[str] = []
    while len(seen) < 2:
        event = await client.expect(Msg, skip=(Ping,))
        if event.subject == answer:
            assert b'"error"' not in event.payload, event.payload
            name = "answer"
        else:
            name = "delivery" if (event.reply or "").startswith(f"$JS.ACK.{STREAM}.{consumer}.") else None
        if name is not None and name not in seen:
            seen.append(name)
    return seen[0]


async def test_a_create_answer_reaches_the_client_before_the_first_delivery(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node(cluster.names[0]).jetstream()
            await js.add_stream(name=STREAM, subjects=["ans.*"], num_replicas=3)
            for i in range(MESSAGES):
                await js.publish("ans.x", b"%d" % i)
            await cluster.wait_until(lambda: stream_leader(cluster, STREAM) is not None)
            leader = stream_leader(cluster, STREAM)
            other = next(name for name in cluster.names if name != leader)
            joined = answer_with_the_first_deliveries(cluster.node(leader), other)
            client = await RawClient.connect(cluster.node(other).client_address, {"verbose": False})
            await client.send(b"SUB T.> 1\r\n")
            await client.round_trip()
            firsts = []
            for n in range(CREATES):
                config = {"name": f"C{n}", "deliver_subject": f"T.d.{n}", "ack_policy": "none",
                          "deliver_policy": "all"}
                body = json.dumps({"stream_name": STREAM, "config": config}).encode()
                await client.send(b"PUB $JS.API.CONSUMER.CREATE.%s.C%d T.r.%d %d\r\n%s\r\n"
                                  % (STREAM.encode(), n, n, len(body), body))
                firsts.append(await first_of(client, f"T.r.{n}", f"C{n}"))
            assert stream_leader(cluster, STREAM) == leader  # the hook sat on the leader throughout
            assert joined == [f"T.d.{n}" for n in range(CREATES)]  # each answer left with its deliveries
            assert firsts == ["answer"] * CREATES, firsts
            await client.stream.aclose()
            nursery.cancel_scope.cancel()
