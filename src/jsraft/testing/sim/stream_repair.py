"""Stream repair in the simulator: production's repair decisions, with the simulated leader as the peer.

Owns: the transport of a repair between two simulator steps — what production's
`server.stream_repair.RepairWorker` does over `$rpc`, with every decision taken by the same functions
(`jsraft.replica.stream_repair`: which job next, the catch-up session and its plan, the release of the
held entries, when a leader is unfit, whether a source may serve by its `Judgement`) and the same
adapter (`server.stream_adapter.StreamAdapter`: `begin_resync`, `plan`, `release`, `bound_recovery`). Per
simulator step and running replica, `step`:
  - lowers the replay's target to the log's last index (as `RepairWorker._note_recovered`);
  - asks for an audit while the replica wants one (`AuditWish`), paced as production: every
    `ASK_EVERY_TICKS`, and `REASK_TICKS` after a report that left its store unjudged;
  - hands the Raft leadership away when the replica leads but cannot serve (`unfit_to_lead`), to the
    reachable voter `successor` picks among those that say they can serve (`can_take_over`, read on the
    peer over a two-way link as production's `replica.state` RPC), or stays when none can; at most once
    per election timeout (RepairWorker invariant 4, `replica.stream_repair` invariant 6);
  - *resync*: asks the stream leader for its stream snapshot (`repair_serve.leader_snapshot`: the
    leader's machine snapshot with its consumers) and hands it to `adapter.begin_resync`;
  - *carry out*: runs a `CatchupSession` whose requests the stream leader answers
    (`answer_catchup`, as `repair_serve.serve_catchup_request`), every request and chunk through the wire
    encoding, at most `StreamApp.chunks_per_step` round trips per step, so the leader keeps applying
    entries between them; a session is dropped when its plan generation changes (a newer snapshot), when
    the leader changes or loses its two-way link to the replica, and retried after `RETRY_TICKS` on a
    refusal (production: `_Retry`) or escalated to a resync when it fails verification (`CatchupFailed`).

Only the stream leader serves (repair_serve invariant 1): the Raft leader this node knows of, with a
`StreamLeader` built under production's conditions, never the replica itself.

Invariants:
  1. Every decision is production's (`jsraft.replica.stream_repair`); this module only moves bytes.
  2. A catch-up is bounded: more than `ROUNDS_MAX` requests in one session is a `liveness` violation.
  3. The audit checker is told the highest index the leader had applied while it served
     (`StreamChecker.on_caught_up`): the store may reflect removals up to there.

Imports: stdlib, attrs, `jsraft.replica`, `jsraft.stream`, siblings. Reference: server/groups/stream_repair.py,
server/groups/repair_serve.py, DESIGN.md §6, §8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from jsraft.errors import JsraftError
from jsraft.replica import stream_repair as decide
from jsraft.replica.audit_wish import AuditWish
from jsraft.store.swap import BesideBuild
from jsraft.stream import Health, catchup_wire
from jsraft.stream.catchup import CatchupSession
from jsraft.stream.catchup_wire import CatchupRequest
from jsraft.stream.errors import CatchupFailed
from jsraft.testing.sim.violation import Violation

if TYPE_CHECKING:
    from jsraft.testing.sim.simulator import Simulation
    from jsraft.testing.sim.stream_app import StreamReplica

RETRY_TICKS = 10
ASK_EVERY_TICKS = 50  # production's `ASK_EVERY_S` (0.5 s) at 10 ms per tick
REASK_TICKS = 400  # production's `REASK_S` or twice the report timeout: an unjudged replica asks again
ROUNDS_MAX = 100_000


@attrs.define
class RepairState:
    """A replica's repair worker state (what `RepairWorker` keeps between its tries)."""

    escalate: bool = False
    plan_generation: int = -1
    session: CatchupSession | None = None
    request: CatchupRequest | None = None
    generation: int = -1  # the plan generation the session carries out
    source_id: str = ""
    source_index: int = 0  # the highest applied index the leader had while it served this session
    requests: int = 0
    next_tick: int = 0
    last_transfer_tick: int | None = None
    noted_unhealthy: bool = False
    in_episode: bool = False  # a drift episode is open (RepairWorker's `episode`)
    recovery_noted: bool = False
    # Ask the stream leader for an audit until this replica reported one (`AuditRunner.request_soon`).
    wish: AuditWish = attrs.Factory(AuditWish)
    next_ask_tick: int = 0
    reask: bool = False  # it reported an audit while unjudged and wants another: pace it (`REASK_TICKS`)
    build: BesideBuild | None = None  # a replacement store built beside the old one (`ReplacementStore`)
    repaired_at_index: int = 0  # the applied index at which the last episode ended


