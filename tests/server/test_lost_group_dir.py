"""A node that lost a group's directory repairs; it never starts a fresh log that votes (issue 14, hole 1).

Method: the issue's reproduction on three real nodes in one process (`Cluster`: real TCP, real files).
20 messages on all three replicas of an R3 stream; the lagging follower stopped; 30 more acknowledged by
the leader and the other follower; that follower stopped and its `streams/S/` (or only `streams/S/raft/`)
removed (in one case with the node's record of its groups, `groups.rec`, as well); the leader stopped; the lagger and the wiped follower started. Before the fix the wiped follower
bootstrapped a new log at term 1 and voted for the lagger, which led without the 30 acknowledged messages
and acknowledged new ones at sequences 21.. — so while only those two run, a publish must not be
acknowledged, and the wiped replica must report repairing. When the old leader returns, every replica
ends with all 50 acknowledged messages and equal state tuples (first, last, count, bytes, digest).

The meta group is checked the same way with `meta/` removed: stream creates acknowledged by two nodes,
the wiped node and the lagger alone must not elect a meta leader (a create through them is not
acknowledged), and all three end with the same streams.

Absence of a leader is observed over a bounded window of many election timeouts (ticks of 20 ms,
elections after 10): a publish or create that gets acknowledged in that window is the failure.
"""

from __future__ import annotations

import os
import shutil

import pytest
import trio

from jsraft.server.groups.meta_service import META_GROUP
from jsraft.stream import Health
from jsraft.testing.cluster import Cluster

TICK_MS = 20
ELECTION_TICKS = 10
NO_LEADER_WINDOW_S = 3.0  # 15 election timeouts


def remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def store_content(store) -> dict[int, bytes]:
    state = store.state()
    content = {}
    for seq in range(state.first_seq, state.last_seq + 1):
        try:
            content[seq] = store.load(seq).payload
        except Exception:
            continue
    return content


def stream_leader(cluster: Cluster) -> str | None:
    leaders = {n.streams.replicas["S"].leader_id() for n in cluster.running() if "S" in n.streams.replicas}
    return leaders.pop() if len(leaders) == 1 else None


async def r3_stream_on_all_three(cluster: Cluster, count: int) -> tuple[str, dict[int, bytes]]:
    """Stream S (R3, `s.>`) with `count` acknowledged messages held by all three replicas: its leader,
    and the acknowledged payloads by sequence."""
    await cluster.wait_for_meta_leader()
    await cluster.wait_ready()
    await cluster.node("n1").jetstream().add_stream(name="S", subjects=["s.>"], num_replicas=3)
    leader = await cluster.wait_until(lambda: stream_leader(cluster), 10, what="stream leader")
    js = cluster.node(leader).jetstream()
    acked = {}
    for i in range(count):
        acked[(await js.publish("s.a", f"m{i}".encode())).seq] = f"m{i}".encode()
    await cluster.wait_until(lambda: all(cluster.replica_store(n, "S").state().last_seq == count
                                         for n in cluster.names), 10, what=f"{count} on all three")
    return leader, acked


async def nothing_acknowledged(request, window_s: float) -> None:
    """Try `request` (an awaitable factory) until `window_s` passes; fail if any try is acknowledged."""
    with trio.move_on_after(window_s):
        while True:
            try:
                with trio.move_on_after(0.5):
                    answer = await request()
                    raise AssertionError(f"acknowledged with only the stale and the wiped node up: {answer}")
            except AssertionError:
                raise
            except Exception:
                pass
            await trio.sleep(0.05)


@pytest.mark.parametrize("lost", ["streams/S", "streams/S/raft", "streams/S groups.rec"])
async def test_a_follower_that_lost_its_stream_directory_repairs_instead_of_voting(tmp_path, lost):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            leader, acked = await r3_stream_on_all_three(cluster, 20)
            lagger, wiped = [name for name in cluster.names if name != leader]
            js = cluster.node(leader).jetstream()
            await cluster.stop(lagger)
            for i in range(20, 50):
                acked[(await js.publish("s.a", f"m{i}".encode())).seq] = f"m{i}".encode()
            assert sorted(acked) == list(range(1, 51))
            await cluster.stop(wiped)
            for path in lost.split():  # with groups.rec too: the node's record of its groups lost as well
                remove(f"{cluster.configs[wiped].store_dir}/{path}")
            await cluster.stop(leader)

            await cluster.start_node(lagger)
            await cluster.start_node(wiped)
            await cluster.wait_until(lambda: "S" in cluster.node(wiped).streams.replicas, 10, what="replica open")
            group = cluster.node(wiped).streams.replicas["S"].group
            assert cluster.node(wiped).runtime.status(group).raft.repairing
            # Monitoring says so too, although its store has nothing it knows to be missing.
            assert cluster.node(wiped).streams.replicas["S"].repair.health() is Health.repairing
            survivor_js = cluster.node(lagger).jetstream()
            await nothing_acknowledged(lambda: survivor_js.publish("s.a", b"stale"), NO_LEADER_WINDOW_S)
            assert cluster.node(wiped).runtime.status(group).raft.repairing

            await cluster.start_node(leader)
            await cluster.wait_until(lambda: stream_leader(cluster) is not None and all(
                cluster.replica_store(n, "S").state().last_seq >= 50 for n in cluster.names), 30,
                what="the old leader back and every replica at 50")
            await cluster.wait_until(lambda: not cluster.node(wiped).runtime.status(group).raft.repairing, 30,
                                     what="the wiped replica repaired")
            await cluster.wait_until(lambda: len({cluster.replica_store(n, "S").state().agreement_key()
                                                  for n in cluster.names}) == 1, 30, what="replicas agree")
            for name in cluster.names:
                content = store_content(cluster.replica_store(name, "S"))
                for seq, payload in acked.items():
                    assert content.get(seq) == payload, f"{name} lost acknowledged seq {seq}"


async def test_a_node_that_lost_its_meta_directory_repairs_instead_of_voting(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            leader = await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            lagger, wiped = [name for name in cluster.names if name != leader]
            js = cluster.node(leader).jetstream()
            await js.add_stream(name="A", subjects=["a.>"], num_replicas=1)
            await cluster.wait_until(lambda: all(cluster.meta(n).names() == ["A"] for n in cluster.names), 10)
            await cluster.stop(lagger)
            for name in ("B", "C"):
                await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], num_replicas=1)
            await cluster.wait_until(lambda: cluster.meta(wiped).names() == ["A", "B", "C"], 10)
            await cluster.stop(wiped)
            shutil.rmtree(f"{cluster.configs[wiped].store_dir}/meta")
            await cluster.stop(leader)

            await cluster.start_node(lagger)
            await cluster.start_node(wiped)
            assert cluster.node(wiped).runtime.status(META_GROUP).raft.repairing
            survivor_js = cluster.node(lagger).jetstream()
            await nothing_acknowledged(lambda: survivor_js.add_stream(name="D", subjects=["d.>"], num_replicas=1),
                                       NO_LEADER_WINDOW_S)

            await cluster.start_node(leader)
            await cluster.wait_for_meta_leader(30)
            await cluster.wait_until(lambda: all(cluster.meta(n).names() == ["A", "B", "C"] for n in cluster.names),
                                     30, what="every node's meta state holds A, B, C")
            await cluster.wait_until(lambda: not cluster.node(wiped).runtime.status(META_GROUP).raft.repairing, 30,
                                     what="the wiped meta replica repaired")
