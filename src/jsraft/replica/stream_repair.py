"""A stream replica's repair decisions, without I/O (layer L3½): what production's `RepairWorker` and the
simulator both run.

Owns: the deterministic half of DESIGN §8's repair — which job a replica's repair worker does next
(`next_job`), the catch-up session that carries out a pending plan (`open_session`, `finish_session`),
when a drift episode is over (`is_whole`), when a replica must hand its Raft leadership away
(`unfit_to_lead`) and to whom (`can_take_over`, `successor`), whether this replica may serve as a repair
source (`source_refusal`, from what it knows of its store: the adapter's `Judgement`), and the stream
leader's answer to one catch-up request (`answer_catchup`). The
transports stay with their callers: production's `server.stream_repair.RepairWorker` (trio, `$rpc` to the
stream leader, backoff) and `server.repair_serve`; the simulator (`testing.sim.stream_repair`) asks the
simulated leader between two steps.

The adapter is production's `server.stream_adapter.StreamAdapter`, taken by its shape (`RepairAdapter`):
this layer never imports the server layer.

Invariants:
  1. `next_job`: an escalation (a session that failed verification) resyncs; a pending plan is carried
     out; nothing is done while a resync waits for its index or the replay runs; a machine that is not
     current, or whose store lists faults, resyncs.
  2. A session belongs to one plan generation: `finish_session` releases the held entries only when the
     session ended and the plan is still the adapter's (`stream_repair` invariant 2).
  3. `finish_session` fsyncs the store before it releases anything: the WAL already holds the snapshot
     that covers the fetched messages (its entries are gone), so until the store is durable they exist on
     this replica only in memory; a power failure then would lose acknowledged messages here (found by
     the simulator, `--app stream` seed 16: the repair worker never synced after a catch-up).
  4. The first session of a plan carries out the plan as restored; a retry plans again against the store
     as it is now (it may have moved).
  5. `answer_catchup` refuses a request for a snapshot index the machine has not applied yet (it could not
     tell "deleted" from "not yet written") or for another stream; it never guesses.
  6. An unfit leader hands its leadership only to a voter that said it can serve now (`can_take_over`,
     computed by that voter on its own adapter and Raft state and asked for by the leader right before
     it hands over: production's `replica.state` answer `can_lead`; the simulator reads the voter
     directly): not `unfit_to_lead` — so once leading it keeps the leadership — and its Raft log not
     repairing (Raft refuses such a target). Among those it takes the first of the reachable voters
     (`Status.reachable_followers`: answered within the check-quorum window, most caught-up first). A
     voter that did not answer counts as unable. Handing over to an unfit voter only moves the problem
     (it hands back: the bounce of sim seeds consumer 129 and 596), so when no reachable voter can serve,
     `successor` is None and the leader stays: no replica can fetch from it then, but none could from an
     unfit successor either; it asks again after an election timeout, when a voter may have become able
     (a replay ended, a peer came back).
  7. Only a verified source serves (`source_refusal`, asked before a snapshot or a chunk is served): a
     replica that is current and fault-free and whose store is not unjudged (replica/judgement.py: no
     disagreeing verdict and no unverified repair since its last agreeing verdict or verified repair).
     Anything else is refused with a stable `RefusalCode`; the requester waits and asks again.
  8. A replacement store built for the session (`install`) is swapped in only by `finish_session`, after
     the session ended verified (or with its verification left to the audit, catchup invariant 4) and the
     built store is durable, and before any held entry is applied to it.
  9. `finish_session` tells the adapter's `Judgement` how the repair ended (verified, or left to an
     audit) before it releases anything: an unverified store is unjudged — durably — before an entry
     after the plan's index applies or a snapshot of its own can be taken.

Imports: L0, L2 (`store` values), L3 (`stream`), stdlib, replica sibling (`judgement`). Never trio, time, os or
the server layer.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from jsraft.errors import invariant
from jsraft.replica.judgement import Judgement
from jsraft.store.base import StreamStore
from jsraft.stream import (
    CatchupChunk, CatchupRefusal, CatchupRequest, Health, RefusalCode, StreamStateMachine, serve_catchup,
)
from jsraft.stream.catchup import CatchupSession


class RepairAdapter(Protocol):
    """What the decisions read of `server.stream_adapter.StreamAdapter`."""

    machine: StreamStateMachine
    plan: Any  # PendingPlan | None
    generation: int
    judgement: Judgement

    @property
    def holding(self) -> bool: ...

    @property
    def resync_pending(self) -> int | None: ...

    def release(self) -> None: ...


class Job(enum.Enum):
    resync = "resync"  # ask the leader for its stream snapshot (`StreamAdapter.begin_resync`)
    carry_out = "carry_out"  # run a catch-up session for the pending plan


def next_job(adapter: RepairAdapter, *, escalate: bool) -> Job | None:
    """Invariant 1."""
    machine = adapter.machine
    if escalate:
        return Job.resync
    if adapter.plan is not None:
        return Job.carry_out
    if adapter.resync_pending is not None or machine.replaying:
        return None  # waiting for the log to reach the resync's index, or for the replay to end
    if machine.health is not Health.current or machine.store.faults():
        return Job.resync
    return None


def open_session(adapter: RepairAdapter, *, first: bool, reset_store: Callable[[], StreamStore] | None,
                 bytes_max: int) -> tuple[CatchupSession, Any]:
    """The session carrying out the adapter's pending plan, and the plan it starts from (invariant 4)."""
    pending, machine = adapter.plan, adapter.machine
    assert pending is not None
    plan = pending.plan if first else machine.plan_against(pending.plan.group, store_may_be_ahead=pending.recovering)
    session = CatchupSession(machine, pending.plan.group, snapshot_index=pending.index, reset_store=reset_store,
                             bytes_max=bytes_max, store_may_be_ahead=pending.recovering)
    return session, plan


