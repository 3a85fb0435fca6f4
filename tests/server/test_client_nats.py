"""nats-py against a real node's client port: connect, pub/sub, queue groups, request/reply, headers,
no-responders, max payload, and JetStream publishes to a stream made with the embedded API.

Method: a single node from `jsraft.open_node` on free ports (client port 0, read back as `node.url`);
each scenario is nats-py code run under asyncio in a worker thread (`nats_kit.in_asyncio`) with its own
timeout. Before publishing, a scenario waits until the node holds the subscriptions it made
(`nats_kit.until`: nats-py's `flush()` does not order a pending SUB before its PING). Other waits are
`next_msg(timeout=...)` or polls with deadlines. What the scenario saw is returned and asserted here, or
asserted inside it.
"""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors
import pytest
import trio

import jsraft
from nats_kit import in_asyncio, interest, nats_connect, single, until


async def test_connect_reads_info_and_port_zero_picks_a_port(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url, name="info-test")
        try:
            return dict(nc._server_info), nc.max_payload, nc.connected_server_version.major
        finally:
            await nc.close()

    async with jsraft.open_node(single(tmp_path)) as node:
        assert node.client_port and node.url == f"nats://127.0.0.1:{node.client_port}"
        info, max_payload, major = await in_asyncio(scenario, node.url)
    assert (info["server_name"], info["version"], info["proto"], info["headers"], info["jetstream"]) == \
        ("n1", "2.12.0", 1, True, True)  # nats-server's release of API level 2, the level jsraft serves
    assert (info["host"], info["port"], info["max_payload"]) == ("127.0.0.1", node.client_port, 1 << 20)
    assert info["server_id"].startswith("N") and isinstance(info["client_id"], int)
    assert max_payload == 1 << 20 and major == 2


async def test_pub_sub_with_wildcards(tmp_path):
    async def scenario(url, node):
        pub, sub = await nats_connect(url), await nats_connect(url)
        star, full, exact = (await sub.subscribe("orders.*"), await sub.subscribe("orders.>"),
                             await sub.subscribe("orders.eu.new"))
        await until(lambda: interest(node, "orders.eu.new") == 2 and interest(node, "orders.eu") == 2, "SUBs")
        for subject in ("orders.eu", "orders.eu.new", "other.eu"):
            await pub.publish(subject, subject.encode())
        # End markers: one connection's messages are delivered in the order published, so a subscription
        # that has seen its markers has seen everything published before them.
        await pub.publish("orders.end", b"END")  # star and full
        await pub.publish("orders.eu.new", b"END")  # full and exact
        seen = {}
        for name, s, markers in (("star", star, 1), ("full", full, 2), ("exact", exact, 1)):
            got = []
            while markers:
                msg = await s.next_msg(timeout=5)
                if msg.data == b"END":
                    markers -= 1
                else:
                    got.append(msg.subject)
            seen[name] = got
        await pub.close()
        await sub.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(scenario, node.url, node)
    assert seen == {"star": ["orders.eu"], "full": ["orders.eu", "orders.eu.new"], "exact": ["orders.eu.new"]}


async def test_queue_group_gives_each_message_to_one_member(tmp_path):
    async def scenario(url, node):
        a, b, pub = await nats_connect(url), await nats_connect(url), await nats_connect(url)
        got: dict[str, list[bytes]] = {"a1": [], "a2": [], "b1": [], "plain": []}

        def collect(name):
            async def cb(msg):
                got[name].append(msg.data)
            return cb

        await a.subscribe("jobs.*", queue="workers", cb=collect("a1"))
        await a.subscribe("jobs.>", queue="workers", cb=collect("a2"))
        await b.subscribe("jobs.run", queue="workers", cb=collect("b1"))
        await b.subscribe("jobs.*", cb=collect("plain"))
        await until(lambda: interest(node, "jobs.run") == 4, "SUBs")
        for i in range(90):
            await pub.publish("jobs.run", str(i).encode())
        await pub.flush()
        deadline = asyncio.get_running_loop().time() + 10
        while sum(len(v) for k, v in got.items() if k != "plain") < 90 or len(got["plain"]) < 90:
            assert asyncio.get_running_loop().time() < deadline, got
            await asyncio.sleep(0.01)
        for nc in (a, b, pub):
            await nc.close()
        return got

    async with jsraft.open_node(single(tmp_path)) as node:
        got = await in_asyncio(scenario, node.url, node)
    members = got["a1"] + got["a2"] + got["b1"]
    assert sorted(members, key=int) == [str(i).encode() for i in range(90)]  # each once, none lost
    assert len(got["plain"]) == 90
    assert sum(1 for name in ("a1", "a2", "b1") if got[name]) >= 2  # spread (all on one: p = 3 * 3**-90)


