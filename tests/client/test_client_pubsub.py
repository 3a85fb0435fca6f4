"""`jsraft.client` against a real node: connect, pub/sub with wildcards and headers, queue groups,
request/reply, no-responders, timeouts, unsubscribe and auto-unsubscribe, slow consumers, and what a
closed or lost connection does to every pending and later call.

Method: one node from `jsraft.open_node` (client port 0, `node.url`), clients from
`jsraft.client.connect` in the test's trio loop, real TCP. Barriers are `flush()` round trips
(client_kit.settled), never sleeps; waits that can fail are bounded (`next_msg(timeout)`,
`trio.fail_after`). Where the server's own view matters (interest after an unsubscribe, a connection the
server drops) the node is read or driven directly.
"""

from __future__ import annotations

import pytest
import trio

import jsraft
import jsraft.client as jc
from client_kit import free_port, settled, single, until
from jsraft.errors import InvalidSubject
from jsraft.protocol import LocalProtocolError


def interest(node, subject: str) -> int:
    result = node.clients.sublist.match(subject)
    return len(result.plain) + sum(len(members) for members in result.queues)


async def test_connect_handshake_and_failures(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await jc.connect(node.url, name="handshake")
        async with client:
            assert client.server_info["server_name"] == "n1" and client.server_info["headers"] is True
            assert client.max_payload == 1 << 20 and isinstance(client.client_id, int)
            (conn,) = node.clients.clients.values()
            assert (conn.name, conn.headers, conn.no_responders) == ("handshake", True, True)
        assert client.is_closed
        await until(lambda: not node.clients.clients, "the server saw the close")
    with pytest.raises(jc.ConnectFailed, match="cannot connect"):
        await jc.connect(f"nats://127.0.0.1:{free_port()}")
    with pytest.raises(jc.ConnectFailed, match="scheme"):
        await jc.connect("tls://127.0.0.1:4222")
    assert jc.parse_url("nats://example:4333") == ("example", 4333)
    assert jc.parse_url("example") == ("example", 4222)


async def test_pub_sub_wildcards_headers_and_publisher_errors(tmp_path):
    async with jsraft.open_node(single(tmp_path, max_payload=4096)) as node:
        async with await jc.connect(node.url) as pub, await jc.connect(node.url) as sub_client:
            star, full = await sub_client.subscribe("orders.*"), await sub_client.subscribe("orders.>")
            await settled(sub_client)
            await pub.publish("orders.eu", b"one", headers={"Trace": "t-1", "Kind": "new"})
            await pub.publish("orders.eu.new", b"two", reply="back.here")
            await settled(pub, sub_client)
            first = await star.next_msg(timeout=5)
            assert (first.subject, first.data, first.headers, first.status) == \
                ("orders.eu", b"one", {"Trace": "t-1", "Kind": "new"}, None)
            assert star.pending_msgs == 0  # orders.eu.new does not match orders.*
            got = [await full.next_msg(timeout=5) for _ in range(2)]
            assert [(m.subject, m.data, m.reply) for m in got] == \
                [("orders.eu", b"one", None), ("orders.eu.new", b"two", "back.here")]
            assert got[1].headers is None

            # Refused before anything is sent; the connection stays usable.
            with pytest.raises(InvalidSubject):
                await pub.publish("orders.*", b"wildcards are for subscribers")
            assert pub.max_payload == 4096
            with pytest.raises(LocalProtocolError, match="max_payload"):
                await pub.publish("orders.eu", b"x" * 5000)
            await pub.publish("orders.eu", b"still fine")
            assert (await star.next_msg(timeout=5)).data == b"still fine"


async def test_queue_groups_share_plain_subscribers_see_all(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        clients = [await jc.connect(node.url) for _ in range(3)]
        try:
            workers = [await clients[i].subscribe("jobs.>", queue="workers") for i in (0, 1)]
            watcher = await clients[2].subscribe("jobs.>")
            await settled(*clients)
            assert interest(node, "jobs.x") == 3
            for i in range(60):
                await clients[2].publish(f"jobs.{i}", str(i).encode())
            await settled(clients[2], *clients)
            shares = [[int((await sub.next_msg(timeout=5)).data) for _ in range(sub.pending_msgs)] for sub in workers]
            assert sorted(shares[0] + shares[1]) == list(range(60))  # each job to exactly one worker
            assert all(shares), "a queue group picks members at random; both get some of 60"
            assert watcher.pending_msgs == 60
        finally:
            for client in clients:
                await client.close()


async def test_request_reply_concurrent_no_responders_and_timeout(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as server, await jc.connect(node.url) as client:
            service = await server.subscribe("svc.echo", queue="echo")
            silent = await server.subscribe("svc.silent")
            await settled(server)

            async def serve() -> None:
                async for msg in service:
                    await msg.respond(b"re:" + msg.data, headers={"Seen": msg.headers["N"]})

            answers: dict[int, tuple[bytes, dict]] = {}

            async def ask(i: int) -> None:
                reply = await client.request("svc.echo", str(i).encode(), timeout=5, headers={"N": str(i)})
                answers[i] = (reply.data, reply.headers)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                async with trio.open_nursery() as askers:
                    for i in range(20):
                        askers.start_soon(ask, i)
                nursery.cancel_scope.cancel()
            assert answers == {i: (f"re:{i}".encode(), {"Seen": str(i)}) for i in range(20)}

            with trio.fail_after(2):  # answered by the server's 503 status at once, not by the timeout
                with pytest.raises(jc.NoResponders, match="nobody.home"):
                    await client.request("nobody.home", b"?", timeout=30)
            start = trio.current_time()
            with pytest.raises(jc.RequestTimeout):
                await client.request("svc.silent", b"?", timeout=0.3)
            assert 0.3 <= trio.current_time() - start < 3
            assert (await silent.next_msg(timeout=5)).data == b"?"  # it was delivered, just not answered
            assert client._responses is not None and not client._responses._waiting  # nothing left behind


async def test_unsubscribe_and_max_msgs_end_iteration(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            limited = await client.subscribe("count", max_msgs=3)
            later = await client.subscribe("count")
            await settled(client)
            for i in range(5):
                await client.publish("count", str(i).encode())
            await settled(client)
            with trio.fail_after(5):
                assert [m.data async for m in limited] == [b"0", b"1", b"2"]  # then the iteration ends
            await until(lambda: interest(node, "count") == 1, "the server dropped the limited subscription")

            await later.unsubscribe(limit=7)  # 5 delivered so far: two more, then done
            for i in range(5, 10):
                await client.publish("count", str(i).encode())
            await settled(client)
            with trio.fail_after(5):
                assert [m.data async for m in later] == [str(i).encode() for i in range(7)]
            await until(lambda: interest(node, "count") == 0, "no interest left")

            async with await client.subscribe("gone") as sub:
                await settled(client)
                assert interest(node, "gone") == 1
            await settled(client)
            assert interest(node, "gone") == 0
            with trio.fail_after(5):
                assert [m async for m in sub] == []


async def test_slow_consumer_drops_are_reported_not_silent(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            sub = await client.subscribe("firehose", pending_msgs_max=4)
            await settled(client)
            for i in range(10):
                await client.publish("firehose", str(i).encode())
            await settled(client)  # the PONG came after all ten MSGs: the reader has seen them
            assert (sub.pending_msgs, sub.dropped) == (4, 6)
            with pytest.raises(jc.SlowConsumer) as info:
                await sub.next_msg(timeout=5)
            assert info.value.dropped == 6 and info.value.err_code == 20805
            assert [(await sub.next_msg(timeout=5)).data for _ in range(4)] == [b"0", b"1", b"2", b"3"]


async def test_close_ends_everything_cleanly(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        client = await jc.connect(node.url)
        sub = await client.subscribe("a")
        await client.publish("a", b"buffered")
        await settled(client)
        await client.close()
        await client.close()  # idempotent
        with trio.fail_after(5):
            assert [m.data async for m in sub] == [b"buffered"]  # buffered ones first, then a normal end
        for call in (client.publish("a", b""), client.request("a", b""), client.flush(), client.subscribe("b")):
            with pytest.raises(jc.ConnectionClosed, match="closed by the client"):
                await call
        await until(lambda: not node.clients.clients, "the server saw the close")

        cancelled = await jc.connect(node.url)
        with trio.CancelScope() as scope:
            scope.cancel()
            await cancelled.close()  # cancelled before it could flush: it still closes
        assert scope.cancelled_caught and cancelled.is_closed
        await until(lambda: not node.clients.clients, "the server saw that close too")


async def test_lost_connection_fails_pending_calls_with_a_clear_error(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as responder:
            await responder.subscribe("never.answered")
            await settled(responder)
            client = await jc.connect(node.url, name="victim")
            sub = await client.subscribe("news")
            await settled(client)
            (victim,) = [conn for conn in node.clients.clients.values() if conn.name == "victim"]
            outcome: dict[str, BaseException] = {}

            async def pending_request() -> None:
                try:
                    await client.request("never.answered", b"?", timeout=30)
                except jc.ClientError as error:
                    outcome["request"] = error

            with trio.fail_after(5):  # the request fails when the connection goes, not after 30 s
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(pending_request)
                    await until(lambda: client._responses is not None and client._responses._waiting, "in flight")
                    victim.close("closed by the test")  # the server drops this one connection
            assert isinstance(outcome["request"], jc.ConnectionClosed)
            assert "server closed the connection" in str(outcome["request"])
            with pytest.raises(jc.ConnectionClosed):
                await sub.next_msg(timeout=5)  # not a normal end: the subscription was cut
            with pytest.raises(jc.ConnectionClosed):
                await client.publish("news", b"late")
            assert client.is_closed
            await client.close()
            await responder.request("$JS.API.INFO", b"", timeout=5)  # the other connection is untouched
