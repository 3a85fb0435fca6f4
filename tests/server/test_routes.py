"""NATS cluster routing on three real nodes: nats-py clients on different nodes see each other's messages.

Method: a real `jsraft.testing.cluster.Cluster` (real TCP between nodes, real client ports); each scenario
is nats-py code under asyncio in a worker thread (`nats_kit.in_asyncio`) with clients connected to
different nodes. Before publishing, a scenario waits until the publishing node holds the remote interest
it needs (`until(...)` on `Routes.interested_peers`, read in the nodes' trio thread): propagation is
asynchronous, as in nats-server. Exactly-once is checked with end markers (one publisher's messages reach
a subscriber in order, so a subscription that saw its marker saw everything before it), with exact
multisets of what arrived, and with the route counters (a node that only receives never forwards: no
loops). Stream tests also read the stream itself: a publish through a non-leader is stored once.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import nats.errors
import pytest
import trio

from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, interest, nats_connect, until

NAMES = ("n1", "n2", "n3")


def remote(cluster: Cluster, at: str, subject: str) -> dict[str, int]:
    """Which peers node `at` believes interested in the literal `subject` (and in how many entries)."""
    return cluster.node(at).routes.interested_peers(subject)


def meshed(cluster: Cluster) -> bool:
    nodes = cluster.running()
    return all(node.routes.synced(peer.name) for node in nodes for peer in nodes if peer is not node)


def urls(cluster: Cluster) -> dict[str, str]:
    return {name: cluster.node(name).url for name in cluster.names}


@asynccontextmanager
async def three_nodes(tmp_path: Any, *, jetstream: bool = False) -> AsyncIterator[Cluster]:
    """A running 3-node cluster whose routes are all in sync (and, with `jetstream`, ready for streams)."""
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            await cluster.wait_until(lambda: meshed(cluster), what="every node in sync with every other")
            if jetstream:
                await cluster.wait_for_meta_leader()
                await cluster.wait_ready()
            yield cluster


async def drain(sub: Any, markers: int, timeout_s: float = 10.0) -> list[tuple[str, bytes]]:
    """Messages until `markers` END markers arrived (the markers left out)."""
    got = []
    while markers:
        msg = await sub.next_msg(timeout=timeout_s)
        if msg.data == b"END":
            markers -= 1
        else:
            got.append((msg.subject, msg.data))
    return got


async def wait_for(predicate: Any, what: str, timeout_s: float = 10.0) -> None:
    """Asyncio side: poll a plain predicate until it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


# --- Plain subscriptions and wildcards -------------------------------------------------------------------


async def test_publish_on_one_node_reaches_wildcard_subscribers_on_the_others_once(tmp_path):
    async def scenario(url, cluster):
        pub, c1, c2, c3 = [await nats_connect(url[name]) for name in ("n1", "n1", "n2", "n3")]
        subs = {"local": await c1.subscribe("orders.>"), "star": await c2.subscribe("orders.*"),
                "full": await c2.subscribe("orders.>"), "exact": await c3.subscribe("orders.eu.new"),
                "all": await c3.subscribe(">")}
        await until(lambda: interest(cluster.node("n1"), "orders.eu") == 1
                    and remote(cluster, "n1", "orders.eu.new") == {"n2": 1, "n3": 2}
                    and remote(cluster, "n1", "orders.eu") == {"n2": 2, "n3": 1}, "interest on n1")
        for subject in ("orders.eu", "orders.eu.new", "other.eu"):
            for i in range(50):
                await pub.publish(subject, b"%s %d" % (subject.encode(), i))
        await pub.publish("orders.end", b"END")  # local, star, full, all
        await pub.publish("orders.eu.new", b"END")  # local, full, exact, all
        markers = {"local": 2, "star": 1, "full": 2, "exact": 1, "all": 2}
        seen = {name: await drain(sub, markers[name]) for name, sub in subs.items()}
        for nc in (pub, c1, c2, c3):
            await nc.close()
        return seen

    async with three_nodes(tmp_path) as cluster:
        seen = await in_asyncio(scenario, urls(cluster), cluster)
        stats = {name: cluster.node(name).routes.stats for name in NAMES}

    def sent(*subjects):
        return [(s, b"%s %d" % (s.encode(), i)) for s in subjects for i in range(50)]

    assert seen["star"] == sent("orders.eu")
    assert seen["full"] == seen["local"] == sent("orders.eu", "orders.eu.new")
    assert seen["exact"] == sent("orders.eu.new")
    assert seen["all"] == sent("orders.eu", "orders.eu.new", "other.eu")
    # One copy per node with interest, however many of its subscriptions match; none forwarded again.
    assert stats["n1"].msgs_forwarded == 2 * 50 + 2 * 50 + 50 + 2 + 2
    assert (stats["n2"].msgs_received, stats["n3"].msgs_received) == (100 + 2, 150 + 2)
    assert stats["n2"].msgs_forwarded == stats["n3"].msgs_forwarded == 0


