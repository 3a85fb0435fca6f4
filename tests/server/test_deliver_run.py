"""A run of JetStream deliveries to one subject (`ClientServer.deliver_as`, `server.nats.client_deliver`):
each message reaches whom a single publish would, in order, shown on its own subject with its own reply.

Method: a real node (`jsraft.open_node`, free ports) and hand-driven clients (`nats_kit.RawClient`)
subscribed on a reply subject the way nats-py's fetch is; the test calls the node's `deliver_as` with a
run of three messages (as the consumer hub does with a fetch's batch) and reads what each client
received, up to a PONG. The batched path (plain subscribers only) and each case that must take the
message-by-message way (a queue group, an `UNSUB` max) are compared with what one publish per message
gives: same frames, same order, same counts in the node's statistics.
"""

from __future__ import annotations

from jsraft.protocol import Msg
from nats_kit import RawClient, single

import jsraft

HEADERS = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1}
NO_HEADERS = {"verbose": False, "pedantic": False, "headers": False, "protocol": 1}
HDR = b"NATS/1.0\r\nNats-Msg-Id: m2\r\n\r\n"
RUN = [("orders.a", "$JS.ACK.S.C.1.1.1.10.2", None, b"one"),
       ("orders.b", "$JS.ACK.S.C.1.2.2.11.1", HDR, b"two"),
       ("orders.a", "$JS.ACK.S.C.1.3.3.12.0", None, b"")]


def _seen(events: list) -> list[tuple]:
    return [(e.subject, e.sid, e.reply, e.headers, e.payload) for e in events if isinstance(e, Msg)]


async def _client(node, subs: bytes, options=HEADERS) -> RawClient:
    client = await RawClient.connect(node.client_address, options)
    await client.send(subs)
    await client.round_trip()
    return client


async def test_a_run_reaches_each_plain_subscriber_in_order_on_its_own_subjects(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        first = await _client(node, b"SUB _INBOX.x.* 7\r\n")
        second = await _client(node, b"SUB _INBOX.x.1 3\r\n")
        before = node.clients.stats.out_msgs
        assert node.clients.deliver_as("_INBOX.x.1", RUN)
        for client, sid in ((first, "7"), (second, "3")):
            assert _seen(await client.round_trip()) == [(shown, sid, reply, headers, payload)
                                                        for shown, reply, headers, payload in RUN]
        assert node.clients.stats.out_msgs - before == 6


async def test_a_client_without_headers_gets_the_run_without_them(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await _client(node, b"SUB r 1\r\n", NO_HEADERS)
        node.clients.deliver_as("r", RUN)
        assert [(m[0], m[3], m[4]) for m in _seen(await client.round_trip())] == \
            [("orders.a", None, b"one"), ("orders.b", None, b"two"), ("orders.a", None, b"")]


async def test_an_unsub_max_ends_the_run_where_a_publish_per_message_would(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await _client(node, b"SUB r 1\r\nUNSUB 1 2\r\n")
        node.clients.deliver_as("r", RUN)
        assert [m[4] for m in _seen(await client.round_trip())] == [b"one", b"two"]
        assert node.clients.sublist.match("r").plain == ()


async def test_a_queue_group_gets_each_message_of_a_run_once(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        members = [await _client(node, b"SUB r workers 1\r\n") for _ in range(2)]
        node.clients.deliver_as("r", RUN)
        got = [m[4] for member in members for m in _seen(await member.round_trip())]
        assert sorted(got) == sorted(payload for *_, payload in RUN)


async def test_a_run_to_nobody_or_to_an_invalid_subject_is_not_delivered(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await _client(node, b"SUB r 1\r\n")
        assert not node.clients.deliver_as("nobody", RUN)
        assert not node.clients.deliver_as("bad subject", RUN)
        assert not node.clients.deliver_as("r", [])
        assert _seen(await client.round_trip()) == []
