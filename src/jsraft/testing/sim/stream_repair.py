"""Stream repair in the simulator: range catch-up after a snapshot, and resync of a drifted replica.

Owns: what production's runtime is to do with a `RepairPlan` (replica/stream_adapter.py leaves it as a
TODO(#4)), run synchronously between two simulator steps:
  - `Pending`: a catch-up a replica owes — to a leader's snapshot it installed, or to its own snapshot at
    restart (`store_may_be_ahead`). While one is pending the replica applies no entries (they wait).
  - `step`: once per simulator step per running replica: run the pending catch-up, or resync a replica
    that is drifted or whose store lists faults (the source's snapshot is restored, then caught up — what
    the running audit's "resynced" means, DESIGN §8).
  - The catch-up itself: a `CatchupSession` on the replica, its requests answered by `serve_catchup` on
    the source's machine, every request and chunk through the wire encoding (`catchup_wire`). It runs
    **directly, in-process**, not as messages of the simulated network, but spread over steps: at most
    `StreamApp.chunks_per_step` round trips per step (1, 3 or all, per seed), so the source keeps applying
    entries (deletes, purges, expiry, appends) while it serves, and a session is dropped and planned
    again when its source crashes, stops qualifying or loses its two-way link to the replica.

The source: the Raft leader if it qualifies, else the first other running replica that does — its
machine current and fault-free (`can_lead`), nothing pending or waiting, applied at least to the index the
catch-up targets (a source behind the snapshot would report as deleted what it has not applied yet).
(Production's `server.stream_repair` asks only the stream leader; here any replica that qualifies serves,
so a catch-up is not held up by a leader that is itself repairing.)

Invariants:
  1. A failed or interrupted catch-up (`CatchupFailed`: a refusal, a bad chunk; a source gone) leaves the
     catch-up pending; it is planned again against the same group state (the store may have moved), a
     failed one after `RETRY_TICKS`. A newer snapshot installed meanwhile replaces it (and its session).
  2. The entries that waited apply in order as soon as the catch-up is done, and their digests are then
     checked like any other (`SafetyChecker.on_digest`).
  3. A catch-up is bounded: more than `ROUNDS_MAX` requests is a `liveness` violation.
  4. The audit checker is told the highest index any source had applied while it served
     (`StreamChecker.on_caught_up`): the store may reflect removals up to there.

Imports: stdlib, attrs, `jsraft.stream`, siblings. Reference: stream/catchup.py, DESIGN.md §6, §8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from jsraft.errors import DamagedSequence
from jsraft.stream import catchup_wire
from jsraft.stream.catchup import CatchupSession, serve_catchup
from jsraft.stream.catchup_wire import CatchupRequest
from jsraft.stream.errors import CatchupFailed, StreamNotHealthy
from jsraft.stream.results import Health
from jsraft.stream.snapshot import GroupState
from jsraft.testing.sim.violation import Violation

if TYPE_CHECKING:
    from jsraft.testing.sim.simulator import Simulation
    from jsraft.testing.sim.stream_app import StreamReplica

RETRY_TICKS = 10
ROUNDS_MAX = 100_000


@attrs.define
class Pending:
    """A catch-up a replica owes, and the session carrying it out (kept across steps)."""

    group: GroupState
    snapshot_index: int
    store_may_be_ahead: bool
    session: CatchupSession | None = None
    request: CatchupRequest | None = None
    source_id: str = ""
    source_index: int = 0  # the highest applied index a source had while it served this catch-up
    requests: int = 0


def step(sim: Simulation, replica: StreamReplica) -> None:
    if replica.pending is None and replica.buffered:
        replica.flush_buffered(sim)
    if sim.clock.now < replica.next_repair_tick:
        return
    pending = replica.pending
    if pending is None:
        if _needs_resync(replica):
            resync(sim, replica)
        return
    if pending.session is not None and not _qualifies(sim, replica, pending.source_id, pending.snapshot_index):
        replica.trace(f"catch-up from {pending.source_id} interrupted; planning again")
        replica.app.checker.interrupted += 1
        pending.session = None
    if pending.session is None:
        source = find_source(sim, replica, pending.snapshot_index)
        if source is None or not _start(sim, replica, source):
            return
    _exchange(sim, replica, replica.app.chunks_per_step)


def _needs_resync(replica: StreamReplica) -> bool:
    machine = replica.machine
    return machine.health is Health.drifted or (machine.health is Health.current and bool(machine.store.faults()))


def _qualifies(sim: Simulation, replica: StreamReplica, node_id: str, min_index: int) -> bool:
    driver = sim.drivers.get(node_id)
    if node_id == replica.node_id or driver is None or not driver.up:
        return False
    source = driver.replica
    machine = source.machine
    # Never a replaying machine: its store may hold messages of entries it has not replayed yet, and a
    # catch-up served from it would hand those out as the group's state at the snapshot's index
    # (seed 115 of `--app consumer`). Production serves only from the stream leader, which is built only
    # once the replay is over (server/groups/repair_serve.py, stream_replica invariant 1).
    if (source.pending is not None or source.buffered or not machine.can_lead or machine.replaying
            or machine.applied_index < min_index or machine.applied_index != source.applied_index):
        return False
    network = sim.network
    return network.can_send(node_id, replica.node_id) and network.can_send(replica.node_id, node_id)


def find_source(sim: Simulation, replica: StreamReplica, min_index: int) -> StreamReplica | None:
    leader = sim.leader_id()
    order = ([leader] if leader is not None else []) + [n for n in sorted(sim.drivers) if n != leader]
    for node_id in order:
        if _qualifies(sim, replica, node_id, min_index):
            return sim.drivers[node_id].replica
    return None


def _start(sim: Simulation, replica: StreamReplica, source: StreamReplica) -> bool:
    """Plan against the store as it is now and open a session with `source`; False if it failed."""
    pending = replica.pending
    assert pending is not None
    machine = replica.machine
    plan = machine.plan_against(pending.group, store_may_be_ahead=pending.store_may_be_ahead)
    session = CatchupSession(machine, pending.group, snapshot_index=pending.snapshot_index,
                             reset_store=replica.fresh_store, bytes_max=replica.app.catchup_bytes,
                             store_may_be_ahead=pending.store_may_be_ahead)
    pending.session, pending.source_id = session, source.node_id
    pending.source_index = max(pending.source_index, source.machine.applied_index)
    try:
        pending.request = session.start(plan)
    except (CatchupFailed, DamagedSequence) as error:
        _failed(sim, replica, error)
        return False
    return True


def _exchange(sim: Simulation, replica: StreamReplica, chunks_max: int) -> None:
    """Up to `chunks_max` request/chunk round trips, every message through the wire encoding."""
    pending = replica.pending
    assert pending is not None and pending.session is not None
    source = sim.drivers[pending.source_id].replica
    try:
        for _ in range(chunks_max):
            if pending.request is None:
                break
            pending.requests += 1
            if pending.requests > ROUNDS_MAX:
                raise Violation("liveness", f"{replica.node_id}: catch-up to {pending.snapshot_index} did not end "
                                            f"within {ROUNDS_MAX} requests")
            request = catchup_wire.decode_catchup(catchup_wire.encode_request(pending.request))
            answer = serve_catchup(source.machine, request)
            pending.source_index = max(pending.source_index, source.machine.applied_index)
            if isinstance(answer, catchup_wire.CatchupRefusal):
                pending.session.on_refusal(catchup_wire.decode_catchup(catchup_wire.encode_refusal(answer)))
            pending.request = pending.session.on_chunk(catchup_wire.decode_catchup(catchup_wire.encode_chunk(answer)))
    except (CatchupFailed, DamagedSequence) as error:
        # DamagedSequence: a record of this store found damaged during the catch-up (a read of a message
        # the session deletes, `CatchupSession._place_deleted`); the store now lists it: plan again.
        _failed(sim, replica, error)
        return
    if pending.request is None:
        _done(sim, replica)


def _failed(sim: Simulation, replica: StreamReplica, error: Exception) -> None:
    pending = replica.pending
    assert pending is not None
    replica.next_repair_tick = sim.clock.now + RETRY_TICKS
    replica.app.checker.failed += 1
    replica.trace(f"catch-up from {pending.source_id} failed: {error}; retrying later")
    pending.session = pending.request = None


def _done(sim: Simulation, replica: StreamReplica) -> None:
    pending = replica.pending
    assert pending is not None and pending.session is not None
    result = pending.session.result
    assert result is not None
    replica.pending = None
    if replica.machine.health is Health.current:
        replica.unmark()
    replica.app.checker.on_caught_up(replica.node_id, pending.source_index, verified=result.verified is True)
    replica.app.checker.repairs += 1
    replica.trace(f"caught up to snapshot {pending.snapshot_index} from {pending.source_id} ({pending.requests} "
                  f"requests): fetched {result.fetched_msgs}, deleted {result.deleted_seqs}, reset {result.reset}, "
                  f"verified {result.verified}")
    replica.flush_buffered(sim)


def resync(sim: Simulation, replica: StreamReplica) -> None:
    """A drifted or faulty replica takes a current source's snapshot and catches up to it."""
    machine = replica.machine
    source = find_source(sim, replica, machine.applied_index)
    if source is None:
        return
    try:
        data = source.machine.snapshot()
    except StreamNotHealthy:
        return
    index = source.machine.applied_index
    why = f"{machine.health}, faults {machine.store.faults()[:3]}"
    replica.mark(f"resync to {source.node_id}'s snapshot at {index}")
    plan = machine.restore(data)
    replica.app.checker.resyncs += 1
    replica.trace(f"resync ({why}) from {source.node_id}'s snapshot at {index}")
    if plan.is_empty:
        replica.unmark()
        return
    replica.pending = Pending(plan.group, index, store_may_be_ahead=False)
    if _start(sim, replica, source):
        _exchange(sim, replica, replica.app.chunks_per_step)
