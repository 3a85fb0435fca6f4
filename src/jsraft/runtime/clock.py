"""Clocks for the runtime: monotonic time for timers, wall time only for timestamps (layer L4).

Owns: the `Clock` protocol the runtime and the layers above it read time through, `SystemClock` (the
real one), `SkewableClock` (a wall clock whose offset and rate a test can change while it runs) and
`SteadyWall` (wall time that absorbs a step of the clock under it: what the stream leader stamps with).

Two kinds of time, never mixed:
  - `monotonic()` — seconds on trio's clock (`trio.current_time()`). It never jumps and is what the
    ticker paces Raft ticks with, so election timeouts, heartbeats and every other timeout are
    monotonic. Under `trio.testing.MockClock` (pytest-trio's `autojump_clock`) it is virtual time,
    which is what makes the runtime testable without sleeping.
  - `wall_ns()` — nanoseconds since the Unix epoch. Used only for message timestamps and `max_age`
    decisions (made by the stream leader and recorded in the log, so replicas never expire on their own
    clocks). It can jump, run fast or slow, or disagree between nodes; nothing that decides leadership
    reads it.

Invariants:
  1. Elections never use wall time: the Raft core counts ticks, ticks are paced by `monotonic()` /
     `sleep_until()`, and `SkewableClock` forwards both untouched to its base clock.
  2. `SkewableClock.wall_ns()` is continuous when the rate changes: a new rate applies from the moment
     it is set (re-anchored), so only an explicit offset makes wall time jump.
  3. `SteadyWall.wall_ns()` never goes backwards, and between two readings it advances by the monotonic
     time between them times a rate within `[1 - slew, 1 + slew]`: it follows its base's wall time while
     that runs at a sane rate, and when the base steps (an operator or a bad NTP server moves the clock
     minutes), it slews toward the new time instead of jumping there.

Why `SteadyWall`: the stream leader stamps messages with wall time, and the duplicate window, `max_age`
and `Nats-TTL` age by those stamps. A leader whose clock was stepped 250 s forward would stamp the next
messages 250 s after the last ones, so every message id within the window looks expired at once, and a
client's retry of a publish it never saw acknowledged is stored a second time (chaos S12 found exactly
that). Slewing bounds how far a step can move the stamps: at 10 %, a retry 5 s later looks at most 5.5 s
old. A node that *starts* with a wrong clock has no earlier reading to hold it: its stamps are its wall
time, never before the last one in the log (stream/leader.py invariant 3).

Imports: stdlib (`time`), trio. Reference: DESIGN.md §1 (runtime owns timers), §6 (`EXPIRE` decided by
the leader); Jepsen "NATS 2.12.1" (clock skew as a fault).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import trio

from jsraft.errors import invariant


class Clock(Protocol):
    """What the runtime reads time through. `monotonic`/`sleep_until` share one time base."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences mean anything."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until `monotonic()` reaches `deadline`."""
        ...

    def wall_ns(self) -> int:
        """Nanoseconds since the Unix epoch: timestamps and `max_age` only, never timeouts."""
        ...


class SystemClock:
    """The real clock: trio's monotonic clock for timers, `time.time_ns()` for timestamps."""

    def monotonic(self) -> float:
        # trio's clock rather than time.monotonic(): it is the base trio.sleep_until() uses, and a test's
        # MockClock replaces it, so timers here and in trio agree.
        return trio.current_time()

    async def sleep_until(self, deadline: float) -> None:
        await trio.sleep_until(deadline)

    def wall_ns(self) -> int:
        return time.time_ns()


class SkewableClock:
    """A clock whose wall time a test can skew at run time; monotonic time is the base clock's, untouched.

    `wall_ns() = anchor_wall + (base_wall_now - anchor_base) * rate + offset`, where the anchor is taken
    each time the rate changes (invariant 2). Use it to show that skew (a node minutes ahead, a clock
    running at twice the speed) changes timestamps but never elections.
    """

    RATE_MIN = 0.0  # a stopped wall clock is a legal fault; a backwards-running one is not modelled

    def __init__(self, base: Clock | None = None, *, offset_ns: int = 0, rate: float = 1.0) -> None:
        self.base: Clock = base if base is not None else SystemClock()
        self._offset_ns = 0
        self._rate = 1.0
        self._anchor_base_ns = self.base.wall_ns()
        self._anchor_wall_ns = self._anchor_base_ns
        self.set_skew(offset_ns=offset_ns, rate=rate)

    @property
    def offset_ns(self) -> int:
        return self._offset_ns

    @property
    def rate(self) -> float:
        return self._rate

    def set_skew(self, *, offset_ns: int | None = None, rate: float | None = None) -> None:
        """Change the wall clock's offset (a jump) and/or its rate (from now on); None keeps the current."""
        if rate is not None:
            invariant(rate >= self.RATE_MIN, "a wall clock rate is not negative")
            # Re-anchor so that wall time is continuous across the rate change (invariant 2).
            now_base = self.base.wall_ns()
            self._anchor_wall_ns = self._skewed_without_offset(now_base)
            self._anchor_base_ns = now_base
            self._rate = float(rate)
        if offset_ns is not None:
            self._offset_ns = int(offset_ns)

    def _skewed_without_offset(self, base_ns: int) -> int:
        return self._anchor_wall_ns + round((base_ns - self._anchor_base_ns) * self._rate)

    def monotonic(self) -> float:
        return self.base.monotonic()

    async def sleep_until(self, deadline: float) -> None:
        await self.base.sleep_until(deadline)

    def wall_ns(self) -> int:
        return self._skewed_without_offset(self.base.wall_ns()) + self._offset_ns


class SteadyWall:
    """Wall time from `base` with its steps slewed away (invariant 3); monotonic time is `base`'s.

    Each reading is `clamp(base.wall_ns(), last + d * (1 - slew), last + d * (1 + slew))`, where `last` is
    the previous reading and `d` the monotonic nanoseconds since it (`mono_ns`: the process's own
    monotonic clock, not trio's, so that virtual time in a test does not drag wall time along).
    """

    SLEW = 0.1  # NTP slews by at most 500 ppm: anything faster is a step

    def __init__(self, base: Clock, *, mono_ns: Callable[[], int] = time.monotonic_ns, slew: float = SLEW) -> None:
        invariant(0.0 < slew < 1.0, "a slew is a fraction of the elapsed time")
        self.base = base
        self.slew = slew
        self._mono_ns = mono_ns
        self._last_ns: int | None = None
        self._last_mono_ns = 0

    def monotonic(self) -> float:
        return self.base.monotonic()

    async def sleep_until(self, deadline: float) -> None:
        await self.base.sleep_until(deadline)

    def wall_ns(self) -> int:
        wall, mono = self.base.wall_ns(), self._mono_ns()
        last = self._last_ns
        if last is None:
            now = wall
        else:
            elapsed = max(mono - self._last_mono_ns, 0)
            now = min(max(wall, last + int(elapsed * (1.0 - self.slew))), last + int(elapsed * (1.0 + self.slew)))
        self._last_ns, self._last_mono_ns = now, mono
        return now
