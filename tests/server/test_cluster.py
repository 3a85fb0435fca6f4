"""Three real nodes in one process (`jsraft.testing.cluster.Cluster`): forwarding, replication, failover,
deletes.

Method: real TCP on loopback and real files under `tmp_path`; requests go through a node's embedded
JetStream context, which forwards to the meta or stream leader over `$rpc`. Replicas are compared by
reading each node's local store directly (`Cluster.replica_store`): equal `state().agreement_key()`
(first/last seq, count, bytes, content digest) and equal messages. Every wait polls with a deadline.
"""

from __future__ import annotations

import os

import pytest
import trio

from jsraft.errors import InvalidConfig, StreamNotFound, UnknownConfigField
from jsraft.testing.cluster import Cluster

TICK_MS = 20
ELECTION_TICKS = 10


def follower_of(cluster: Cluster, leader: str) -> str:
    return next(name for name in cluster.names if name != leader)


async def publish_all(js, subject_of, count: int, *, workers: int = 32, first: int = 0, retry: bool = False) -> dict[int, int]:
    """Publish `count` messages from `workers` concurrent tasks; returns index -> acked seq. With
    `retry`, a failed publish is retried with the same msg id (dedupe makes the retry safe)."""
    acked: dict[int, int] = {}

    async def worker(start: int) -> None:
        for i in range(first + start, first + count, workers):
            for attempt in range(50):
                try:
                    ack = await js.publish(subject_of(i), f"m{i}".encode(), msg_id=f"id-{i}")
                    acked[i] = ack.seq
                    break
                except Exception:
                    if not retry or attempt == 49:
                        raise
                    await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        for start in range(workers):
            nursery.start_soon(worker, start)
    return acked


def store_content(store) -> list[tuple[int, str, bytes]]:
    state = store.state()
    out = []
    for seq in range(state.first_seq, state.last_seq + 1):
        try:
            msg = store.load(seq)
        except Exception:
            continue
        out.append((msg.seq, msg.subject, msg.payload))
    return out


async def converged(cluster: Cluster, stream: str, names: list[str], last_seq: int) -> bool:
    keys = set()
    for name in names:
        replica = cluster.node(name).streams.replicas.get(stream)
        if replica is None or replica.store is None:
            return False
        state = replica.store.state()
        if state.last_seq != last_seq:
            return False
        keys.add(state.agreement_key())
    return len(keys) == 1