def finish_session(adapter: RepairAdapter, session: CatchupSession, generation: int, *,
                   install: Callable[[bytes], StreamStore] | None = None) -> bool:
    """The session ended: make the store durable, swap in a store built beside the old one (`install`,
    given the state tuple it verified), and release what the adapter held back — if the plan is still
    this one (invariants 2, 3 and 7). False: the caller abandons a build it started."""
    result = session.result
    if result is None or adapter.generation != generation:
        return False
    machine = adapter.machine
    machine.store.sync()
    index = adapter.plan.index if adapter.plan is not None else machine.applied_index
    if install is not None:
        state = machine.store.state()
        invariant(result.verified is not False and state.agreement_key() == result.state.agreement_key(),
                  "a replacement store is swapped in only as the session verified it")
        machine.replace_store(install(repr(state.agreement_key()).encode()))
        invariant(machine.store.state().agreement_key() == state.agreement_key(),
                  "the swapped-in store reopens as it was built")
    adapter.judgement.repaired(index, verified=result.verified is True)  # invariant 9
    adapter.release()
    return True


def is_whole(adapter: RepairAdapter) -> bool:
    """The replica is whole again: current, not replaying, fault-free, nothing planned, held or awaited."""
    machine = adapter.machine
    return not (machine.health is not Health.current or machine.replaying or machine.store.faults()
                or adapter.plan is not None or adapter.holding or adapter.resync_pending is not None)


def unfit_to_lead(adapter: RepairAdapter) -> bool:
    """A Raft leader in this state cannot serve the stream and should hand its leadership away (a replay
    alone ends by itself)."""
    machine = adapter.machine
    waiting = adapter.holding or adapter.resync_pending is not None
    return waiting or not (machine.can_lead or machine.replaying)


def can_take_over(adapter: RepairAdapter, *, raft_repairing: bool) -> bool:
    """What a voter answers an unfit leader asking whether it could lead in its place (invariant 6): it
    would not find itself unfit once leading (so it does not hand back), and its Raft log may win."""
    return not raft_repairing and not unfit_to_lead(adapter)


def successor(reachable: Sequence[str], can_lead: Mapping[str, bool]) -> str | None:
    """The voter an unfit leader hands its leadership to: the first of `reachable` (most caught-up
    first) that answered it can serve; None — stay — when none did (invariant 6)."""
    return next((peer for peer in reachable if can_lead.get(peer) is True), None)


def source_refusal(machine: StreamStateMachine, judgement: Judgement) -> CatchupRefusal | None:
    """Invariant 7: None when this replica may serve a repair (snapshot or catch-up), else why not."""
    if machine.health is not Health.current or machine.replaying:
        return CatchupRefusal(reason=f"the source's replica is {machine.health}", code=RefusalCode.source_not_current)
    faults = machine.store.faults()
    if faults:
        return CatchupRefusal(reason=f"the source's store has {len(faults)} faults, from {faults[0].first}",
                              code=RefusalCode.source_faulty)
    if judgement.disagreed:
        return CatchupRefusal(reason=f"the source's store disagreed with the majority at the audit at index "
                                     f"{judgement.awaiting} and was not repaired since",
                              code=RefusalCode.source_disagreed)
    if judgement.unjudged:
        return CatchupRefusal(reason=f"the source's store awaits an audit's confirmation since index "
                                     f"{judgement.awaiting}", code=RefusalCode.source_unjudged)
    return None


def answer_catchup(machine: StreamStateMachine, stream: str, request: CatchupRequest) -> CatchupChunk | CatchupRefusal:
    """The stream leader's answer to one catch-up request (invariant 5); the caller checked it leads."""
    if request.stream != stream:
        return CatchupRefusal(reason=f"no stream {request.stream} here", code=RefusalCode.no_stream)
    if machine.applied_index < request.snapshot_index:
        return CatchupRefusal(reason=f"the leader applied {machine.applied_index}, below the snapshot index "
                                     f"{request.snapshot_index}", code=RefusalCode.behind_snapshot)
    return serve_catchup(machine, request)
