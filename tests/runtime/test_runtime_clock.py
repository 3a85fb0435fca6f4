"""Clocks: the skewable wall clock's arithmetic, the steady wall clock's slewing of steps, and that
wall-clock skew never reaches elections.

Method: the arithmetic is checked against a fake base clock whose readings the test sets. The election
test runs a 3-node cluster under `autojump_clock` where every node's wall clock is a `SkewableClock`
over a wall clock that follows trio's virtual time (so skew means something in virtual time), skews
them wildly apart at run time (the leader's wall clock stopped, a follower's an hour ahead and a
thousand times too fast, another's a day behind), and checks that the leader and term do not move while
traffic continues, and that a real failure is still detected on monotonic time alone. The same run with
a runtime whose ticker is paced by wall time loses its leader: the check has teeth.
"""

from __future__ import annotations

import trio

from runtime_harness import GROUP, Cluster, eventually

from jsraft.runtime import NodeRuntime, SkewableClock, SteadyWall, SystemClock

HOUR_NS = 3600 * 10**9
EPOCH_NS = 1_750_000_000 * 10**9


class VirtualWall(SystemClock):
    """Wall time that advances with trio's (virtual) clock, as real wall time does with real time."""

    def wall_ns(self) -> int:
        return EPOCH_NS + round(trio.current_time() * 10**9)


