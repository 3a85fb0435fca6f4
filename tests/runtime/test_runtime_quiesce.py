"""Quiescent groups (runtime/quiesce.py): idle groups stop ticking, wake on work, and stay safe.

Method: `runtime_harness.Cluster(beats=True)`: three real `NodeRuntime`s (real cores and WALs) whose
node beats travel the same in-memory router queues as their Raft messages, under `autojump_clock`, so
liveness and election timeouts pass in virtual time. Quiescence is observed from outside: the Raft
messages the router carries (none while every group is quiet), the groups' roles and terms after a node
is stopped or partitioned away, and the values every state machine applied.
"""

from __future__ import annotations

import random

import pytest
import trio

from runtime_harness import GROUP, TICK_MS, Cluster, ListMachine, eventually

from jsraft.raft.errors import NotLeader, ProposalDropped
from jsraft.runtime.errors import BadBeat
from jsraft.runtime.quiesce import Beat, Quiescence, decode_beat, encode_beat

GROUPS = [GROUP, "g2", "g3", "g4"]
LIVENESS_S = 10 * TICK_MS / 1000  # the runtime's default liveness_ticks


async def _cluster(nursery: trio.Nursery) -> Cluster:
    cluster = Cluster(nursery, beats=True)
    await cluster.start_all()
    for name in GROUPS[1:]:
        for node_id in cluster.ids:
            await cluster.runtimes[node_id].open_group(name, voters=cluster.ids, state_machine=ListMachine())
    for name in GROUPS:
        await cluster.wait_leader(name)
    return cluster


def _all_quiet(cluster: Cluster, nodes: list[str] | None = None) -> bool:
    return all(cluster.runtimes[n].quiescence.quiet_groups() == sorted(GROUPS) for n in nodes or cluster.ids)