async def test_request_reply_no_responders_and_headers(tmp_path):
    async def scenario(url, node):
        server, client = await nats_connect(url), await nats_connect(url)

        async def echo(msg):
            if msg.headers:
                await server.publish(msg.reply, msg.data, headers=msg.headers)
            else:
                await msg.respond(b"echo:" + msg.data)

        await server.subscribe("svc.echo", cb=echo)
        await until(lambda: interest(node, "svc.echo") == 1, "SUB")
        reply = await client.request("svc.echo", b"ping", timeout=5)
        with_headers = await client.request("svc.echo", b"h", timeout=5,
                                            headers={"Trace-Id": "abc 123", "Nats-Msg-Id": "7"})
        started = asyncio.get_running_loop().time()
        with pytest.raises(nats.errors.NoRespondersError):
            await client.request("nobody.home", b"?", timeout=5)
        no_responders_s = asyncio.get_running_loop().time() - started
        await server.close()
        await client.close()
        return reply.data, with_headers.data, with_headers.headers, no_responders_s

    async with jsraft.open_node(single(tmp_path)) as node:
        data, data_h, headers, no_responders_s = await in_asyncio(scenario, node.url, node)
    assert data == b"echo:ping" and data_h == b"h"
    assert headers == {"Trace-Id": "abc 123", "Nats-Msg-Id": "7"}
    assert no_responders_s < 2  # answered by the server at once, not a timeout


async def test_no_echo_and_unsubscribe_with_max(tmp_path):
    def limited_to_two(node):
        return any(sub.max_msgs == 2 for conn in node.clients.clients.values() for sub in conn.subs.values())

    async def scenario(url, node):
        quiet, other = await nats_connect(url, no_echo=True), await nats_connect(url)
        own, theirs = await quiet.subscribe("chat"), await other.subscribe("chat")
        limited = await other.subscribe("count")
        await limited.unsubscribe(limit=2)
        await until(lambda: interest(node, "chat") == 2 and limited_to_two(node), "SUBs and UNSUB")
        await quiet.publish("chat", b"hello")
        for i in range(5):
            await quiet.publish("count", str(i).encode())
        heard = (await theirs.next_msg(timeout=5)).data
        # "hello" was routed before this marker, so an echo of it would reach `own` first.
        await other.publish("chat", b"END")
        first_own = (await own.next_msg(timeout=5)).data
        counted = [(await limited.next_msg(timeout=5)).data for _ in range(2)]
        await quiet.close()
        await other.close()
        return heard, first_own, counted

    async with jsraft.open_node(single(tmp_path)) as node:
        heard, first_own, counted = await in_asyncio(scenario, node.url, node)
        with trio.fail_after(10):  # both connections closed: the node drops their interest
            while interest(node, "chat") or interest(node, "count"):
                await trio.sleep(0.01)
    assert heard == b"hello" and first_own == b"END" and counted == [b"0", b"1"]


async def test_max_payload_is_advertised_and_enforced_by_the_client(tmp_path):
    async def scenario(url, node):
        nc = await nats_connect(url)
        sub = await nc.subscribe("big")
        await until(lambda: interest(node, "big") == 1, "SUB")
        await nc.publish("big", b"x" * 2048)
        with pytest.raises(nats.errors.MaxPayloadError):
            await nc.publish("big", b"x" * 2049)
        got = await sub.next_msg(timeout=5)
        await nc.close()
        return nc.max_payload, len(got.data)

    async with jsraft.open_node(single(tmp_path, max_payload=2048)) as node:
        assert await in_asyncio(scenario, node.url, node) == (2048, 2048)


async def test_jetstream_publish_to_a_stream_made_with_the_embedded_api(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream()
        acks = [await js.publish("ORDERS.new", b"order %d" % i, headers={"Shop": "eu"}) for i in range(5)]
        first = await js.publish("ORDERS.new", b"once", headers={"Nats-Msg-Id": "m-1"})
        again = await js.publish("ORDERS.new", b"once", headers={"Nats-Msg-Id": "m-1"})
        futures = [await js.publish_async("ORDERS.bulk", b"bulk %d" % i) for i in range(200)]
        bulk = await asyncio.gather(*futures)
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await js.publish("NOT.a.stream", b"x", timeout=5)
        await nc.publish("ORDERS.core", b"no reply subject")  # stored all the same, answered to nobody
        await nc.flush()
        await nc.close()
        return acks, first, again, bulk

    async with jsraft.open_node(single(tmp_path)) as node:
        js = node.jetstream()
        await js.add_stream(name="ORDERS", subjects=["ORDERS.*"])
        acks, first, again, bulk = await in_asyncio(scenario, node.url)
        stored = await js.get_msg("ORDERS", seq=3)
        with trio.fail_after(10):
            while (info := await js.stream_info("ORDERS")).state["last_seq"] < 207:
                await trio.sleep(0.01)
        core = await js.get_msg("ORDERS", seq=207)
    assert [(a.stream, a.seq, a.duplicate) for a in acks] == [("ORDERS", seq, None) for seq in range(1, 6)]
    assert (first.seq, first.duplicate) == (6, None) and (again.seq, again.duplicate) == (6, True)
    # publish_async keeps one connection's order: seq follows the order of the publishes.
    assert [a.seq for a in bulk] == list(range(7, 207))
    assert (stored.subject, stored.data, stored.headers) == ("ORDERS.new", b"order 2", {"Shop": "eu"})
    assert info.state["last_seq"] == 207 and info.state["messages"] == 207
    assert (core.subject, core.data) == ("ORDERS.core", b"no reply subject")