# --- Queue groups ------------------------------------------------------------------------------------------


async def test_a_queue_group_across_nodes_gets_each_message_once_and_prefers_local_members(tmp_path):
    async def scenario(url, cluster):
        pub, c1, c2, c3 = [await nats_connect(url[name]) for name in ("n1", "n1", "n2", "n3")]
        got: dict[str, list[bytes]] = collections.defaultdict(list)

        def collect(name):
            async def cb(msg):
                got[name].append(msg.data)
            return cb

        await c2.subscribe("jobs.*", queue="workers", cb=collect("n2a"))
        await c2.subscribe("jobs.>", queue="workers", cb=collect("n2b"))
        await c3.subscribe("jobs.run", queue="workers", cb=collect("n3"))
        await c3.subscribe("jobs.*", cb=collect("plain"))
        await until(lambda: remote(cluster, "n1", "jobs.run") == {"n2": 2, "n3": 2}, "queue interest on n1")
        for i in range(150):
            await pub.publish("jobs.run", b"%d" % i)
        members = ("n2a", "n2b", "n3")
        await wait_for(lambda: sum(len(got[m]) for m in members) >= 150 and len(got["plain"]) >= 150, "150")
        first = {name: list(values) for name, values in got.items()}
        # A member on the publisher's node: every later message is served there, none elsewhere.
        await c1.subscribe("jobs.run", queue="workers", cb=collect("n1"))
        await until(lambda: interest(cluster.node("n1"), "jobs.run") == 1, "the local member")
        for i in range(150, 200):
            await pub.publish("jobs.run", b"%d" % i)
        await pub.publish("jobs.run", b"END")
        await wait_for(lambda: b"END" in got["n1"] and b"END" in got["plain"], "END on n1 and n3")
        for nc in (pub, c1, c2, c3):
            await nc.close()
        return first, dict(got)

    async with three_nodes(tmp_path) as cluster:
        first, last = await in_asyncio(scenario, urls(cluster), cluster)
    numbers = [str(i).encode() for i in range(150)]
    members = first["n2a"] + first["n2b"] + first["n3"]
    assert sorted(members, key=int) == numbers  # each message exactly once in the whole cluster
    assert first["plain"] == numbers
    share = {name: len(first[name]) for name in ("n2a", "n2b", "n3")}
    assert share["n2a"] + share["n2b"] > 30 and share["n3"] > 15, share  # spread over both nodes
    assert last["n1"] == [str(i).encode() for i in range(150, 200)] + [b"END"]
    assert {name: len(last[name]) for name in ("n2a", "n2b", "n3")} == share  # nothing more elsewhere
    assert last["plain"] == [str(i).encode() for i in range(200)] + [b"END"]


# --- Request/reply ----------------------------------------------------------------------------------------


async def test_request_reply_across_nodes_and_no_responders_only_when_nobody_listens(tmp_path):
    async def scenario(url, cluster):
        service, queue2, queue3 = [await nats_connect(url[name]) for name in ("n2", "n2", "n3")]
        c1, c3 = await nats_connect(url["n1"]), await nats_connect(url["n3"])

        async def echo(msg):
            await service.publish(msg.reply, b"echo:" + msg.data, headers=msg.headers)

        def answer(nc, name):
            async def cb(msg):
                await nc.publish(msg.reply, name.encode())
            return cb

        echo_sub = await service.subscribe("svc.echo", cb=echo)
        await queue2.subscribe("svc.q", queue="svc", cb=answer(queue2, "n2"))
        await queue3.subscribe("svc.q", queue="svc", cb=answer(queue3, "n3"))
        await until(lambda: remote(cluster, "n1", "svc.echo") == {"n2": 1}
                    and remote(cluster, "n3", "svc.echo") == {"n2": 1}
                    and remote(cluster, "n1", "svc.q") == {"n2": 1, "n3": 1}, "services seen on n1 and n3")
        seen: dict[str, Any] = {}
        seen["n1"] = (await c1.request("svc.echo", b"from n1", timeout=5)).data
        reply = await c3.request("svc.echo", b"h", timeout=5, headers={"Trace-Id": "abc 123"})
        seen["n3"] = (reply.data, reply.headers)
        seen["queue"] = collections.Counter([(await c1.request("svc.q", b"", timeout=5)).data for _ in range(40)])
        started = asyncio.get_running_loop().time()
        with pytest.raises(nats.errors.NoRespondersError):
            await c1.request("nobody.home", b"?", timeout=5)
        seen["no_responders_s"] = asyncio.get_running_loop().time() - started
        await echo_sub.unsubscribe()
        await until(lambda: remote(cluster, "n1", "svc.echo") == {}, "the unsubscribe seen on n1")
        with pytest.raises(nats.errors.NoRespondersError):
            await c1.request("svc.echo", b"anyone?", timeout=5)
        for nc in (service, queue2, queue3, c1, c3):
            await nc.close()
        return seen

    async with three_nodes(tmp_path) as cluster:
        seen = await in_asyncio(scenario, urls(cluster), cluster)
    assert seen["n1"] == b"echo:from n1"
    assert seen["n3"] == (b"echo:h", {"Trace-Id": "abc 123"})
    assert sum(seen["queue"].values()) == 40 and set(seen["queue"]) == {b"n2", b"n3"}
    assert seen["no_responders_s"] < 2  # answered by n1 at once, not a timeout