async def test_idle_groups_quiesce_and_send_no_raft_messages(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = await _cluster(nursery)
        await eventually(lambda: _all_quiet(cluster))
        sent = cluster.router.sent
        await trio.sleep(100 * TICK_MS / 1000)  # 100 ticks: 1,200 heartbeats without quiescence
        assert cluster.router.sent == sent
        assert _all_quiet(cluster)
        assert sorted(len(cluster.leaders(name)) for name in GROUPS) == [1] * len(GROUPS)
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_a_proposal_wakes_a_quiesced_group_which_commits_then_quiesces_again(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = await _cluster(nursery)
        await eventually(lambda: _all_quiet(cluster))
        leader = cluster.leaders(GROUP)[0]
        term = cluster.runtimes[leader].status(GROUP).raft.current_term
        assert await cluster.runtimes[leader].propose(GROUP, b"after-quiet") is not None
        await eventually(lambda: all(m.values == [b"after-quiet"] for m in cluster.machines.values()))
        await eventually(lambda: _all_quiet(cluster))
        assert cluster.runtimes[leader].status(GROUP).raft.current_term == term  # no election on the way
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_killing_the_leader_node_of_quiesced_groups_elects_new_leaders(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = await _cluster(nursery)
        leader = cluster.leaders(GROUP)[0]
        for name in GROUPS:  # one node leads them all, so its death orphans every group
            if cluster.leaders(name) != [leader]:
                cluster.runtimes[cluster.leaders(name)[0]].transfer_leadership(name, leader)
        await eventually(lambda: all(cluster.leaders(name) == [leader] for name in GROUPS))
        await eventually(lambda: _all_quiet(cluster))
        await cluster.stop(leader)
        killed_at = trio.current_time()
        survivors = [n for n in cluster.ids if n != leader]

        def all_led_again() -> bool:
            return all(len(cluster.leaders(name)) == 1 and cluster.leaders(name)[0] in survivors
                       for name in GROUPS)
        await eventually(all_led_again)
        failover_s = trio.current_time() - killed_at
        # Liveness lapse, then at most two randomized election timeouts ([10, 20) ticks each) and a vote.
        assert failover_s < LIVENESS_S + 4 * 20 * TICK_MS / 1000, failover_s
        runtime = cluster.runtimes[cluster.leaders(GROUP)[0]]
        assert await runtime.propose(GROUP, b"new-leader") is not None
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_a_partitioned_quiesced_leader_wakes_and_steps_down(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = await _cluster(nursery)
        await eventually(lambda: _all_quiet(cluster))
        leader = cluster.leaders(GROUP)[0]
        old_term = cluster.runtimes[leader].status(GROUP).raft.current_term
        others = {n for n in cluster.ids if n != leader}
        cluster.router.partition = [{leader}, others]
        # The majority side elects; the old leader's node stops hearing its members, wakes the group,
        # and check-quorum makes it step down: a partition never keeps it leading quietly.
        await eventually(lambda: [n for n in cluster.leaders(GROUP) if n in others] != [])
        await eventually(lambda: cluster.runtimes[leader].status(GROUP).raft.role != "leader")
        assert not cluster.runtimes[leader].quiescence.is_quiet(GROUP)
        new_leader = [n for n in cluster.leaders(GROUP) if n in others][0]
        assert cluster.runtimes[new_leader].status(GROUP).raft.current_term > old_term
        cluster.router.partition = None
        assert await cluster.runtimes[new_leader].propose(GROUP, b"healed") is not None
        await eventually(lambda: all(m.values == [b"healed"] for m in cluster.machines.values()))
        await eventually(lambda: _all_quiet(cluster))
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


def _quiet_without(cluster: Cluster, down: str) -> bool:
    return _all_quiet(cluster, [n for n in cluster.ids if n != down])


async def test_groups_with_a_member_node_down_quiesce_again_and_wake_when_it_returns(autojump_clock):
    """Before: a leader quiesced only while every member was live, so after a node died every group it
    was in ticked on the survivors at 10 Hz until it came back (1,000 such streams starved a node)."""
    async with trio.open_nursery() as nursery:
        cluster = await _cluster(nursery)
        await eventually(lambda: _all_quiet(cluster))
        leader = cluster.leaders(GROUP)[0]
        follower = next(n for n in cluster.ids if n != leader)
        cluster.router.partition = [{follower}, {n for n in cluster.ids if n != follower}]
        # The leaders wake when the follower's node lapses, then quiesce again with the live majority.
        await eventually(lambda: not cluster.runtimes[leader].quiescence.is_quiet(GROUP))
        await eventually(lambda: _quiet_without(cluster, follower))
        assert await cluster.runtimes[leader].propose(GROUP, b"while-away") is not None  # a majority commits
        await eventually(lambda: _quiet_without(cluster, follower))
        from_majority: list[str] = []  # the cut-off follower campaigns on its own; the majority is silent
        cluster.router.on_send.append(
            lambda frm, to, group, m: from_majority.append(group) if frm != follower else None)
        await trio.sleep(50 * TICK_MS / 1000)
        assert from_majority == []  # quiet: nothing but node beats, even with a member away
        assert cluster.leaders(GROUP) == [leader]
        # Healed (same incarnation): its beat wakes the groups that quiesced without it; it catches up.
        cluster.router.on_send.clear()
        cluster.router.partition = None
        await eventually(lambda: cluster.machines[follower].values == [b"while-away"])
        await eventually(lambda: _all_quiet(cluster))
        # Down and restarted (a new incarnation): the same, from its disk.
        await cluster.stop(follower)
        await eventually(lambda: _quiet_without(cluster, follower))
        assert await cluster.runtimes[leader].propose(GROUP, b"while-down") is not None
        await eventually(lambda: _quiet_without(cluster, follower))
        await cluster.start(follower)
        for name in GROUPS[1:]:
            await cluster.runtimes[follower].open_group(name, voters=cluster.ids, state_machine=ListMachine())
        await eventually(lambda: cluster.machines[follower].values[-1:] == [b"while-down"])
        await eventually(lambda: _all_quiet(cluster))
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_a_leader_without_a_live_majority_does_not_quiesce(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = await _cluster(nursery)
        await eventually(lambda: _all_quiet(cluster))
        leader = cluster.leaders(GROUP)[0]
        cluster.router.partition = [{leader}, {n for n in cluster.ids if n != leader}]
        # Alone, it wakes when its members lapse and keeps ticking until check-quorum makes it step
        # down: from waking on, it is never quiet while it leads.
        await eventually(lambda: not cluster.runtimes[leader].quiescence.is_quiet(GROUP))
        while cluster.runtimes[leader].status(GROUP).raft.role == "leader":
            assert not cluster.runtimes[leader].quiescence.is_quiet(GROUP)
            await trio.sleep(TICK_MS / 1000)
        assert cluster.runtimes[leader].status(GROUP).raft.role != "leader"
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_a_restarted_leader_node_wakes_its_followers_before_its_liveness_lapses(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = await _cluster(nursery)
        await eventually(lambda: _all_quiet(cluster))
        leader = cluster.leaders(GROUP)[0]
        await cluster.stop(leader)
        await cluster.start(leader)  # same disk, new incarnation: a new boot id in its beats
        for name in GROUPS[1:]:
            await cluster.runtimes[leader].open_group(name, voters=cluster.ids, state_machine=ListMachine())
        for name in GROUPS:
            await cluster.wait_leader(name)
        assert await cluster.runtimes[cluster.leaders(GROUP)[0]].propose(GROUP, b"x") is not None
        await eventually(lambda: _all_quiet(cluster))
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


def test_beat_codec_round_trips_and_refuses_malformed_beats():
    beat = Beat(boot=7, quiesce=(("g", 3, 12),), wake=("h",))
    assert decode_beat(encode_beat(beat)) == beat
    for bad in (b"", b"[]", b'{"b":1,"q":[],"w":[1]}', b'{"b":"1","q":[],"w":[]}',
                b'{"b":1,"q":[["g",1]],"w":[]}', b'{"b":1,"q":[["g","1",2]],"w":[]}', b"\xff"):
        with pytest.raises(BadBeat) as refused:
            decode_beat(bad)
        assert refused.value.err_code == 20205


def test_peer_liveness_counts_this_nodes_ticks_so_a_stalled_loop_does_not_lapse_every_peer():
    """A node whose event loop stalled (its peers' beats unread in the sockets) used to find, at its next
    tick, every peer unheard for longer than the wall-clock timeout, and woke every quiesced group at
    once; the ticker drops missed ticks, so counted in ticks the stall is one tick."""
    quiet = Quiescence("n1", lambda peer, payload: True, timeout_ticks=10, quiet_ticks=3, rng=random.Random(1))
    quiet.on_beat("n2", encode_beat(Beat(boot=5)), lambda name: None)
    for _ in range(9):
        assert quiet.tick() == [] and quiet.live("n2")
    quiet.tick()
    assert not quiet.live("n2")  # the tenth tick without a beat: lapsed
    quiet.on_beat("n2", encode_beat(Beat(boot=5)), lambda name: None)
    assert quiet.live("n2")


async def test_wait_awake_sleeps_through_quiescence_until_the_group_wakes(autojump_clock):
    """Its bound is counted in node ticks (the tick wheel), its early ends are wakes and releases."""
    async with trio.open_nursery() as nursery:
        cluster = await _cluster(nursery)
        await eventually(lambda: _all_quiet(cluster))
        leader = cluster.leaders(GROUP)[0]
        runtime = cluster.runtimes[leader]
        started = trio.current_time()
        for _ in range(3):  # nothing wakes it: the whole bound, each time (an ended pause is not reused)
            await runtime.ticker.wait_awake(GROUP, ticks=50)
            assert trio.current_time() - started == pytest.approx(50 * TICK_MS / 1000, abs=TICK_MS / 1000)
            started = trio.current_time()
        long_waits: list[float] = []  # a short pause's bound ends it alone, not a long wait on the same group

        async def long_wait() -> None:
            await runtime.ticker.wait_awake(GROUP, ticks=40)
            long_waits.append(trio.current_time() - started)
        nursery.start_soon(long_wait)
        await runtime.ticker.pause(GROUP, 10)
        await eventually(lambda: long_waits != [])
        assert long_waits[0] == pytest.approx(40 * TICK_MS / 1000, abs=2 * TICK_MS / 1000)
        started = trio.current_time()
        woke_at: list[float] = []

        async def waiter() -> None:
            await runtime.ticker.wait_awake(GROUP, ticks=600)
            woke_at.append(trio.current_time())
        nursery.start_soon(waiter)
        await trio.sleep(1.0)
        proposed_at = trio.current_time()
        await runtime.propose(GROUP, b"wake")
        await eventually(lambda: woke_at != [])
        assert woke_at[0] - proposed_at < 0.1  # woken by the proposal, not by its 60 s timeout
        await eventually(lambda: runtime.ticker.is_quiet(GROUP))
        released_at: list[float] = []

        async def released() -> None:
            await runtime.ticker.wait_awake(GROUP, ticks=600)
            released_at.append(trio.current_time())
        nursery.start_soon(released)
        await trio.sleep(1.0)
        release_at = trio.current_time()
        runtime.ticker.release(GROUP)  # a task has a reason to look: it goes, the group stays quiet
        await eventually(lambda: released_at != [])
        assert released_at[0] - release_at < 0.1 and runtime.ticker.is_quiet(GROUP)
        runtime.ticker.wake_by_name("g2")  # an outside change: the group ticks again
        assert not runtime.ticker.is_quiet("g2")
        await runtime.ticker.wait_awake("g2", ticks=600)  # awake: returns at once
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("seed", [7, 11, 23, 42, 99])
async def test_many_groups_through_idle_work_transfers_and_a_restart_always_have_leaders(autojump_clock, seed):
    """A stress of the wake paths: 12 groups, rounds of quiet, proposals to some, leadership transfers
    in others, and a stop/start of one node; after each round every group has one leader that commits."""
    import random as _random
    rng = _random.Random(seed)
    names = [GROUP] + [f"s{i}" for i in range(11)]
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, beats=True)
        await cluster.start_all()
        for name in names[1:]:
            for node_id in cluster.ids:
                await cluster.runtimes[node_id].open_group(name, voters=cluster.ids, state_machine=ListMachine())
        for round_ in range(6):
            for name in names:
                await cluster.wait_leader(name)
            await trio.sleep(rng.uniform(0.05, 0.5))  # quiet for a while (or not yet)
            for name in rng.sample(names, 4):
                leader = cluster.leaders(name)[0]
                await cluster.runtimes[leader].propose(name, f"r{round_}".encode())
            for name in rng.sample(names, 3):
                leader = cluster.leaders(name)[0]
                target = rng.choice([n for n in cluster.ids if n != leader])
                cluster.runtimes[leader].transfer_leadership(name, target)
            if round_ == 3:
                victim = rng.choice(cluster.ids)
                await cluster.stop(victim)
                await trio.sleep(rng.uniform(0.0, 0.3))
                await cluster.start(victim)
                for name in names[1:]:
                    await cluster.runtimes[victim].open_group(name, voters=cluster.ids, state_machine=ListMachine())
        for name in names:
            assert await _commit_at_the_leader(cluster, name) is not None
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def _commit_at_the_leader(cluster: Cluster, name: str) -> int | None:
    """Propose at `name`'s leader. A leadership transfer of the last round may still be in flight: its
    leader drops proposals until the transfer completes or aborts (within an election timeout), and when
    it completes the leader `wait_leader` named has stepped down (NotLeader). Either way ask the leader of
    that moment again; never longer than 10 s of the test's clock."""
    with trio.fail_after(10):
        while True:
            leader = await cluster.wait_leader(name)
            try:
                return await cluster.runtimes[leader].propose(name, b"last")
            except ProposalDropped as dropped:
                assert "transferred" in str(dropped), dropped
            except NotLeader:
                assert cluster.leaders(name) != [leader]  # it really lost the leadership
            await trio.sleep(TICK_MS / 1000)


@pytest.mark.parametrize("seed", [3, 17])
async def test_hundreds_of_quiesced_groups_all_elect_after_their_leader_node_dies_and_quiesce_again(
        autojump_clock, seed):
    """Scale (issue 18): 150 groups, all led by one node and quiesced. Killing that node must give every
    group a leader on the survivors within the liveness lapse plus a few election timeouts (a lost wake-up
    would leave one without), then every group quiesces again on the survivors with the node still down,
    and after it restarts every group is quiet again with it caught up."""
    names = [GROUP] + [f"s{i}" for i in range(149)]
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, beats=True, seed=seed)
        await cluster.start_all()
        victim = await cluster.wait_leader(GROUP)
        for name in names[1:]:
            for node_id in [victim] + [n for n in cluster.ids if n != victim]:  # it opens first and leads
                await cluster.runtimes[node_id].open_group(name, voters=cluster.ids, state_machine=ListMachine())
        for name in names:
            if (await cluster.wait_leader(name)) != victim:
                cluster.runtimes[cluster.leaders(name)[0]].transfer_leadership(name, victim)
        await eventually(lambda: all(cluster.leaders(name) == [victim] for name in names), timeout_s=60)
        everyone_quiet = lambda nodes: all(cluster.runtimes[n].quiescence.quiet_groups() == sorted(names)
                                           for n in nodes)
        await eventually(lambda: everyone_quiet(cluster.ids), timeout_s=60)
        survivors = [n for n in cluster.ids if n != victim]
        await cluster.stop(victim)
        killed_at = trio.current_time()
        await eventually(lambda: all(len(cluster.leaders(name)) == 1 for name in names), timeout_s=60)
        failover_s = trio.current_time() - killed_at
        # The lapse, then at most a few randomized election timeouts ([10, 20) ticks each) per group.
        assert failover_s < LIVENESS_S + 4 * 20 * TICK_MS / 1000, failover_s
        await eventually(lambda: everyone_quiet(survivors), timeout_s=10)  # with the node still down
        await cluster.start(victim)
        for name in names[1:]:
            await cluster.runtimes[victim].open_group(name, voters=cluster.ids, state_machine=ListMachine())
        for name in rng_sample(names, seed):
            leader = await cluster.wait_leader(name)
            assert await cluster.runtimes[leader].propose(name, b"after") is not None
        await eventually(lambda: everyone_quiet(cluster.ids), timeout_s=60)
        for name in names:  # one log: every replica, the restarted one included, holds the same entries
            leader = cluster.leaders(name)[0]
            last = cluster.runtimes[leader].status(name).raft.last_index
            assert all(cluster.runtimes[n].status(name).raft.last_index == last for n in cluster.ids)
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


def rng_sample(names: list[str], seed: int) -> list[str]:
    import random as _random
    return _random.Random(seed).sample(names, 10)
