"""`$JS.API.STREAM.PEER.REMOVE.<stream>` through nats-py on a real three-node cluster: an R1 stream is moved
to a spare server with every acked message, an R3 stream without a spare shrinks to the other two and
keeps taking publishes, and the refusals answer nats-server's error codes.

Method: a `jsraft.testing.cluster.Cluster` (real nodes, TCP, files) in the test's trio loop; the requests
are nats-py code under asyncio in a worker thread (`nats_kit.in_asyncio`). Where the stream lives is read
from the meta state and from the stream group's Raft status; contents are read from the replicas' own
stores. Waits are polls with deadlines.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats.js.errors
import trio

from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect, until
from test_consumers_nats import live_seqs

TIMEOUT_S = 90


def voters(cluster: Cluster, stream: str) -> tuple[str, ...] | None:
    """The stream group's voters as its leader sees them, or None without a leader."""
    for node in cluster.running():
        replica = node.streams.replicas.get(stream)
        if replica is None:
            continue
        status = node.runtime.status(replica.group).raft
        if status.role.value == "leader":
            return tuple(sorted(status.voters))
    return None


async def publish_once(js: Any, subject: str, payload: bytes, msg_id: str, timeout_s: float = 20.0) -> int:
    """Publish with a `Nats-Msg-Id`, asking again on 503 while the stream's group changes hands (a batch
    whose reply timed out may have been stored: the id makes the retry answer the original's sequence)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            return (await js.publish(subject, payload, headers={"Nats-Msg-Id": msg_id})).seq
        except nats.js.errors.ServiceUnavailableError as error:
            assert loop.time() < deadline, f"no PubAck for {msg_id} in {timeout_s}s (last: {error})"
            await asyncio.sleep(0.1)


def assigned(cluster: Cluster, stream: str) -> tuple[str, ...]:
    return tuple(sorted(cluster.meta("n1").stream(stream).peers))


async def _request(nc: Any, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=10)
    return json.loads(reply.data)


async def scenario(cluster: Cluster, url: str) -> None:
    nc = await nats_connect(url)
    js = nc.jetstream()
    try:
        await js.add_stream(name="ONE", subjects=["one.>"], num_replicas=1)
        await js.add_stream(name="THREE", subjects=["three.>"], num_replicas=3)
        acked_one = [(await js.publish(f"one.{i % 4}", b"o%d" % i)).seq for i in range(200)]
        acked_three = [(await js.publish(f"three.{i % 4}", b"t%d" % i)).seq for i in range(200)]
        (home,) = trio.from_thread.run_sync(lambda: cluster.meta("n1").stream("ONE").peers)

        # Refusals first: nothing changes.
        missing = await _request(nc, "$JS.API.STREAM.PEER.REMOVE.NOPE", {"peer": "n1"})
        assert missing["error"]["err_code"] == 10059, missing
        not_member = await _request(nc, "$JS.API.STREAM.PEER.REMOVE.ONE",
                                    {"peer": next(n for n in cluster.names if n != home)})
        assert not_member["error"]["err_code"] == 10040, not_member
        empty = await _request(nc, "$JS.API.STREAM.PEER.REMOVE.ONE", {})
        assert empty["error"]["code"] == 400, empty

        # R1: a spare takes the stream's place, and the messages move with it.
        moved = await _request(nc, "$JS.API.STREAM.PEER.REMOVE.ONE", {"peer": home})
        assert moved == {"type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": True}, moved
        await until(lambda: assigned(cluster, "ONE") != (home,), "n1's meta state has ONE moved")
        (new_home,) = trio.from_thread.run_sync(assigned, cluster, "ONE")
        await until(lambda: voters(cluster, "ONE") == (new_home,), "ONE's group is the spare alone", 30)
        await until(lambda: live_seqs(cluster.replica_store(new_home, "ONE")) == acked_one,
                    "every acked ONE message on the spare", 30)
        assert await publish_once(js, "one.x", b"after", "one-after") == acked_one[-1] + 1

        # R3 on three servers: no spare, so the set shrinks to the two others and the stream goes on.
        gone = "n3"
        shrunk = await _request(nc, "$JS.API.STREAM.PEER.REMOVE.THREE", {"peer": gone})
        assert shrunk.get("success") is True, shrunk
        rest = tuple(sorted(n for n in cluster.names if n != gone))
        await until(lambda: assigned(cluster, "THREE") == rest, "n1's meta state has THREE on the two others")
        await until(lambda: voters(cluster, "THREE") == rest, "THREE's group is the two others", 30)
        after = await publish_once(js, "three.x", b"after", "three-after")
        assert after == acked_three[-1] + 1
        for name in rest:
            await until(lambda name=name: live_seqs(cluster.replica_store(name, "THREE")) == acked_three + [after],
                        f"every acked THREE message on {name}", 30)
        info = await js.stream_info("THREE")
        assert info.state.messages == len(acked_three) + 1
    finally:
        await nc.close()


async def test_stream_peer_remove_moves_or_shrinks_and_keeps_every_acked_message(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=25) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await in_asyncio(scenario, cluster, cluster.node("n1").url, timeout_s=TIMEOUT_S)


def meta_voters(cluster: Cluster, name: str) -> tuple[str, ...]:
    return tuple(sorted(cluster.node(name).meta_service.meta_voters()))


def meta_leader(cluster: Cluster) -> str | None:
    leaders = {node.meta_service.leader_id() for node in cluster.running()}
    return leaders.pop() if len(leaders) == 1 else None


async def server_remove_scenario(cluster: Cluster, url: str) -> None:
    nc = await nats_connect(url)
    js = nc.jetstream()
    try:
        await js.add_stream(name="THREE", subjects=["three.>"], num_replicas=3)
        acked = [(await js.publish(f"three.{i % 4}", b"t%d" % i)).seq for i in range(100)]
        trio.from_thread.run(cluster.kill, "n3")

        # A server that is down is taken out of the meta group; its streams shrink to the others.
        removed = await _request(nc, "$JS.API.SERVER.REMOVE", {"peer": "n3"})
        assert removed == {"type": "io.nats.jetstream.api.v1.meta_server_remove_response", "success": True}, removed
        for name in ("n1", "n2"):
            await until(lambda name=name: meta_voters(cluster, name) == ("n1", "n2"), f"{name}: meta voters n1, n2")
            await until(lambda name=name: "n3" not in cluster.meta(name).peers(), f"{name}: n3 not a meta peer")
        await until(lambda: assigned(cluster, "THREE") == ("n1", "n2"), "THREE placed on n1, n2")
        await until(lambda: voters(cluster, "THREE") == ("n1", "n2"), "THREE's group is n1, n2", 30)
        acked.append(await publish_once(js, "three.x", b"after", "after-removal"))
        assert acked[-1] == acked[-2] + 1
        for name in ("n1", "n2"):
            await until(lambda name=name: live_seqs(cluster.replica_store(name, "THREE")) == acked,
                        f"every acked message on {name}", 30)

        again = await _request(nc, "$JS.API.SERVER.REMOVE", {"peer": "n3"})
        assert again["error"]["err_code"] == 10044, again
        unknown = await _request(nc, "$JS.API.SERVER.REMOVE", {"peer_id": "n9"})
        assert unknown["error"]["err_code"] == 10044, unknown
        empty = await _request(nc, "$JS.API.SERVER.REMOVE", {})
        assert empty["error"]["code"] == 400, empty

        # The meta leader itself: it hands leadership over and the new leader removes it.
        leader = meta_leader(cluster)
        assert leader in ("n1", "n2")
        keeper = "n2" if leader == "n1" else "n1"
        gone = await _request(nc, "$JS.API.SERVER.REMOVE", {"peer": leader})
        assert gone.get("success") is True, gone
        await until(lambda: meta_voters(cluster, keeper) == (keeper,), f"{keeper} is the only meta voter", 30)
        await until(lambda: meta_leader(cluster) == keeper, f"{keeper} leads the meta group", 30)
        await until(lambda: tuple(cluster.meta(keeper).stream("THREE").peers) == (keeper,), "THREE on the keeper")
    finally:
        await nc.close()


async def test_server_remove_takes_a_server_out_of_the_meta_group_and_its_streams(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=25) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await in_asyncio(server_remove_scenario, cluster, cluster.node("n1").url, timeout_s=TIMEOUT_S)