def step(sim: Simulation, replica: StreamReplica) -> None:
    state = replica.repair
    node = replica.driver.node
    if node is not None and replica.machine.replaying:
        replica.adapter.bound_recovery(node.log.last_index)  # as `RepairWorker._note_recovered`
    _hand_over_if_unfit(sim, replica)
    _note_episode(replica)
    if state.reask:
        state.reask, state.next_ask_tick = False, sim.clock.now + REASK_TICKS
    if state.wish.due(current=replica.machine.health is Health.current):
        _ask_for_audit(sim, replica)
    if sim.clock.now < state.next_tick:
        return
    job = decide.next_job(replica.adapter, escalate=state.escalate)
    if job is None:
        _drop_session(replica)
        return
    source = _leader(sim, replica)
    if source is None:
        if state.session is not None:
            replica.app.checker.interrupted += 1
            replica.trace(f"catch-up from {state.source_id} interrupted: no stream leader to ask")
            _drop_session(replica)
        state.next_tick = sim.clock.now + RETRY_TICKS
        return
    refusal = decide.source_refusal(source.machine, source.adapter.judgement)
    if refusal is not None:  # repair_serve invariant 3: only a verified source serves
        _failed(sim, replica, f"{source.node_id} refused ({refusal.code}): {refusal.reason}")
        return
    if job is decide.Job.resync:
        _resync(sim, replica, source)
    else:
        _carry_out(sim, replica, source)


def _note_episode(replica: StreamReplica) -> None:
    """DESIGN §8, "an audit after every recovery and repair": as `RepairWorker._note_recovered` and
    `_close_episode_if_whole`, which call `StreamAudit.request_soon`."""
    state, adapter = replica.repair, replica.adapter
    whole = decide.is_whole(adapter)
    if not state.recovery_noted and not adapter.machine.replaying and not adapter.holding:
        state.recovery_noted = True
        state.wish.want(adapter.machine.applied_index)
    if not whole:
        state.in_episode = True
    elif state.in_episode:
        state.in_episode, state.noted_unhealthy = False, False
        state.repaired_at_index = adapter.machine.applied_index
        state.wish.want(adapter.machine.applied_index)


def _ask_for_audit(sim: Simulation, replica: StreamReplica) -> None:
    """`AuditRunner._ask_for_audit`: this node's own StreamLeader, or the stream leader over one RPC, again
    every `ASK_EVERY_TICKS` until this replica reported an audit (`AuditWish`)."""
    state = replica.repair
    own = replica.stream_leader()
    if sim.clock.now < state.next_ask_tick:  # production paces its own leader's asks too (stream_audit inv. 6)
        return
    source = replica if own is not None else _leader(sim, replica)
    if source is None:
        return
    leader = source.stream_leader()
    assert leader is not None
    leader.request_audit()
    if own is not None:
        state.wish.drop()
    else:
        state.next_ask_tick = sim.clock.now + ASK_EVERY_TICKS
        state.wish.taken(source.machine.applied_index)  # the answer of production's `stream.audit_request`


