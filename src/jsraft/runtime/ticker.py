"""`Ticker`: the one node-level tick pass over the groups that are awake (layer L4).

Owns: the table of awake groups (every open group but the quiesced ones), what one tick does to them,
the runtime's side of quiescence (`quiesce.Quiescence`): which inputs wake a group, and the node
beats — and the tick wheel: tasks that pace themselves by ticks (`next_tick`, `pause`, `wait_awake`)
wait on events the node tick sets, not on trio deadlines. `NodeRuntime` owns the timing (one trio task,
`clock.monotonic()`) and the group table; this owns what a tick visits, so a node with many idle groups
pays per tick for its awake ones only.

Why a wheel: a trio deadline that expires costs a cancel-scope recalculation, about three times what a
set event costs its waiter; 1,000 awake stream replicas with three tasks each sleeping one tick spent
~70% of a node's main thread in `Deadlines.expire` (py-spy, after a node kill woke them all), which
starved Raft itself. One event per tick slot is set by the one ticker instead.

Invariants:
  1. Without quiescence (no `send_beat`), every open group is awake: each is ticked every tick.
  2. A group is either awake or quiesced, never both; a closed group is neither.
  3. A tick, in order: wake the groups of peers that lapsed; tick each awake group (or quiesce an idle
     leader instead of ticking it); then one beat per peer, so a quiesce notice follows the group's
     last heartbeat on the link to each member; then the wheel's waiters for this tick go, so a task
     paced by ticks sees what the tick did.
  4. Every waiter of the wheel is set at the tick it asked for, or earlier by `release` of its group
     (each waiter has an event of its own: one waiter's bound never ends another's wait);
     ticks counted are ticks that happened (missed ones are dropped), so a pause of n ticks is at least
     n × the interval. Nothing waits on the wheel unless the ticker runs (`NodeRuntime.run`).

Imports: L1 (`raft`), siblings. Never `transport`.
"""

from __future__ import annotations

from collections.abc import Callable

import trio


from jsraft.raft.messages import Message
from jsraft.raft.core import RaftNode
from jsraft.raft.status import Role
from jsraft.runtime.clock import Clock
from jsraft.runtime.group import Group
from jsraft.runtime.quiesce import Quiescence, wakes

# How many ticks `wait_awake` waits at most for a quiesced group (30 s at the default 100 ms tick): a task
# paced by a quiet group still looks at the world this often. Long: every wake-up costs (at 2 s, 1,000 idle
# streams' tasks spent ~18% of a busy node's samples there); what must act sooner wakes the group
# (`wake_by_name`) or releases its tasks (`release`).
QUIET_CHECK_TICKS = 300


def idle(group: Group) -> bool:
    """Nothing queued, in a cycle, or unsettled for `group` in the runtime."""
    return not group.busy and not group.cycle.has_work() and group.book.in_flight == 0


