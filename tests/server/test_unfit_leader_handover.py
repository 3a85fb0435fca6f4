"""A stream leader that cannot serve hands its leadership to a live peer (issue 14, smaller things).

Method: three real nodes in one process (`Cluster`). One follower is killed — the one the old
round-robin picked first (`peers` order) — and the test waits (polling with a deadline) until the leader's
Raft status no longer lists it as reachable. Then the leader's stream state machine is marked drifted, as
an audit or a failed read would, and its repair worker is woken. The first leadership transfer it starts
must target the live follower, and that follower must end up leading; before the fix the transfer went to
the dead peer first and the stream had no leader for another election timeout.
"""

from __future__ import annotations

import trio

from jsraft.stream import Health
from jsraft.testing.cluster import Cluster

TICK_MS = 20
ELECTION_TICKS = 10


def stream_leader(cluster: Cluster) -> str | None:
    leaders = {n.streams.replicas["S"].leader_id() for n in cluster.running() if "S" in n.streams.replicas}
    return leaders.pop() if len(leaders) == 1 else None


async def test_an_unfit_leader_hands_over_to_a_reachable_follower(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node("n1").jetstream()
            await js.add_stream(name="S", subjects=["s.>"], num_replicas=3)
            leader = await cluster.wait_until(lambda: stream_leader(cluster), 10, what="stream leader")
            for i in range(10):
                await cluster.node(leader).jetstream().publish("s.a", f"m{i}".encode())
            replica = cluster.node(leader).streams.replicas["S"]
            dead, live = [peer for peer in replica.peers if peer != leader]
            await cluster.kill(dead)
            group = replica.group
            await cluster.wait_until(
                lambda: cluster.node(leader).runtime.status(group).raft.reachable_followers == (live,), 10,
                what=f"{dead} no longer reachable from the leader")

            targets: list[str] = []
            hand_over = replica.repair.hand_over
            replica.repair.hand_over = lambda target, why: (targets.append(target), hand_over(target, why))
            replica.machine.health = Health.drifted
            replica.repair.wake()
            await cluster.wait_until(lambda: targets, 5, what="a leadership transfer")
            assert targets[0] == live
            await cluster.wait_until(lambda: cluster.node(live).streams.replicas["S"].leader_id() == live, 10,
                                     what=f"{live} leads")