class WallPacedRuntime(NodeRuntime):
    """Broken on purpose: paces Raft ticks by the wall clock instead of the monotonic one (its ticker's
    loop replaced; each tick itself is the real one)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ticker.run = self._wall_paced

    async def _wall_paced(self, clock, interval_s: float) -> None:
        interval_ns = self.tick_ms * 10**6
        deadline_ns = self.clock.wall_ns() + interval_ns
        while True:
            await trio.sleep(self.tick_ms / 10_000)
            if self.clock.wall_ns() < deadline_ns:
                continue
            deadline_ns = self.clock.wall_ns() + interval_ns
            self.ticker.tick()


class FakeBase:
    def __init__(self) -> None:
        self.wall = 1_000 * 10**9
        self.mono = 5.0

    def monotonic(self) -> float:
        return self.mono

    async def sleep_until(self, deadline: float) -> None:
        self.mono = max(self.mono, deadline)

    def wall_ns(self) -> int:
        return self.wall


def test_skew_offset_jumps_and_rate_changes_are_continuous():
    base = FakeBase()
    clock = SkewableClock(base)
    assert clock.wall_ns() == base.wall
    clock.set_skew(offset_ns=HOUR_NS)
    assert clock.wall_ns() == base.wall + HOUR_NS
    clock.set_skew(rate=2.0)
    at_change = clock.wall_ns()
    assert at_change == base.wall + HOUR_NS  # no jump when only the rate changes
    base.wall += 10**9
    assert clock.wall_ns() == at_change + 2 * 10**9
    clock.set_skew(rate=0.0)
    frozen = clock.wall_ns()
    base.wall += 10**9
    assert clock.wall_ns() == frozen
    clock.set_skew(offset_ns=0, rate=1.0)
    base.wall += 10**9
    assert clock.wall_ns() == frozen - HOUR_NS + 10**9
    assert (clock.offset_ns, clock.rate) == (0, 1.0)


def test_skew_leaves_monotonic_time_alone():
    base = FakeBase()
    clock = SkewableClock(base, offset_ns=-HOUR_NS, rate=100.0)
    assert clock.monotonic() == base.mono
    base.mono += 1.5
    assert clock.monotonic() == 6.5


class Mono:
    def __init__(self) -> None:
        self.ns = 7 * 10**9

    def __call__(self) -> int:
        return self.ns


def test_steady_wall_follows_a_sane_wall_clock_exactly():
    base, mono = FakeBase(), Mono()
    steady = SteadyWall(base, mono_ns=mono)
    assert steady.wall_ns() == base.wall  # the first reading is the wall time itself
    for step_ns in (10**9, 3 * 10**6, 0, 10**9 + 5 * 10**7):  # NTP-sized differences: within 10 %
        mono.ns += step_ns
        base.wall += step_ns + step_ns // 20
        assert steady.wall_ns() == base.wall
    assert steady.monotonic() == base.mono


def test_steady_wall_slews_a_forward_step_and_never_goes_back():
    base, mono = FakeBase(), Mono()
    steady = SteadyWall(base, mono_ns=mono)
    start = steady.wall_ns()
    base.wall += 252 * 10**9  # the clock stepped 252 s forward (what broke chaos S12 seed 1)
    assert steady.wall_ns() == start  # no monotonic time passed: no time passes
    mono.ns += 5 * 10**9
    base.wall += 5 * 10**9
    assert steady.wall_ns() == start + 5_500_000_000  # 5 s later, at most 5.5 s on
    base.wall -= 300 * 10**9  # now stepped back, below the last reading
    mono.ns += 10**9
    assert steady.wall_ns() == start + 5_500_000_000 + 900_000_000  # on at 0.9x: never backwards
    readings = []
    for _ in range(600):  # 49.4 s ahead of it: back on the wall clock after ~494 s at the slew rate
        mono.ns += 10**9
        base.wall += 10**9
        readings.append(steady.wall_ns())
    assert readings == sorted(readings) and readings[-1] == base.wall


def test_steady_wall_keeps_moving_when_the_wall_clock_stops():
    base, mono = FakeBase(), Mono()
    steady = SteadyWall(base, mono_ns=mono)
    first = steady.wall_ns()
    mono.ns += 10 * 10**9  # the wall clock is stopped (SkewableClock rate 0)
    assert steady.wall_ns() == first + 9 * 10**9


async def test_system_clock_reads_trio_time_for_timers(autojump_clock):
    clock = SystemClock()
    start = clock.monotonic()
    await clock.sleep_until(start + 60)
    assert clock.monotonic() == trio.current_time() == start + 60
    assert clock.wall_ns() > 1_600_000_000 * 10**9  # real wall time, whatever trio's clock says


async def _roles_under_skew(runtime_cls: type[NodeRuntime]) -> tuple[str, int, set[tuple[str, str, int]]]:
    """Skew every wall clock apart while proposing for five seconds; returns the leader and term before
    the skew, and every (node, role, term) seen after it. Proposals are sparser than election timeouts,
    so only heartbeats keep the leader in office."""
    clocks = {n: SkewableClock(VirtualWall()) for n in ("n1", "n2", "n3")}
    seen: set[tuple[str, str, int]] = set()
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, clocks=clocks, runtime_cls=runtime_cls)  # type: ignore[arg-type]
        await cluster.start_all()
        leader = await cluster.wait_leader()
        term = cluster.runtimes[leader].status(GROUP).raft.current_term
        follower, other = [n for n in cluster.ids if n != leader]
        clocks[leader].set_skew(rate=0.0)
        clocks[follower].set_skew(offset_ns=HOUR_NS, rate=1000.0)
        clocks[other].set_skew(offset_ns=24 * HOUR_NS)
        for i in range(10):
            with trio.move_on_after(1.0):
                current = cluster.leaders()
                if current:
                    await cluster.runtimes[current[0]].propose(GROUP, f"t{i}".encode())
            await trio.sleep(0.5)
            statuses = [cluster.runtimes[n].status(GROUP).raft for n in cluster.ids]
            seen |= {(status.node_id, str(status.role), status.current_term) for status in statuses}
        if runtime_cls is NodeRuntime:
            assert abs(clocks[follower].wall_ns() - clocks[other].wall_ns()) > 20 * HOUR_NS
            # A real failure is still noticed, on monotonic time: within a few election timeouts.
            start = trio.current_time()
            await cluster.stop(leader)
            await eventually(lambda: len(cluster.leaders()) == 1, timeout_s=2.0)
            assert trio.current_time() - start < 1.0
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
    return leader, term, seen


async def test_wall_clock_skew_does_not_affect_elections(autojump_clock):
    leader, term, seen = await _roles_under_skew(NodeRuntime)
    assert seen == {(n, "leader" if n == leader else "follower", term) for n in ("n1", "n2", "n3")}


async def test_skew_check_catches_a_ticker_paced_by_wall_time(autojump_clock):
    leader, term, seen = await _roles_under_skew(WallPacedRuntime)
    # Its leader, wall clock stopped, stops heartbeating and is voted out in a new term.
    assert seen != {(n, "leader" if n == leader else "follower", term) for n in ("n1", "n2", "n3")}