# --- Unsubscribe ------------------------------------------------------------------------------------------


async def test_unsubscribe_on_one_node_stops_delivery_there(tmp_path):
    async def scenario(url, cluster):
        pub, c2, c3 = [await nats_connect(url[name]) for name in NAMES]
        on2, on3 = await c2.subscribe("u.>"), await c3.subscribe("u.>")
        capped = await c2.subscribe("cap.x")
        await capped.unsubscribe(limit=2)  # UNSUB <sid> 2: the node withdraws the interest after two
        await until(lambda: remote(cluster, "n1", "u.a") == {"n2": 1, "n3": 1}
                    and remote(cluster, "n1", "cap.x") == {"n2": 1}, "interest on n1")
        for i in range(5):
            await pub.publish("u.a", b"%d" % i)
            await pub.publish("cap.x", b"%d" % i)
        await pub.publish("u.a", b"END")
        seen = {"n2": await drain(on2, 1), "n3": await drain(on3, 1)}
        seen["capped"] = [(await capped.next_msg(timeout=5)).data for _ in range(2)]
        await until(lambda: remote(cluster, "n1", "cap.x") == {}, "the UNSUB with max seen on n1")
        await on2.unsubscribe()
        await until(lambda: remote(cluster, "n1", "u.a") == {"n3": 1}, "the UNSUB seen on n1")
        received = trio.from_thread.run_sync(lambda: cluster.node("n2").routes.stats.msgs_received)
        for i in range(5, 10):
            await pub.publish("u.a", b"%d" % i)
            await pub.publish("cap.x", b"%d" % i)
        await pub.publish("u.a", b"END")
        seen["n3 after"] = await drain(on3, 1)
        seen["n2 forwarded after"] = trio.from_thread.run_sync(
            lambda: cluster.node("n2").routes.stats.msgs_received) - received
        for nc in (pub, c2, c3):
            await nc.close()
        return seen

    async with three_nodes(tmp_path) as cluster:
        seen = await in_asyncio(scenario, urls(cluster), cluster)
    assert seen["n2"] == seen["n3"] == [("u.a", b"%d" % i) for i in range(5)]
    assert seen["capped"] == [b"0", b"1"]
    assert seen["n3 after"] == [("u.a", b"%d" % i) for i in range(5, 10)]
    assert seen["n2 forwarded after"] == 0  # n2 has no interest left: nothing crosses to it


# --- A node restart ---------------------------------------------------------------------------------------


async def test_a_restarted_node_resyncs_interest_both_ways(tmp_path):
    async def scenario(url, cluster):
        c1, c2, c3 = [await nats_connect(url[name]) for name in NAMES]
        s1, _, s3 = [await nc.subscribe("r.>") for nc in (c1, c2, c3)]
        await until(lambda: all(set(remote(cluster, name, "r.x")) == set(NAMES) - {name} for name in NAMES),
                    "every node seeing the two others")
        await c1.publish("r.before", b"b")
        seen = {"before": [(await s.next_msg(timeout=5)).data for s in (s1, s3)]}
        # A crash: the peers drop n2's interest when its link goes down.
        trio.from_thread.run(cluster.kill, "n2")
        await until(lambda: all("n2" not in remote(cluster, name, "r.x") for name in ("n1", "n3")),
                    "n2's interest dropped on n1 and n3")
        await c1.publish("r.down", b"d")
        seen["down"] = [(await s.next_msg(timeout=5)).data for s in (s1, s3)]
        # The restarted node gets every peer's interest in a STATE on its new links, and sends its own.
        trio.from_thread.run(cluster.start_node, "n2")
        c2 = await nats_connect(trio.from_thread.run_sync(lambda: cluster.node("n2").url))
        s2 = await c2.subscribe("r.>")
        await until(lambda: remote(cluster, "n2", "r.x") == {"n1": 1, "n3": 1}
                    and remote(cluster, "n1", "r.x") == {"n2": 1, "n3": 1}
                    and remote(cluster, "n3", "r.x") == {"n1": 1, "n2": 1}, "interest resynced with n2")
        await c2.publish("r.from2", b"2")
        await c1.publish("r.from1", b"1")
        seen["after"] = {"n1": [(await s1.next_msg(timeout=5)).data for _ in range(2)],
                         "n2": [(await s2.next_msg(timeout=5)).data for _ in range(2)],
                         "n3": sorted([(await s3.next_msg(timeout=5)).data for _ in range(2)])}
        for nc in (c1, c2, c3):
            await nc.close()
        return seen

    async with three_nodes(tmp_path) as cluster:
        seen = await in_asyncio(scenario, urls(cluster), cluster, timeout_s=60)
    assert seen["before"] == [b"b", b"b"] and seen["down"] == [b"d", b"d"]
    # Every client sees both publishes once (n2's own through echo); two links, so in no fixed order.
    assert sorted(seen["after"]["n1"]) == sorted(seen["after"]["n2"]) == seen["after"]["n3"] == [b"1", b"2"]