class Ticker:
    """The awake groups of one node and their quiescence. Trio thread only."""

    def __init__(self, quiescence: Quiescence | None, groups: dict[str, Group],
                 mark: Callable[[Group], None]) -> None:
        self.quiescence = quiescence
        self.awake: dict[str, Group] = {}
        self._groups = groups  # the runtime's open groups (read only)
        self._mark = mark  # the group may have work now: the ready loop looks at it
        # The pauses of group `name`, one event each: all set when it wakes or is released (invariant 4).
        self._awoken: dict[str, set[trio.Event]] = {}
        self.ticks = 0  # node ticks so far (invariant 4)
        self._wheel: dict[int, list[trio.Event]] = {}  # tick number -> the events to set at it

    def after_ticks(self, ticks: int, event: trio.Event) -> None:
        """Set `event` at the `ticks`-th node tick from now (at least the next one): a timer with no
        trio deadline (invariant 4)."""
        self._wheel.setdefault(self.ticks + max(ticks, 1), []).append(event)

    async def next_tick(self) -> None:
        """Wait for the next node tick."""
        event = trio.Event()
        self.after_ticks(1, event)
        await event.wait()

    async def pause(self, name: str, ticks: int) -> None:
        """Wait `ticks` node ticks, or less if group `name` wakes or is released (`release`) first. Each
        pause has its own event: its bound ends it alone, not the other tasks paused on the group."""
        event = trio.Event()
        waiters = self._awoken.setdefault(name, set())
        waiters.add(event)
        self.after_ticks(ticks, event)
        try:
            await event.wait()
        finally:
            waiters.discard(event)
            if not waiters and self._awoken.get(name) is waiters:
                del self._awoken[name]

    async def wait_awake(self, name: str, ticks: int = QUIET_CHECK_TICKS) -> None:
        """Return at once if group `name` is awake (or unknown); while it is quiesced, when it wakes, is
        released, or after `ticks`. What a task that only has work while its group does sleeps in between."""
        if self.quiescence is None or not self.quiescence.is_quiet(name):
            return
        await self.pause(name, ticks)

    async def run(self, clock: Clock, interval_s: float) -> None:
        """Tick every `interval_s` of `clock.monotonic()`; missed ticks are dropped, not replayed
        (`node_runtime` invariant 3)."""
        deadline = clock.monotonic() + interval_s
        while True:
            await clock.sleep_until(deadline)
            self.tick()
            deadline += interval_s
            now = clock.monotonic()
            if deadline <= now:
                deadline = now + interval_s

    def _turn_wheel(self) -> None:
        """Invariant 4: one tick has happened; its waiters go."""
        self.ticks += 1
        for event in self._wheel.pop(self.ticks, ()):
            event.set()

    def on_beat(self, from_node: str, payload: bytes | memoryview) -> None:
        """A node beat from a peer (`Quiescence.on_beat`). Raises `BadBeat` if it does not decode."""
        if self.quiescence is None:
            return
        for name in self.quiescence.on_beat(from_node, payload, self._core):
            group = self._groups.get(name)
            if group is not None and self.wake(group):
                self._mark(group)

    def _core(self, name: str) -> RaftNode | None:
        group = self._groups.get(name)
        return None if group is None or group.stopped() else group.node

    def is_quiet(self, name: str) -> bool:
        return self.quiescence is not None and self.quiescence.is_quiet(name)

    def wake_by_name(self, name: str) -> None:
        """Tick group `name` again if it was quiesced: something outside its log changed for it."""
        group = self._groups.get(name)
        if group is not None and self.wake(group):
            self._mark(group)

    def opened(self, group: Group) -> None:
        self.awake[group.name] = group

    def closed(self, name: str) -> None:
        self.awake.pop(name, None)
        if self.quiescence is not None:
            self.quiescence.closed(name)
        self.release(name)

    def release(self, name: str) -> None:
        """Let every task in `wait_awake(name)` or `pause(name)` go now (the group may stay quiesced): it
        has a reason to look."""
        for event in self._awoken.pop(name, ()):
            event.set()

    def wakes(self, group: Group, message: Message) -> bool:
        """Does delivering `message` wake `group` (quiesce invariant 1)? Always, for an awake group."""
        return self.quiescence is None or not self.quiescence.is_quiet(group.name) or wakes(group.node, message)

    def wake(self, group: Group) -> bool:
        """Put `group` back among the awake; True if it was quiesced."""
        if self.quiescence is None or not self.quiescence.wake(group.name):
            return False
        if not group.stopped():
            self.awake[group.name] = group
        self.release(group.name)
        return True

    def tick(self) -> None:
        """Invariant 3."""
        quiet = self.quiescence
        if quiet is not None:
            for name in quiet.tick():
                group = self._groups.get(name)
                if group is not None and self.wake(group):
                    self._mark(group)
        for name, group in list(self.awake.items()):
            if quiet is not None and (quiet.is_quiet(name) or (  # a follower quiesced by its leader's beat
                    group.node.role is Role.LEADER and not group.stopped()
                    and quiet.leader_tick(name, group.node, idle(group)))):
                del self.awake[name]
                continue
            group.tick()
            self._mark(group)
        if quiet is not None:
            quiet.send_beats()
        self._turn_wheel()
