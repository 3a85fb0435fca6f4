"""Scenarios S01–S12 of ../shared/CHAOS.md, and S13 (issue 14): what each one does to a running cluster, and when.

Owns: `SCENARIOS` (id → `Scenario`: name, documented duration, whether it needs the node-to-node network
layer, which nodes get at-rest corruption, which invariants the checker must hold) and one coroutine per
scenario that injects its faults into a `Faults` context until its deadline. The runner
(`chaos/runner.py`) starts the cluster and the workloads, runs the coroutine, heals everything and runs
the final phase and the checker.

Invariants:
  1. Every loop is bounded in count and in time: a scenario never runs past `deadline` (plus one fault's
     own duration), and every fault is undone by `Faults.heal_all` at the end.
  2. Everything random comes from the scenario's `random.Random(seed)`: the same seed makes the same
     fault schedule (what the cluster does in response is real and may differ run to run).
  3. At-rest corruption (S09, S10, S12) touches one fixed node for the whole run (a minority), named in
     `final/nodes.json` as `corrupted` so the checker applies I10 to it.

Imports: anything (test code); never imported by production code.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from jsraft.disk import POWER_CUT_MODES

ELECTION_TIMEOUT_S = 1.0  # tick 50 ms x 20 ticks: what the harness starts nodes with (faults.py)


@attrs.frozen
class Scenario:
    id: str
    name: str
    duration_s: float          # the documented duration (CHAOS.md); --duration overrides it
    run: Callable[["Any", float], Awaitable[None]]
    network: bool = False      # needs the relay between nodes (partitions)
    corrupts: bool = False     # at-rest corruption on one fixed node (I10 applies to it)
    invariants: tuple[str, ...] = ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9")


async def s01_baseline(f: Any, duration: float) -> None:
    await f.sleep(duration)


async def s02_kill_loop(f: Any, duration: float) -> None:
    deadline = time.monotonic() + duration
    while time.monotonic() + 5.0 < deadline:
        await f.sleep(f.rng.uniform(5.0, 10.0), deadline)
        victim = f.rng.choice(f.names)
        await f.kill(victim)
        await f.sleep(f.rng.uniform(2.0, 5.0))
        await f.start(victim)
        if f.rng.random() < 0.3:  # kill again during startup replay
            await f.sleep(f.rng.uniform(0.0, 0.5))
            await f.kill(victim)
            await f.sleep(f.rng.uniform(1.0, 2.0))
            await f.start(victim)


async def s03_power_cut_all(f: Any, duration: float) -> None:
    gap = max(duration / 4.0, 3.0)
    for mode in POWER_CUT_MODES:
        await f.sleep(gap)
        await f.power_cut(list(f.names), mode)
        await f.sleep(f.rng.uniform(0.5, 1.5))
        for name in f.names:
            await f.start(name)
        await f.wait_ready(30.0)


async def s04_power_cut_one_loop(f: Any, duration: float) -> None:
    deadline = time.monotonic() + duration
    while time.monotonic() + 10.0 < deadline:
        await f.sleep(10.0, deadline)
        victim = f.rng.choice(f.names)
        await f.power_cut([victim], f.rng.choice(POWER_CUT_MODES))
        await f.sleep(f.rng.uniform(1.0, 3.0))
        await f.start(victim)


async def s05_leader_isolation(f: Any, duration: float) -> None:
    hold = min(15.0, max(duration / 3.0, 3.0))
    for which in ("stream", "meta"):
        await f.sleep(min(5.0, duration / 6.0))
        leader = await (f.stream_leader() if which == "stream" else f.meta_leader())
        if leader is None:
            continue
        await f.isolate(leader, hold, tag=f"{which}-leader")


async def s06_partitions(f: Any, duration: float) -> None:
    third = duration / 3.0
    a, via, b = f.names[0], f.names[1], f.names[2]
    await f.bridge(a, b, via, min(10.0, third))
    flap_deadline = time.monotonic() + min(60.0, third)
    while time.monotonic() + 1.0 < flap_deadline:
        nodes = list(f.names)
        f.rng.shuffle(nodes)
        cut = f.rng.randint(1, len(nodes) - 1)
        await f.partition([nodes[:cut], nodes[cut:]], f.rng.uniform(1.0, 3.0))
    await f.swizzle(min(third, 20.0))


async def s07_paused_leader(f: Any, duration: float) -> None:
    hold = 2.0 * ELECTION_TIMEOUT_S * 2
    await f.sleep(min(5.0, duration / 6.0))
    for which in ("stream", "meta"):
        leader = await (f.stream_leader() if which == "stream" else f.meta_leader())
        if leader is not None:
            await f.pause(leader, hold, tag=f"{which}-leader")
        await f.sleep(min(5.0, duration / 6.0))
    # A follower paused while it catches up: stop it, let the others move on, restart it and pause it
    # shortly after, while it is fetching what it missed.
    follower = await f.a_follower()
    if follower is not None:
        await f.kill(follower)
        await f.sleep(min(5.0, duration / 6.0))
        await f.start(follower, wait=False)
        await f.sleep(f.rng.uniform(0.3, 1.0))
        await f.pause(follower, hold, tag="catching-up-follower")


async def s08_clock_skew(f: Any, duration: float) -> None:
    n1, n2, n3 = f.names[0], f.names[1], f.names[2]
    await f.sleep(min(3.0, duration / 6.0))
    await f.set_clock(n1, 288.0)
    await f.set_clock(n2, -288.0)
    await f.sleep(min(10.0, duration / 4.0))
    leader = await f.stream_leader() or n3
    strobe_until = time.monotonic() + min(30.0, duration / 3.0)
    while time.monotonic() < strobe_until:
        await f.set_clock(leader, f.rng.choice((-1.0, 1.0)) * f.rng.uniform(0.0, 200.0), log=False)
        await f.sleep(0.2)
    await f.set_clock(leader, 0.0)
    # A node that starts with its wall clock ten minutes behind.
    await f.kill(n3)
    await f.sleep(1.0)
    await f.start(n3, clock_offset_s=-600.0)
    await f.sleep(min(10.0, duration / 4.0))


async def s09_tail_truncation(f: Any, duration: float) -> None:
    rounds = 5
    gap = max(duration / (rounds + 1), 2.0)
    for _ in range(rounds):
        await f.sleep(gap)
        victim = await f.corruption_victim(follower=True)
        if victim is None:
            continue
        await f.kill(victim)
        await f.corrupt(victim, "truncate_tail")
        await f.start(victim)


async def s10_bit_flips(f: Any, duration: float) -> None:
    await f.sleep(duration / 3.0)
    victim = await f.corruption_victim(follower=True)
    if victim is not None:
        await f.kill(victim)
        await f.corrupt(victim, "flip_bits")
        await f.start(victim)
    await f.sleep(duration / 3.0)
    victim = await f.corruption_victim(follower=True)
    if victim is not None:
        await f.kill(victim)
        await f.corrupt(victim, "rollback_consumer_state")
        await f.start(victim)
    await f.sleep(duration / 3.0)


async def s11_meta_churn(f: Any, duration: float) -> None:
    deadline = time.monotonic() + duration * 0.6
    while time.monotonic() + 5.0 < deadline:
        await f.sleep(5.0, deadline)
        leader = await f.meta_leader()
        if leader is not None:
            await f.kill(leader, tag="meta-leader")
            await f.sleep(f.rng.uniform(1.0, 3.0))
            await f.start(leader)
    await f.replace_node(f.rng.choice(f.names))
    await f.sleep(max(deadline + duration * 0.4 - time.monotonic(), 1.0))


_SOAK_KINDS = ("kill", "power_cut", "pause", "isolate", "partition", "clock", "corrupt")


async def s12_soak(f: Any, duration: float) -> None:
    deadline = time.monotonic() + duration
    while time.monotonic() + 3.0 < deadline:
        await f.sleep(f.rng.uniform(3.0, 8.0), deadline)
        kind = f.rng.choice(_SOAK_KINDS)
        node = f.rng.choice(f.names)
        if kind == "kill":
            await f.kill(node)
            await f.sleep(f.rng.uniform(1.0, 4.0))
            await f.start(node)
        elif kind == "power_cut":
            await f.power_cut([node], f.rng.choice(POWER_CUT_MODES))
            await f.sleep(f.rng.uniform(1.0, 3.0))
            await f.start(node)
        elif kind == "pause":
            await f.pause(node, f.rng.uniform(1.0, 4.0))
        elif kind == "isolate":
            await f.isolate(node, f.rng.uniform(2.0, 8.0))
        elif kind == "partition":
            nodes = list(f.names)
            f.rng.shuffle(nodes)
            await f.partition([nodes[:1], nodes[1:]], f.rng.uniform(1.0, 5.0))
        elif kind == "clock":
            await f.set_clock(node, f.rng.uniform(-300.0, 300.0))
        else:
            victim = f.corrupted_node
            await f.kill(victim)
            await f.corrupt(victim, f.rng.choice(("flip_bits", "truncate_tail")))
            await f.start(victim)


async def s13_lost_stream_dir(f: Any, duration: float) -> None:
    """Issue 14, hole 1, under load: one follower lags (down), the other acknowledges more with the leader,
    then loses its whole stream directory; the leader goes down and only the lagger and the wiped
    follower run for a while. The wiped follower must come back repairing and not vote, so the lagger
    cannot lead without what the other two acknowledged (I1, I3); then the leader returns and all agree."""
    deadline = time.monotonic() + duration
    await f.sleep(duration * 0.15)
    leader = await f.stream_leader()
    followers = [name for name in f.names if name != leader]
    if leader is None or len(followers) != 2:
        await f.sleep(max(deadline - time.monotonic(), 0.0))
        return
    lagger, wiped = followers
    await f.kill(lagger, tag="lagger")
    await f.sleep(duration * 0.2)
    await f.kill(wiped, tag="to be wiped")
    await f.lose_stream_dir(wiped)
    await f.kill(leader, tag="leader")
    await f.start(lagger)
    await f.start(wiped)
    await f.sleep(duration * 0.25)  # only the stale and the wiped replica run
    await f.start(leader)
    await f.sleep(max(deadline - time.monotonic(), 1.0))


_ALL = ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9")
SCENARIOS: dict[str, Scenario] = {s.id: s for s in (
    Scenario("S01", "baseline", 60.0, s01_baseline),
    Scenario("S02", "kill-loop", 60.0, s02_kill_loop),
    Scenario("S03", "coordinated power cut", 60.0, s03_power_cut_all),
    Scenario("S04", "single-node power cut loop", 60.0, s04_power_cut_one_loop,
             invariants=_ALL + ("I10",)),
    Scenario("S05", "leader isolation", 60.0, s05_leader_isolation, network=True,
             invariants=("I1", "I2", "I3", "I4", "I5", "I6", "I9")),
    Scenario("S06", "bridge and flapping partitions", 90.0, s06_partitions, network=True),
    Scenario("S07", "paused leader", 45.0, s07_paused_leader,
             invariants=("I1", "I2", "I3", "I4", "I5", "I6", "I9")),
    Scenario("S08", "clock skew", 75.0, s08_clock_skew),
    Scenario("S09", "follower tail truncation", 60.0, s09_tail_truncation, corrupts=True,
             invariants=("I1", "I2", "I10")),
    Scenario("S10", "follower bit flips and rolled-back chunks", 45.0, s10_bit_flips, corrupts=True,
             invariants=("I1", "I2", "I7", "I10")),
    Scenario("S11", "meta churn under leader kills, membership", 60.0, s11_meta_churn,
             invariants=("I8", "I1", "I2", "I9")),
    Scenario("S12", "everything soak", 300.0, s12_soak, network=True, corrupts=True,
             invariants=_ALL + ("I10",)),
    Scenario("S13", "lost follower stream directory, then an election with the stale follower", 60.0,
             s13_lost_stream_dir),
)}

SMOKE = ("S01", "S02", "S03", "S04", "S09", "S10", "S13")


def scenario_rng(scenario_id: str, seed: int) -> random.Random:
    return random.Random(f"{scenario_id}:{seed}")


async def sleep_bounded(seconds: float, deadline: float | None = None) -> None:
    if deadline is not None:
        seconds = min(seconds, max(deadline - time.monotonic(), 0.0))
    await asyncio.sleep(max(seconds, 0.0))
