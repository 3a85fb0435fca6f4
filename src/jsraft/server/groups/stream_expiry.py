"""The stream leader's timed proposals: `max_age` (EXPIRE), per-message TTL (DELETE) and due message
schedules (a publish, ADR-51) (layer L5).

Owns: asking the replica's `StreamLeader`, every node tick (`IDLE_TICKS` while it cannot), what has aged
out by the node's wall clock (`expiry_due` for `max_age`, `ttl_due` for `Nats-TTL`, ADR-43) and
proposing those entries through the stream's Raft group, one at a time, in order.

Invariants:
  1. Only the leader proposes; every replica removes the messages when it applies the entries (DESIGN §6:
     "no replica mutates its store on its own timer"). A follower's task does nothing.
  2. Time comes from `runtime.clock.wall_ns()`, the clock that stamped the messages (the node's
     `SteadyWall`: a stepped clock slews, runtime/clock.py invariant 3), never from a replica's own view
     at apply time.
  3. A failed proposal is logged and retried at a later tick (the StreamLeader re-offers a due TTL after
     its retry interval; `expire_due` recomputes); it never stops the task.
  4. A leader with no `max_age` whose TTL schedule is empty looks again after `ttl_quiet_ticks` (at most
     `TTL_MIN_S`), not every tick: a TTL'd message decided after it looked carries a timestamp from
     then on (the same clock) and a TTL of at least a second, so it is not due before the next look.
     The next look is never put off further, not even while the group is quiesced (the message's
     publish may have woken the group before it was decided, and the group gone quiet again). A KV
     bucket's stream (`allow_msg_ttl`) at rest so costs one wake-up a second, not one a tick. The same
     holds for a stream with schedules but none stored: a schedule decided after the look fires at most
     a second late. While schedules are stored (and no `max_age` or TTL needs every tick), the leader
     sleeps until the first is due, at most `ttl_quiet_ticks`: a far-off schedule costs one look a
     second, not one a tick, and a nearer one decided meanwhile fires at most a second late, as above.

Imports: stdlib, L0, server siblings (by type only); the node tick through `replica.runtime.ticker`.
Reference: DESIGN.md §6; ADR-43.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING


from jsraft.errors import JsraftError

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.expiry")

# How often a replica that cannot expire anything (not the leader, or no `max_age` or TTLs) looks again:
# leadership and config change seldom; looking every tick cost a wake-up per awake replica per tick.
IDLE_TICKS = 10
TTL_MIN_S = 1.0  # the shortest `Nats-TTL` (stream.ttl invariant 1)


def ttl_quiet_ticks(tick_s: float) -> int:
    """Invariant 4: the most node ticks that fit in `TTL_MIN_S` (at least one)."""
    return max(1, int((TTL_MIN_S - 1e-9) / tick_s))


def schedule_wait_ticks(next_due_ns: int | None, now_ns: int, tick_s: float) -> int:
    """Invariant 4: the node ticks to sleep before the first stored schedule is due — 0 when it is due
    (look now), never more than `ttl_quiet_ticks`."""
    if next_due_ns is None or next_due_ns <= now_ns:
        return 0
    return min(int((next_due_ns - now_ns) / 1e9 / tick_s), ttl_quiet_ticks(tick_s))


async def run_expiry(replica: "StreamReplica") -> None:
    """Propose due expiries while this replica leads, every node tick, until cancelled."""
    ticker = replica.runtime.ticker
    while True:
        await ticker.next_tick()  # the node's tick wheel: no trio deadline per replica (ticker invariant 4)
        leader = replica.leader
        config = leader.machine.config if leader is not None else None
        if config is None or not (config.max_age > 0 or config.allow_msg_ttl or config.allow_msg_schedules):
            # Nothing can age out here: look again after `IDLE_TICKS`, or sooner when the group is released
            # (a config change, a wake); through its quiescence while it is quiet.
            await ticker.pause(replica.group, IDLE_TICKS)
            await ticker.wait_awake(replica.group)
            continue
        if leader is None or replica.closed or replica.stopped_reason is not None:
            continue  # stopped: an unsupported consumer freezes the stream (stream_replica invariant 6)
        if leader.machine.config.max_age <= 0 and not len(leader.ttl_schedule) and not len(leader.schedule_book):
            # Invariant 4: no TTL'd message stored or in flight (a KV bucket at rest): nothing is due for
            # at least a second, so look again a second from now (sooner if the group wakes or is released),
            # quiesced or not: a message decided just after this look may be due a second later.
            await ticker.pause(replica.group, ttl_quiet_ticks(replica.options.tick_s))
            continue
        now_ns = replica.runtime.clock.wall_ns()
        if leader.machine.config.max_age <= 0 and not len(leader.ttl_schedule):
            wait_ticks = schedule_wait_ticks(leader.schedule_book.next_due_ns(), now_ns, replica.options.tick_s)
            if wait_ticks:  # invariant 4: only schedules stored, none due yet
                await ticker.pause(replica.group, wait_ticks)
                continue
        due = leader.expiry_due(now_ns)  # subject delete markers first, then the EXPIRE (stream.markers)
        due.extend(leader.ttl_due(now_ns))
        due.extend(leader.schedules_due(now_ns))  # ADR-51: a fired schedule is a publish (stream.schedules)
        for entry in due:
            if replica.leader is not leader:
                break  # leadership changed mid-turn: the new leader decides afresh (invariant 1)
            try:
                await replica.propose_entry(entry)
            except JsraftError as error:
                log.info("stream %s: expiry not proposed: %s", replica.name, error)
                break