# --- Streams and the JetStream API ------------------------------------------------------------------------


async def test_a_stream_publish_through_a_non_leader_is_stored_once_and_seen_once_elsewhere(tmp_path):
    async def scenario(url, cluster):
        admin = await nats_connect(url["n1"])
        js = admin.jetstream(timeout=10)
        info = await js.add_stream(name="ORDERS", subjects=["ORDERS.*"], num_replicas=3)
        while info.cluster.leader is None:
            await asyncio.sleep(0.05)
            info = await js.stream_info("ORDERS")
        leader = info.cluster.leader
        publisher, other = [name for name in NAMES if name != leader]
        await admin.close()  # from here on every client message starts on the publisher's node
        pub, on_leader, on_other = (await nats_connect(url[publisher]), await nats_connect(url[leader]),
                                    await nats_connect(url[other]))
        subs = {"leader": await on_leader.subscribe("ORDERS.*"), "other": await on_other.subscribe("ORDERS.*")}
        api_watch = await on_other.subscribe("$JS.API.>")
        await until(lambda: remote(cluster, publisher, "ORDERS.new") == {leader: 1, other: 1}, "subscribers")
        api_before = trio.from_thread.run_sync(lambda: {n: cluster.node(n).jsapi.total for n in NAMES})
        pjs = pub.jetstream(timeout=10)
        acks = [await pjs.publish("ORDERS.new", b"js %d" % i) for i in range(20)]
        await pub.publish("ORDERS.core", b"core")  # no reply subject: stored all the same
        names = await pjs.stream_info("ORDERS")  # one API request on the publisher's node
        await pub.publish("ORDERS.end", b"END")
        seen = {name: await drain(sub, 1) for name, sub in subs.items()}
        watched = (await api_watch.next_msg(timeout=5)).subject
        api_after = trio.from_thread.run_sync(lambda: {n: cluster.node(n).jsapi.total for n in NAMES})
        # The core publishes have no ack: wait until the stream holds them before reading it back.
        while (state := (await pjs.stream_info("ORDERS")).state).last_seq < 22:
            await asyncio.sleep(0.01)
        stored = [(m.subject, m.data) for m in [await pjs.get_msg("ORDERS", seq) for seq in range(1, 23)]]
        for nc in (pub, on_leader, on_other):
            await nc.close()
        return dict(leader=leader, publisher=publisher, other=other, acks=[a.seq for a in acks], seen=seen,
                    watched=watched, names=names.config.name, stored=stored, state=state,
                    api=(api_before, api_after))

    async with three_nodes(tmp_path, jetstream=True) as cluster:
        result = await in_asyncio(scenario, urls(cluster), cluster, timeout_s=60)
        stats = {name: cluster.node(name).routes.stats for name in NAMES}
    published = [("ORDERS.new", b"js %d" % i) for i in range(20)] + [("ORDERS.core", b"core")]
    assert result["acks"] == list(range(1, 21))
    assert result["stored"] == published + [("ORDERS.end", b"END")]  # each once: the forwarded copies stored nothing
    assert (result["state"].messages, result["state"].last_seq) == (22, 22)
    assert result["seen"] == {"leader": published, "other": published}
    # The publisher's API request was seen by a watcher on another node but answered only where it was sent.
    assert result["watched"].startswith("$JS.API.STREAM.INFO") and result["names"] == "ORDERS"
    before, after = result["api"]
    assert after[result["publisher"]] - before[result["publisher"]] == 1
    assert after[result["other"]] == before[result["other"]] and after[result["leader"]] == before[result["leader"]]
    # Copies crossed one link each: the nodes that received them forwarded nothing back.
    assert stats[result["leader"]].msgs_forwarded == 0 and stats[result["other"]].msgs_forwarded == 0
