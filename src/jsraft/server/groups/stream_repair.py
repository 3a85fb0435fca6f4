"""`RepairWorker`: a stream replica's repairs, carried out against the stream leader over `$rpc` (L5).

Owns: the follower side of DESIGN §8's repair — turning a pending `RepairPlan` (from a restored snapshot,
see `stream_adapter`) into a `CatchupSession` whose requests go to the current stream leader
(`stream.catchup`), chunk by chunk; asking the leader for its stream snapshot (`stream.snapshot`) when
this replica drifted, has store faults, or was told by an audit that it disagrees (a *resync*); retries
with backoff when the leader changes, refuses or does not answer; stepping down from a Raft leadership
this replica cannot serve; and the advisories of each drift episode (`stream_drift` when it is found,
`stream_drift_repaired` when the replica is whole again, with what was fetched). The leader's side of
both methods is `repair_serve`.

Invariants:
  1. Repairs are asked of the stream leader only (`repair_serve` invariant 1), never of this replica itself.
  2. A session belongs to one plan generation: when a newer snapshot replaced the plan while a chunk was
     in flight, the session is dropped without touching the store again.
  3. A refusal, a timeout or a leader change retries the same plan (recomputed against the store, which
     may have moved); a session that failed verification (`CatchupFailed`) escalates to a resync from a
     fresh leader snapshot. Waits between tries grow to `repair_backoff_max_s`.
  4. A replica that cannot serve (under repair, drifted, with faults) and finds itself Raft leader asks
     the voters that answered within the last election timeout (`Status.reachable_followers`) whether
     they can lead (`replica.state`'s `can_lead`), and hands the leadership to the most caught-up that
     can (`replica.stream_repair.successor`); when none can it stays (handing over to an unfit voter only
     bounces the leadership back). At most once per election timeout — unless its memory store lost its
     messages: then `memory_stream` rule 5 decides. A replica stopped by a consumer this node cannot run
     (`stream_replica` invariant 6) cannot serve either: the leadership goes to a node that can run it.
  6. `health()` says repairing while the store or the Raft log is repairing or the store holds a fault no
     repair cleared: monitoring never calls current a replica short of what it acked or with unreadable msgs.
  5. A drift episode yields exactly one `stream_drift` and one `stream_drift_repaired` advisory from this
     node, whatever number of tries it took. An episode that began with a memory store emptied by a
     restart (`FindingKind.memory_lost`) yields neither: that is memory storage, not damage.
  7. A repair that needs a fresh store refills one built beside the old store (`ReplacementStore`,
     store/swap.py); the old store is put back when the session fails, is interrupted or is replaced, and
     the new one is swapped in only by `finish_session`, verified (replica.stream_repair invariant 8).
  8. The verdicts this replica learns (as leader, or sent by one) go to the adapter's `Judgement`
     (replica/judgement.py): `repair_serve` serves only as a verified source by it.

Imports: stdlib, L0, L1 (`raft` status), L2 (`store`), L3 (`stream`), L3½ (`replica.stream_repair`: every
repair decision), attrs, trio, server siblings. Reference: DESIGN.md §6 (range catch-up), §8; stream/catchup.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from jsraft.errors import JsraftError
from jsraft.raft.errors import NotLeader
from jsraft.raft.status import Role
from jsraft.replica.advisories import AdvisoryLog
from jsraft.server.groups.stream_options import StreamOptions
from jsraft.replica import stream_repair as decide
from jsraft.server.groups.repair_build import ReplacementStore
from jsraft.server.groups.stream_handover import choose_successor, transfer_leadership
from jsraft.stream import (
    CatchupChunk, CatchupRefusal, CatchupRequest, CatchupSession, Finding, FindingKind, Health,
    MalformedCatchup, decode_catchup, encode_request,
)
from jsraft.stream.audit import drift_advisory, repaired_advisory
from jsraft.stream.drift import fault_finding
from jsraft.stream.errors import CatchupFailed

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.repair")

CallPeer = Callable[..., Awaitable[tuple[Any, list[bytes]]]]


async def no_peers(peer: str, method: str, *args: Any, **kwargs: Any) -> tuple[Any, list[bytes]]:
    """The `CallPeer` of a replica built without `$rpc` (a single node in a test): no one to ask."""
    raise NotLeader(None)
_FINDINGS_MAX = 32  # per advisory


class _Retry(Exception):
    """Internal: this try cannot go on now (no other leader, a refusal); wait and try again."""


@attrs.define
class _Episode:
    """One drift episode of this replica, from the first sign to the replica being whole again."""

    started_index: int
    found: tuple[int, int, int, int, int]
    findings: list[Finding] = attrs.field(factory=list)
    expected: tuple[int, int, int, int, int] | None = None
    advised: int | None = None  # how many findings the drift advisory named (None: not recorded yet)
    fetched_msgs: int = 0
    deleted_seqs: int = 0
    reset: bool = False
    verified: bool | None = None
    tries: int = 0

    @property
    def memory_restart(self) -> bool:  # it began with a memory store that restarted empty (memory_stream 2)
        return bool(self.findings) and self.findings[0].kind is FindingKind.memory_lost

    def add(self, findings: Sequence[Finding]) -> None:
        for finding in findings:
            if finding not in self.findings and len(self.findings) < _FINDINGS_MAX:
                self.findings.append(finding)


class RepairWorker:
    def __init__(self, replica: "StreamReplica", *, call_peer: CallPeer, advisories: AdvisoryLog,
                 options: StreamOptions) -> None:
        self.replica = replica
        self.call_peer = call_peer
        self.advisories = advisories
        self.options = options
        self.state = "idle"  # idle | waiting | resyncing | fetching
        self.repairs = 0  # episodes completed
        self.fetched_msgs = 0  # over all episodes
        self.repaired_at_index = 0  # the applied index at which the last episode ended
        self.last_error = ""
        self.episode: _Episode | None = None
        self._plan_generation = -1
        self._escalate = False
        self._findings_seen = 0
        self._recovery_noted = False
        self._last_transfer_s = float("-inf")
        self._wakeup = trio.Event()
        self.replacement = ReplacementStore(replica)  # a fresh store the session refills (invariant 7)

    def wake(self) -> None:
        self._wakeup.set()
        self.replica.runtime.ticker.release(self.replica.group)  # its task may be waiting on a quiet group

    @property
    def busy(self) -> bool:
        return self.episode is not None

    # --- The task ----------------------------------------------------------------------------------

    async def run(self) -> None:
        options = self.options
        backoff_s = options.repair_backoff_min_s
        ticker = self.replica.runtime.ticker
        while True:
            self._wakeup = trio.Event()
            await self._step_down_if_unfit()
            self._note_recovered()
            self._collect_findings()
            self._close_episode_if_whole()
            job = self._next_job()
            if job is None:
                self.state = "waiting" if self.episode is not None else "idle"
                if self.replica.runtime.ticker.is_quiet(self.replica.group) and not self._wakeup.is_set():
                    await self.replica.runtime.ticker.wait_awake(self.replica.group)  # woken with the group
                    continue
                # The node's tick wheel, not a trio deadline per replica (ticker invariant 4).
                ticker.after_ticks(max(round(options.repair_backoff_min_s * 10 / options.tick_s), 2), self._wakeup)
                await self._wakeup.wait()
                continue
            try:
                await job()
                backoff_s = options.repair_backoff_min_s
                self.last_error = ""
            except (JsraftError, _Retry) as error:
                self.last_error = str(error)
                log.info("stream %s on %s: repair waits %.2fs: %s", self.replica.name, self.replica.node_id,
                         backoff_s, error)
                self.state = "waiting"
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, options.repair_backoff_max_s)

    def _next_job(self) -> Callable[[], Awaitable[None]] | None:
        adapter, machine = self.replica.adapter, self.replica.machine
        if adapter is None or machine is None:
            return None
        job = decide.next_job(adapter, escalate=self._escalate)
        if job is None:
            return None
        return self._resync if job is decide.Job.resync else self._carry_out

    # --- Episodes and advisories -------------------------------------------------------------------

    def _note_recovered(self) -> None:
        """The WAL replay after the open ended (its target falls with a truncated log: stream_adapter inv. 3):
        ask for an audit (DESIGN §8), which settles what the replay cannot see (a changed message)."""
        adapter, machine = self.replica.adapter, self.replica.machine
        if self._recovery_noted or adapter is None or machine is None or adapter.recovery_target is None:
            return
        if machine.replaying and adapter.recovery_target > adapter.applied_index and (raft := self._raft()) is not None:
            adapter.bound_recovery(raft.last_index)
        if not machine.replaying and not adapter.holding:
            self._recovery_noted = True
            self.replica.audit.request_soon()

    def _open_episode(self) -> _Episode:
        if self.episode is None:
            machine = self.replica.machine
            assert machine is not None
            self.episode = _Episode(started_index=machine.applied_index,
                                    found=machine.store.state().agreement_key())
        return self.episode

    def _collect_findings(self) -> None:
        """New findings of the machine (replay, last-sequence check, restored plans), of finish_recovery,
        and the store's faults, into the current episode (opening one if there is something to say)."""
        adapter, machine = self.replica.adapter, self.replica.machine
        if adapter is None or machine is None:
            return
        if self._findings_seen > len(machine.findings):
            self._findings_seen = 0  # the machine dropped its oldest findings
        fresh = list(machine.findings[self._findings_seen:])
        self._findings_seen = len(machine.findings)
        fresh += adapter.recovery_findings
        adapter.recovery_findings = []
        faults = machine.store.faults()
        if faults:
            state = machine.store.state()
            fresh += [fault_finding(fault, state) for fault in faults]
        if fresh or machine.health is not Health.current or adapter.plan is not None:
            self._open_episode().add(fresh)

    def _advise_drift(self, episode: _Episode) -> None:
        if episode.advised is not None:
            return
        episode.advised = len(episode.findings)
        replica = self.replica
        if episode.memory_restart:  # invariant 5: a memory store emptied by a restart is not drift
            return
        leads = replica.leader_id() == replica.node_id
        self.advisories.record(drift_advisory(
            replica.name, replica.node_id, leader=leads, index=episode.started_index, audit_id=0,
            expected=episode.expected, found=episode.found, findings=episode.findings))

    def _close_episode_if_whole(self) -> None:
        episode, adapter, machine = self.episode, self.replica.adapter, self.replica.machine
        if episode is None or adapter is None or machine is None or not decide.is_whole(adapter):
            return
        self._advise_drift(episode)
        self.episode = None
        self.repairs += 1
        self.fetched_msgs += episode.fetched_msgs
        self.repaired_at_index = machine.applied_index
        replica = self.replica
        if not episode.memory_restart:  # invariant 5
            self.advisories.record(repaired_advisory(
                replica.name, replica.node_id, index=machine.applied_index,
                state=machine.store.state().agreement_key(), fetched_msgs=episode.fetched_msgs,
                deleted_seqs=episode.deleted_seqs, reset=episode.reset, verified=episode.verified,
                findings=episode.findings[episode.advised or 0:]))  # what the repair itself found on the way
        replica.audit.request_soon()  # DESIGN §8: an audit after every recovery and repair

    def on_audit_order(self, index: int, expected: Any, found: Any) -> str:
        """The leader's audit at `index` found this replica's state tuple disagreeing with the majority:
        stop trusting the store and resync (unless a repair is under way or ended after that audit)."""
        adapter, machine = self.replica.adapter, self.replica.machine
        if adapter is None or machine is None:
            return "not open"
        self.note_audit(index, False)  # invariant 8: whatever this replica does about it, it is no source
        if self.repaired_at_index >= index:  # ending at the audit's index, it may postdate the state audited
            return "repaired since"
        if machine.health is not Health.current or adapter.plan is not None or adapter.holding:
            return "already repairing"
        machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch, detail=(
            f"audit at index {index}: the majority holds {tuple(expected)}, this replica {tuple(found)}")))
        self._open_episode().expected = tuple(expected)
        self.wake()
        return "resyncing"

    # --- Jobs --------------------------------------------------------------------------------------

    async def _resync(self) -> None:
        """Ask the leader for its stream snapshot; the adapter restores it at its index (a plan follows)."""
        replica = self.replica
        assert replica.adapter is not None
        episode = self._open_episode()
        self.state = "resyncing"
        leader = self._leader()
        result, blobs = await self.call_peer(leader, "stream.snapshot", {"stream": replica.name},
                                             timeout_s=self.options.rpc_timeout_s)
        if len(blobs) != 1:
            raise MalformedCatchup("stream.snapshot answered without exactly one snapshot")
        episode.tries += 1
        self._escalate = False
        replica.adapter.begin_resync(int(result["index"]), blobs[0])

    async def _carry_out(self) -> None:
        adapter, machine = self.replica.adapter, self.replica.machine
        assert adapter is not None and machine is not None and adapter.plan is not None
        pending = adapter.plan
        episode = self._open_episode()
        episode.expected = pending.plan.group.agreement_key()
        episode.add(pending.plan.findings)
        self._advise_drift(episode)
        first = self._plan_generation != pending.generation
        self._plan_generation = pending.generation
        session, plan = decide.open_session(adapter, first=first, reset_store=self.replacement.start,
                                            bytes_max=self.options.catchup_chunk_bytes)
        self.state = "fetching"
        finished = False
        try:
            await self._run_session(session, plan, pending.generation)
            if session.result is not None and adapter.generation == pending.generation:
                episode.verified = session.result.verified
            install = self.replacement.install if self.replacement.active else None
            finished = decide.finish_session(adapter, session, pending.generation, install=install)
        finally:
            episode.fetched_msgs += session.fetched_msgs
            episode.deleted_seqs += session.deleted_seqs
            episode.reset = episode.reset or session.was_reset
            if not finished:  # invariant 7: failed, interrupted or replaced: the old store stays
                self.replacement.roll_back()

    async def _run_session(self, session: CatchupSession, plan: Any, generation: int) -> None:
        adapter = self.replica.adapter
        assert adapter is not None
        try:
            request = session.start(plan)
            while request is not None:
                chunk = await self._exchange(request)
                if adapter.generation != generation:
                    return  # invariant 2: a newer snapshot replaced this plan meanwhile
                request = session.on_chunk(chunk)
        except CatchupFailed:
            self._escalate = True  # invariant 3
            raise

    async def _exchange(self, request: CatchupRequest) -> CatchupChunk:
        leader = self._leader()
        _, blobs = await self.call_peer(leader, "stream.catchup", {"stream": self.replica.name},
                                        [encode_request(request)], timeout_s=self.options.rpc_timeout_s)
        if len(blobs) != 1:
            raise MalformedCatchup("stream.catchup answered without exactly one chunk")
        answer = decode_catchup(blobs[0])
        if isinstance(answer, CatchupRefusal):
            raise _Retry(f"{leader} refused: {answer.reason}")
        if not isinstance(answer, CatchupChunk):
            raise MalformedCatchup("stream.catchup answered with a request")
        return answer

    def _leader(self) -> str:
        leader = self.replica.leader_id()
        if leader is None or leader == self.replica.node_id:
            raise _Retry("no other replica leads the stream now")
        return leader

    def note_audit(self, index: int, agreed: bool) -> None:
        """The verdict of the audit at `index` on this replica's store (invariant 8)."""
        if self.replica.adapter is not None:
            self.replica.adapter.judgement.verdict(index, agreed)

    async def _step_down_if_unfit(self) -> None:
        """Invariant 4."""
        replica, machine = self.replica, self.replica.machine
        if machine is None or not self._unfit() or replica.memory_loss.lost:
            return  # a replay alone ends by itself; memory_stream rule 5 decides after a memory loss
        status, election_timeout_s = self._raft(), replica.raft_config.election_ticks * self.options.tick_s
        if (status is None or status.role is not Role.LEADER
                or trio.current_time() - self._last_transfer_s < election_timeout_s):
            return
        self._last_transfer_s = trio.current_time()  # it asks, too, at most once per election timeout
        target = await choose_successor(self.call_peer, replica.name, status.reachable_followers,
                                        timeout_s=election_timeout_s)
        if target is not None and self._unfit():  # still: the answers took a while
            self.hand_over(target, replica.stopped_reason or f"it is {machine.health}")

    def _unfit(self) -> bool:
        adapter = self.replica.adapter  # a replica stopped by a consumer it cannot run serves nothing either
        return adapter is not None and (decide.unfit_to_lead(adapter) or self.replica.stopped_reason is not None)

    def hand_over(self, target: str, why: str) -> None:
        """Ask this node's Raft group to hand its leadership to `target` (a replica that can serve)."""
        self._last_transfer_s = trio.current_time()
        transfer_leadership(self.replica, target, why)

    def health(self) -> Health:
        """Invariant 6: the state machine's health, but repairing while the Raft log repairs."""
        replica = self.replica
        health = replica.machine.health if replica.machine is not None else Health.repairing
        raft = self._raft() if health is Health.current else None
        return Health.repairing if raft is not None and (raft.repairing or replica.store.faults()) else health

    def _raft(self) -> Any:
        """This replica's Raft status; None while its group is not open (opening or closing)."""
        try:
            return self.replica.runtime.status(self.replica.group).raft
        except JsraftError:
            return None

    def describe(self) -> dict[str, Any]:
        """For `replica.state`: the repair's standing and the current episode's findings (a new plan's too)."""
        adapter = self.replica.adapter
        findings = list(self.episode.findings) if self.episode is not None else []
        if adapter is not None and adapter.plan is not None:
            findings += [f for f in adapter.plan.plan.findings if f not in findings]
        return {"state": self.state, "repairs": self.repairs, "fetched_msgs": self.fetched_msgs,
                "repaired_at_index": self.repaired_at_index, "last_error": self.last_error,
                "held_entries": adapter.deferred if adapter is not None else 0,
                "episode_findings": [f.to_json() for f in findings]}
