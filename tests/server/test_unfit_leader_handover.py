"""A stream leader that cannot serve hands its leadership to a live peer that can serve (issue 14, smaller
things; the bounce of sim consumer seeds 129 and 596).

Method: three real nodes in one process (`Cluster`), real TCP between them. First test: one follower is killed — the one the old
round-robin picked first (`peers` order) — and the test waits (polling with a deadline) until the leader's
Raft status no longer lists it as reachable. Then the leader's stream state machine is marked drifted, as
an audit or a failed read would, and its repair worker is woken. The first leadership transfer it starts
must target the live follower, and that follower must end up leading; before the fix the transfer went to
the dead peer first and the stream had no leader for another election timeout.

Second and third tests: nobody is killed; replicas are marked drifted in one synchronous step (as an
audit would), so no repair can start before the leader decides — a drifted leader's machine refuses
to give its snapshot, so a drifted follower stays unable until a fit replica leads. With the follower
that `reachable_followers` lists first drifted too, the leader must skip it (it would only hand back)
and hand over to the other one, which then leads and repairs both. With both followers drifted, the
leader must stay: the test waits until it said so twice (two election timeouts), checks no transfer
started, then lets one follower's repair end (its health back to current: its store was never
damaged) and waits for the hand-over to that one and for every replica to be current again.
"""

from __future__ import annotations

import logging

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


def _unfit_setup(cluster: Cluster, leader: str) -> tuple[list[str], list[str]]:
    """Record the leader's hand-over targets; its followers in `reachable_followers` order."""
    replica = cluster.node(leader).streams.replicas["S"]
    targets: list[str] = []
    hand_over = replica.repair.hand_over
    replica.repair.hand_over = lambda target, why: (targets.append(target), hand_over(target, why))
    return targets, list(cluster.node(leader).runtime.status(replica.group).raft.reachable_followers)


async def _stream_of_three(cluster: Cluster) -> str:
    await cluster.wait_for_meta_leader()
    await cluster.wait_ready()
    await cluster.node("n1").jetstream().add_stream(name="S", subjects=["s.>"], num_replicas=3)
    leader = await cluster.wait_until(lambda: stream_leader(cluster), 10, what="stream leader")
    for i in range(10):
        await cluster.node(leader).jetstream().publish("s.a", f"m{i}".encode())
    group = cluster.node(leader).streams.replicas["S"].group
    await cluster.wait_until(lambda: len(cluster.node(leader).runtime.status(group).raft.reachable_followers) == 2,
                             10, what="both followers reachable")
    # Every store holds all ten before any replica is marked: a drifted machine stops writing its store,
    # and the follower healed later must really hold what its log says.
    await cluster.wait_until(lambda: all(n.streams.replicas["S"].store.state().last_seq == 10
                                         for n in cluster.running()), 10, what="ten messages everywhere")
    return leader


def _all_current(cluster: Cluster) -> bool:
    return all(n.streams.replicas["S"].repair.health() is Health.current and not n.streams.replicas["S"].repair.busy
               for n in cluster.running())


async def test_an_unfit_leader_skips_an_unfit_follower_and_hands_over_to_the_fit_one(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            leader = await _stream_of_three(cluster)
            targets, (unfit, fit) = _unfit_setup(cluster, leader)
            for name in (leader, unfit):  # one step: no repair can begin in between
                cluster.node(name).streams.replicas["S"].machine.health = Health.drifted
            cluster.node(leader).streams.replicas["S"].repair.wake()
            await cluster.wait_until(lambda: targets, 5, what="a leadership transfer")
            assert targets[0] == fit
            await cluster.wait_until(lambda: stream_leader(cluster) == fit, 10, what=f"{fit} leads")
            await cluster.wait_until(lambda: _all_current(cluster), 20, what="every replica repaired")


async def test_an_unfit_leader_stays_while_no_follower_can_lead(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft.server.repair")
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            leader = await _stream_of_three(cluster)
            targets, followers = _unfit_setup(cluster, leader)
            for name in (leader, *followers):
                cluster.node(name).streams.replicas["S"].machine.health = Health.drifted
            cluster.node(leader).streams.replicas["S"].repair.wake()

            def stays() -> int:
                return sum("the unfit leader stays" in record.getMessage() for record in caplog.records)

            await cluster.wait_until(lambda: stays() >= 2, 10, what="the leader stays twice")
            assert targets == [] and stream_leader(cluster) == leader
            healed = followers[-1]
            cluster.node(healed).streams.replicas["S"].machine.health = Health.current
            await cluster.wait_until(lambda: targets, 5, what="a leadership transfer")
            assert targets[0] == healed
            await cluster.wait_until(lambda: stream_leader(cluster) == healed, 10, what=f"{healed} leads")
            await cluster.wait_until(lambda: _all_current(cluster), 20, what="every replica repaired")