def _leader(sim: Simulation, replica: StreamReplica) -> StreamReplica | None:
    """The stream leader this replica would ask (`RepairWorker._leader` + `repair_serve`'s check)."""
    node = replica.driver.node
    leader_id = node.leader_id if node is not None else None
    if leader_id is None or leader_id == replica.node_id:
        return None
    driver = sim.drivers.get(leader_id)
    if driver is None or not driver.up or driver.replica.stream_leader() is None:
        return None
    network = sim.network
    if not (network.can_send(leader_id, replica.node_id) and network.can_send(replica.node_id, leader_id)):
        return None
    return driver.replica


def _hand_over_if_unfit(sim: Simulation, replica: StreamReplica) -> None:
    """RepairWorker invariant 4 (`_step_down_if_unfit`): ask the reachable voters whether they can serve
    (production's `replica.state`), hand over to the one `successor` picks, or stay."""
    node, state = replica.driver.node, replica.repair
    if node is None or node.role != "leader" or not decide.unfit_to_lead(replica.adapter):
        return
    timeout = replica.driver.setup.raft_config.election_ticks
    if state.last_transfer_tick is not None and sim.clock.now - state.last_transfer_tick < timeout:
        return
    followers = node.status().reachable_followers
    if not followers:
        return
    state.last_transfer_tick = sim.clock.now  # asked at most once per election timeout, like the transfer
    target = decide.successor(followers, {peer: _can_take_over(sim, replica, peer) for peer in followers})
    if target is None:
        replica.trace(f"cannot serve ({replica.machine.health}) and no reachable voter of {followers} can: "
                      f"it stays leader")
        return
    replica.trace(f"cannot serve ({replica.machine.health}): handing the leadership to {target}")
    try:
        node.transfer_leadership(target)
    except JsraftError as error:
        replica.trace(f"leadership transfer to {target} not started: {error}")


def _can_take_over(sim: Simulation, replica: StreamReplica, peer: str) -> bool:
    """The `can_lead` of the peer's `replica.state` answer: only over a two-way link to a running peer
    (production's RPC goes there and back; a peer that does not answer counts as unable)."""
    driver = sim.drivers.get(peer)
    network = sim.network
    if driver is None or not driver.up or driver.node is None or driver.replica is None:
        return False
    if not (network.can_send(replica.node_id, peer) and network.can_send(peer, replica.node_id)):
        return False
    return decide.can_take_over(driver.replica.adapter, raft_repairing=driver.node.status().repairing)


def _resync(sim: Simulation, replica: StreamReplica, source: StreamReplica) -> None:
    """`RepairWorker._resync` with `repair_serve.leader_snapshot` on the simulated leader."""
    state, machine = replica.repair, source.machine
    index = machine.applied_index
    try:
        data = machine.snapshot(extra=source.adapter.consumers.snapshot_extra())
        state.escalate = False
        replica.adapter.begin_resync(index, data)
    except JsraftError as error:  # the leader cannot snapshot now, or a stale snapshot: try again later
        _failed(sim, replica, f"resync from {source.node_id} at {index} failed: {error}")
        return
    replica.app.checker.resyncs += 1
    replica.trace(f"resync ({replica.machine.health}, faults {replica.machine.store.faults()[:3]}) from "
                  f"{source.node_id}'s snapshot at {index}")


def _carry_out(sim: Simulation, replica: StreamReplica, source: StreamReplica) -> None:
    """`RepairWorker._carry_out`, spread over steps (at most `chunks_per_step` round trips per step)."""
    state, adapter = replica.repair, replica.adapter
    pending = adapter.plan
    assert pending is not None
    if state.session is not None and (state.generation != pending.generation or state.source_id != source.node_id):
        replica.app.checker.interrupted += 1
        replica.trace(f"catch-up from {state.source_id} interrupted; planning again")
        _drop_session(replica)
    if state.session is None:
        first = state.plan_generation != pending.generation
        if first:
            state.source_index = 0
        state.plan_generation = state.generation = pending.generation
        session, plan = decide.open_session(adapter, first=first, reset_store=replica.fresh_store,
                                            bytes_max=replica.app.catchup_bytes)
        state.session, state.source_id, state.requests = session, source.node_id, 0
        state.source_index = max(state.source_index, source.machine.applied_index)
        try:
            state.request = session.start(plan)
        except CatchupFailed as error:
            _escalate(sim, replica, error)
            return
        except JsraftError as error:
            _failed(sim, replica, f"catch-up from {source.node_id} failed: {error}")
            return
    _exchange(sim, replica, source)


