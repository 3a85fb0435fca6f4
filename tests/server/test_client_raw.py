"""The client port spoken to byte by byte: malformed input, limits, keepalive, slow consumers, options.

Method: a real node (`jsraft.open_node`, free ports) and hand-driven clients (`nats_kit.RawClient`, which
reads with `jsraft.protocol.ClientConnection`). For each misbehaviour the test checks the exact `-ERR`
text nats-server v2.10 sends (or that it sends none), that the connection is then closed, and that
another client on the same node keeps working. Timing-dependent checks use short configured intervals
and wait for events with deadlines.
"""

from __future__ import annotations

import logging

import pytest
import trio

import jsraft
from jsraft.errors import InvalidConfig
from jsraft.protocol import Err, Msg, Ok, Ping, Pong
from nats_kit import RawClient, errors_in, interest, single

HEADERS = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1}


async def assert_other_client_works(address) -> None:
    """A fresh client on the same node can still subscribe, publish and receive."""
    client = await RawClient.connect(address, HEADERS)
    await client.send(b"SUB still.alive 1\r\nPUB still.alive 2\r\nok\r\n")
    msg = await client.expect(Msg)
    assert (msg.subject, msg.sid, msg.payload) == ("still.alive", "1", b"ok")
    await client.aclose()


@pytest.mark.parametrize("data, err_text", [
    (b"FOO bar\r\n", "Unknown Protocol Operation"),
    (b"SUB " + b"x" * 5000 + b" 1\r\n", "maximum control line exceeded"),
    (b"PUB big 1048577\r\n", "Maximum Payload Violation"),
    (b"PUB a 2\r\nabc\r\n", "Unknown Protocol Operation"),  # payload longer than announced
    (b"PUB a\r\n", None),  # nats-server: "processPub Parse Error", closed without -ERR
    (b"CONNECT {not json}\r\n", None),
    (b'CONNECT {"protocol": 7}\r\n', "invalid client protocol"),
    (b'CONNECT {"no_responders": true}\r\n', "no responders requires headers support"),
    (b'CONNECT {"verbose": "yes"}\r\n', None),
    (b"HPUB a 12 12\r\nNATS/1.0\r\n\r\n\r\n", None),  # headers not asked for in CONNECT
])
async def test_malformed_input_gets_err_then_close_and_others_carry_on(tmp_path, data, err_text):
    async with jsraft.open_node(single(tmp_path)) as node:
        bystander = await RawClient.connect(node.client_address, HEADERS)
        await bystander.send(b"SUB watch 9\r\n")
        await bystander.round_trip()
        bad = await RawClient.connect(node.client_address)
        await bad.send(data)
        seen = await bad.read_to_eof()
        assert errors_in(seen) == ([err_text] if err_text else [])
        await assert_other_client_works(node.client_address)
        await bystander.send(b"PUB watch 3\r\nyes\r\n")
        assert (await bystander.expect(Msg)).payload == b"yes"
        with trio.fail_after(10):  # the server forgets the closed connection
            while bad.info["client_id"] in node.clients.clients:
                await trio.sleep(0.01)
        assert bystander.info["client_id"] in node.clients.clients