async def test_three_nodes_forwarding_and_replication(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            leader = await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            follower = follower_of(cluster, leader)
            js = cluster.node(follower).jetstream()

            r1 = await js.add_stream(name="ONE", subjects=["one.>"], num_replicas=1)
            assert len(r1.cluster["replicas"]) == 1
            r3 = await js.add_stream(name="THREE", subjects=["three.>"], num_replicas=3)
            assert sorted(r3.cluster["replicas"]) == cluster.names
            for name in cluster.names:  # every node's meta knows both, applied from the log
                await cluster.wait_until(lambda: cluster.meta(name).names() == ["ONE", "THREE"], 5)

            acked = await publish_all(js, lambda i: f"three.{i % 5}", 2000)
            assert sorted(acked.values()) == list(range(1, 2001))
            one = await cluster.node(leader).jetstream().publish("one.x", b"r1")
            assert one.stream == "ONE" and one.seq == 1

            await cluster.wait_until(lambda: converged(cluster, "THREE", cluster.names, 2000), 10,
                                     what="R3 replicas converged")
            stores = [cluster.replica_store(name, "THREE") for name in cluster.names]
            assert len({store.state().agreement_key() for store in stores}) == 1
            contents = [store_content(store) for store in stores]
            assert contents[0] == contents[1] == contents[2]
            assert len(contents[0]) == 2000
            by_seq = {seq: i for i, seq in acked.items()}
            assert all(payload == f"m{by_seq[seq]}".encode() for seq, _, payload in contents[0])

            info = await js.stream_info("THREE")
            assert info.state["messages"] == 2000
            assert {r["health"] for r in info.cluster["replicas"].values()} == {"current"}
            msg = await cluster.node(follower).jetstream().get_msg("THREE", seq=1234)
            assert msg.data == f"m{by_seq[1234]}".encode()


async def test_kill_stream_leader_and_restart(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await cluster.node("n1").jetstream().add_stream(name="S", subjects=["s.>"], num_replicas=3)
            first = await publish_all(cluster.node("n1").jetstream(), lambda i: "s.a", 500)

            def stream_leader() -> str | None:
                leaders = {n.streams.replicas["S"].leader_id() for n in cluster.running() if "S" in n.streams.replicas}
                return leaders.pop() if len(leaders) == 1 else None
            victim = await cluster.wait_until(stream_leader, 5)
            survivor = follower_of(cluster, victim)
            js = cluster.node(survivor).jetstream()

            acked: dict[int, int] = dict(first)

            async def keep_publishing() -> None:
                acked.update(await publish_all(js, lambda i: "s.b", 1000, first=500, workers=16, retry=True))

            async with trio.open_nursery() as inner:
                inner.start_soon(keep_publishing)
                await cluster.wait_until(lambda: cluster.replica_store(survivor, "S").state().last_seq >= 700, 10)
                await cluster.kill(victim)
            assert len(acked) == 1500

            await cluster.restart(victim)
            await cluster.wait_until(lambda: converged(cluster, "S", cluster.names, max(acked.values())), 20,
                                     what="replicas converged after restart")
            for name in cluster.names:
                content = {seq: payload for seq, _, payload in store_content(cluster.replica_store(name, "S"))}
                for i, seq in acked.items():
                    assert content.get(seq) == f"m{i}".encode(), f"{name} lost acked message {i} (seq {seq})"
            assert len(set(acked.values())) == 1500  # dedupe: every message once


async def test_delete_stream_and_bad_input(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            leader = await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node(follower_of(cluster, leader)).jetstream()

            with pytest.raises(UnknownConfigField, match="colour") as info:
                await js.add_stream(name="BAD", subjects=["bad"], colour="red")
            assert info.value.err_code == 10052
            with pytest.raises(InvalidConfig, match="stream name") as info:
                await js.add_stream(name="has space", subjects=["x"])
            assert info.value.err_code == 10052
            # The same refusal when it comes back over $rpc from the meta leader (bypassing the local parse).
            with pytest.raises(UnknownConfigField) as info:
                await cluster.node(follower_of(cluster, leader)).call_meta(
                    "stream.create", {"name": "BAD"}, [b'{"name": "BAD", "colour": 1}'])
            assert info.value.err_code == 10052 and "colour" in info.value.description
            assert all(cluster.meta(name).names() == [] for name in cluster.names)
            assert not any(os.path.exists(cluster.stream_dir(name, "BAD")) for name in cluster.names)

            await js.add_stream(name="GONE", subjects=["gone.>"], num_replicas=3)
            await publish_all(js, lambda i: "gone.x", 50)
            dirs = [cluster.stream_dir(name, "GONE") for name in cluster.names]
            await cluster.wait_until(lambda: all(os.path.isdir(d) for d in dirs), 5)

            await js.delete_stream("GONE")
            for name in cluster.names:
                await cluster.wait_until(lambda: not os.path.exists(cluster.stream_dir(name, "GONE")), 5,
                                         what=f"{name} removed GONE")
                assert "GONE" not in cluster.meta(name).names()
                assert not any(g.startswith("S-GONE-") for g in cluster.node(name).group_names())
            with pytest.raises(StreamNotFound):
                await js.stream_info("GONE")
            with pytest.raises(StreamNotFound):
                await js.delete_stream("GONE")


async def test_a_config_update_survives_a_stream_leader_change(tmp_path):
    """The stream leader dies after meta applied an update but before it proposed CONFIG to the stream
    group (modelled by making its proposal a no-op): the next leader proposes it, by version."""
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await cluster.node("n1").jetstream().add_stream(name="S", subjects=["s.>"], num_replicas=3)

            def stream_leader() -> str | None:
                leaders = {n.streams.replicas["S"].leader_id() for n in cluster.running() if "S" in n.streams.replicas}
                return leaders.pop() if len(leaders) == 1 else None
            victim = await cluster.wait_until(stream_leader, 5)
            replica = cluster.node(victim).streams.replicas["S"]

            async def lost_proposal() -> None:
                return None
            replica.reconcile_config = lost_proposal  # the leader never gets to propose
            survivor = follower_of(cluster, victim)
            await cluster.node(survivor).jetstream().update_stream(name="S", subjects=["s.>"], num_replicas=3,
                                                                    max_msgs=7)
            for name in cluster.names:
                await cluster.wait_until(lambda: cluster.meta(name).stream("S").config.max_msgs == 7, 5)
            assert replica.machine.config.max_msgs != 7
            await cluster.kill(victim)
            others = [n for n in cluster.names if n != victim]

            def updated() -> bool:
                return all(cluster.node(n).streams.replicas["S"].machine.config.max_msgs == 7 for n in others)
            await cluster.wait_until(updated, 10, what="the new stream leader proposed the update")
            js = cluster.node(survivor).jetstream()
            for i in range(10):
                await js.publish("s.x", f"m{i}".encode())
            info = await js.stream_info("S")
            assert info.state["messages"] == 7  # the group enforces the updated limit