def _exchange(sim: Simulation, replica: StreamReplica, source: StreamReplica) -> None:
    state = replica.repair
    session = state.session
    assert session is not None
    try:
        for _ in range(replica.app.chunks_per_step):
            if state.request is None:
                break
            state.requests += 1
            if state.requests > ROUNDS_MAX:
                raise Violation("liveness", f"{replica.node_id}: a catch-up did not end within {ROUNDS_MAX} requests")
            request = catchup_wire.decode_catchup(catchup_wire.encode_request(state.request))
            answer = decide.answer_catchup(source.machine, request.stream, request)
            state.source_index = max(state.source_index, source.machine.applied_index)
            if isinstance(answer, catchup_wire.CatchupRefusal):
                _failed(sim, replica, f"{source.node_id} refused: {answer.reason}")
                return
            state.request = session.on_chunk(catchup_wire.decode_catchup(catchup_wire.encode_chunk(answer)))
    except CatchupFailed as error:
        _escalate(sim, replica, error)
        return
    except JsraftError as error:  # e.g. DamagedSequence: a record of this store found damaged on the way
        _failed(sim, replica, f"catch-up from {source.node_id} failed: {error}")
        return
    if state.request is None:
        _done(sim, replica, session)


def _drop_session(replica: StreamReplica) -> None:
    """The session ends without `finish_session`: a replacement store it built is dropped and the old
    store is the machine's again (RepairWorker invariant 7)."""
    state = replica.repair
    state.session = state.request = None
    if state.build is not None and state.build.active:
        replica.machine.replace_store(state.build.abandon())
        replica.trace("the repair's replacement store is dropped; the old store stays")


def _escalate(sim: Simulation, replica: StreamReplica, error: Exception) -> None:
    replica.repair.escalate = True  # RepairWorker invariant 3
    _failed(sim, replica, f"catch-up from {replica.repair.source_id} failed verification: {error}")


def _failed(sim: Simulation, replica: StreamReplica, why: str) -> None:
    state = replica.repair
    state.next_tick = sim.clock.now + RETRY_TICKS
    _drop_session(replica)
    replica.app.checker.failed += 1
    replica.trace(f"{why}; retrying later")


def _done(sim: Simulation, replica: StreamReplica, session: CatchupSession) -> None:
    state, adapter = replica.repair, replica.adapter
    state.session = state.request = None
    result = session.result
    assert result is not None
    index = adapter.plan.index if adapter.plan is not None else adapter.machine.applied_index
    build = state.build if state.build is not None and state.build.active else None
    if adapter.generation == state.generation:  # it finishes: the checker learns it before the held AUDITs report
        replica.app.checker.on_caught_up(replica.node_id, state.source_index, verified=result.verified is True)
    if not decide.finish_session(adapter, session, state.generation,
                                 install=build.install if build is not None else None):
        _drop_session(replica)
        return
    if build is not None:
        replica.trace("the replacement store verified and is swapped in")
    replica.app.checker.repairs += 1
    replica.trace(f"caught up to snapshot {index} from {state.source_id} ({state.requests} requests): fetched "
                  f"{result.fetched_msgs}, deleted {result.deleted_seqs}, reset {result.reset}, verified "
                  f"{result.verified}")
    if adapter.machine.applied_index == adapter.applied_index:
        sim.checker.on_digest(replica.node_id, adapter.applied_index, replica.position_digest())