async def test_nonfatal_errors_keep_the_connection(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await RawClient.connect(node.client_address, {**HEADERS, "pedantic": True})
        await client.send(b"SUB foo..bar 1\r\nSUB foo.>.bar 2\r\nPUB foo.* 1\r\nx\r\n")
        assert (await client.expect(Err)).message == "Invalid Subject"
        assert (await client.expect(Err)).message == "Invalid Subject"
        assert (await client.expect(Err)).message == "Invalid Publish Subject"
        await client.round_trip()
        await client.send(b"SUB ok.* 3\r\nPUB ok.1 1\r\n1\r\n")
        assert (await client.expect(Msg)).sid == "3"


async def test_subjects_that_are_not_utf8_are_invalid_not_fatal(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await RawClient.connect(node.client_address, HEADERS)
        await client.send(b"SUB bad.\xff 1\r\nSUB _INBOX.u.* 2\r\nPUB bad.\xff _INBOX.u.1 1\r\nx\r\n")
        assert (await client.expect(Err)).message == "Invalid Subject"
        # The publish reached nobody: the requester gets the no-responders status, the node carries on.
        assert (await client.expect(Msg)).headers == b"NATS/1.0 503\r\n\r\n"
        await client.send(b"SUB ok 3\r\nPUB ok 1\r\ny\r\n")
        assert (await client.expect(Msg)).sid == "3"


async def test_verbose_acknowledges_each_operation(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await RawClient.connect(node.client_address, {**HEADERS, "verbose": True})
        await client.send(b"SUB v 1\r\nPUB v 1\r\nx\r\nUNSUB 1\r\n")
        seen = [await client.next_event() for _ in range(5)]
        # CONNECT, SUB, PUB each answer +OK; the message comes after PUB's +OK; then UNSUB's +OK.
        assert [type(e) for e in seen] == [Ok, Ok, Ok, Msg, Ok]


async def test_hpub_becomes_hmsg_and_headers_are_stripped_for_clients_without_them(tmp_path):
    block = b"NATS/1.0\r\nA: 1\r\n\r\n"
    async with jsraft.open_node(single(tmp_path)) as node:
        modern = await RawClient.connect(node.client_address, HEADERS)
        legacy = await RawClient.connect(node.client_address, {"headers": False})
        await modern.send(b"SUB h 1\r\n")
        await legacy.send(b"SUB h 2\r\n")
        await modern.round_trip()
        await legacy.round_trip()
        await modern.send(b"HPUB h r %d %d\r\n%sbody\r\n" % (len(block), len(block) + 4, block))
        assert await modern.expect(Msg) == Msg("h", "1", "r", b"body", block)
        assert await legacy.expect(Msg) == Msg("h", "2", "r", b"body", None)


async def test_unsub_with_max_delivers_exactly_that_many(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await RawClient.connect(node.client_address, HEADERS)
        await client.send(b"SUB n 5\r\nUNSUB 5 2\r\n" + b"PUB n 1\r\nx\r\n" * 4)
        got = await client.round_trip()  # the four publishes were routed before the PONG
        assert [(type(e), e.sid) for e in got] == [(Msg, "5"), (Msg, "5")]
        assert interest(node, "n") == 0  # the node's own `$JS.API` subscriptions stay


async def test_no_responders_status_goes_to_the_matching_subscription(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await RawClient.connect(node.client_address, HEADERS)
        await client.send(b"SUB _INBOX.abc.* 7\r\nPUB nobody _INBOX.abc.1 2\r\nhi\r\n")
        assert await client.expect(Msg) == Msg("_INBOX.abc.1", "7", None, b"", b"NATS/1.0 503\r\n\r\n")
        # Without no_responders in CONNECT, nothing comes back.
        quiet = await RawClient.connect(node.client_address, {"headers": True})
        await quiet.send(b"SUB _INBOX.q.* 1\r\nPUB nobody _INBOX.q.1 0\r\n\r\n")
        assert await quiet.round_trip() == []


async def test_stale_connection_is_closed_and_a_ponging_client_is_kept(tmp_path):
    config = single(tmp_path, client_ping_interval_ms=100, client_pings_out_max=2)
    async with jsraft.open_node(config) as node:
        alive = await RawClient.connect(node.client_address, HEADERS)
        stale = await RawClient.connect(node.client_address, HEADERS)
        answered = 0

        async def answer_pings() -> None:
            nonlocal answered
            while True:
                event = await alive.next_event()
                assert isinstance(event, Ping), event
                await alive.send(b"PONG\r\n")
                answered += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_pings)
            seen = await stale.read_to_eof(timeout_s=10)
            assert [type(e) for e in seen] == [Ping, Ping, Err] and seen[-1].message == "Stale Connection"
            with trio.fail_after(10):
                while answered < 2 * config.client_pings_out_max + 1:  # past the point `stale` was cut off
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert await alive.round_trip() == []
        assert node.clients.stats.stale_connections == 1
        assert alive.info["client_id"] in node.clients.clients


async def test_slow_consumer_is_cut_off_and_others_are_unaffected(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="jsraft.server.clients")
    config = single(tmp_path, max_payload=64 << 10, client_pending_bytes_max=256 << 10,
                    client_write_deadline_ms=5000)
    payload = b"x" * (64 << 10)
    async with jsraft.open_node(config) as node:
        slow = await RawClient.connect(node.client_address, HEADERS, receive_buffer_bytes=4096)
        await slow.send(b"SUB big.> 1\r\n")
        await slow.round_trip()
        fast = await RawClient.connect(node.client_address, HEADERS)
        await fast.send(b"SUB big.> 2\r\n")
        await fast.round_trip()
        publisher = await RawClient.connect(node.client_address, HEADERS)
        sent = 0
        with trio.fail_after(60):
            while node.clients.stats.slow_consumers == 0:  # kernel buffers first, then the pending bound
                assert sent < 2000, "never became a slow consumer"
                await publisher.send(b"PUB big.data %d\r\n%s\r\n" % (len(payload), payload))
                sent += 1
                received = 0
                while received < 1:  # the fast subscriber keeps up, message by message
                    event = await fast.expect(Msg)
                    received += event.payload == payload
        await publisher.round_trip()
        await fast.round_trip()
        seen = await slow.read_to_eof(timeout_s=20)
        assert errors_in(seen) == ["Slow Consumer"] and isinstance(seen[-1], Err)
        assert all(isinstance(e, Msg) for e in seen[:-1]) and len(seen) - 1 < sent
        assert any("Slow Consumer" in record.getMessage() for record in caplog.records)
        await assert_other_client_works(node.client_address)
        assert node.clients.stats.slow_consumers == 1


async def test_round_trips_do_not_depend_on_how_bytes_arrive(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await RawClient.connect(node.client_address)
        data = b'CONNECT {"headers":true}\r\nSUB s 1\r\nPUB s 12\r\nhello\r\nworld\r\nPING\r\n'
        for i in range(len(data)):
            await client.send(data[i:i + 1])
        assert await client.expect(Msg) == Msg("s", "1", None, b"hello\r\nworld")
        assert isinstance(await client.next_event(), Pong)


async def test_internal_subscription_sees_the_message_and_can_respond(tmp_path):
    seen = []

    async def handler(msg):
        seen.append((msg.subject, msg.reply, msg.headers, msg.payload))
        await trio.sleep(0)  # a handler may await; its answer still goes to the reply subject
        msg.respond(b"done:" + msg.payload, headers=b"NATS/1.0\r\nBy: node\r\n\r\n")

    async with jsraft.open_node(single(tmp_path)) as node:
        sub = node.clients.subscribe_internal("$SVC.>", handler)
        client = await RawClient.connect(node.client_address, HEADERS)
        block = b"NATS/1.0\r\nA: 1\r\n\r\n"
        await client.send(b"SUB _INBOX.r 1\r\nHPUB $SVC.x _INBOX.r %d %d\r\n%sping\r\n"
                          % (len(block), len(block) + 4, block))
        answer = await client.expect(Msg)
        assert answer == Msg("_INBOX.r", "1", None, b"done:ping", b"NATS/1.0\r\nBy: node\r\n\r\n")
        assert seen == [("$SVC.x", "_INBOX.r", block, b"ping")]
        node.clients.unsubscribe_internal(sub)
        await client.send(b"PUB $SVC.x _INBOX.r 0\r\n\r\n")  # nobody now: the 503 status instead
        assert (await client.expect(Msg)).headers == b"NATS/1.0 503\r\n\r\n"


@pytest.mark.parametrize("field, value", [
    ("max_payload", 0), ("max_payload", (8 << 20) + 1), ("client_pending_bytes_max", 1000),
    ("client_ping_interval_ms", 0), ("client_pings_out_max", 0), ("client_write_deadline_ms", 0),
])
def test_client_settings_are_validated(tmp_path, field, value):
    with pytest.raises(InvalidConfig, match=field):
        single(tmp_path, **{field: value}).validate()
