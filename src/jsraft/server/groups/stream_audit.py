"""`AuditRunner`: the running AUDIT of one stream replica, and its replicas' status (layer L5).

Owns (DESIGN §8, "while running"):
  - on the stream leader: proposing an AUDIT entry every `audit_interval_s` and whenever one is asked for
    (after a recovery or a repair, by any replica: `stream.audit_request`; and at once in a new term);
    collecting the state tuples the replicas computed at that entry's index (`stream.audit_report`);
    judging them (`stream.audit.judge_audit`) once every voter answered or `audit_report_timeout_s`
    passed; recording the verdict's advisories; telling a follower that disagrees with the majority to
    resync (`stream.resync`), and one whose report said its store awaits a verdict that it agreed
    (`stream.audit_agreed`); and, when the leader itself disagrees, marking itself drifted, dropping its
    `StreamLeader` and handing the leadership to a replica that agreed;
  - on every replica: sending its report for each AUDIT it applied to the leader, and asking for audits
    while its store is unjudged (replica/judgement.py);
  - the per-replica status shown in stream info (`describe`): `current`, `lag`, `repairing` or
    `drifted`, the lag in entries, the last audit index and whether the replica agreed at it.

Invariants:
  1. A verdict needs reports from a strict majority of the voters; fewer by the deadline is no verdict
     (nothing is concluded from silence). A report that arrives after its audit was judged is compared
     with that audit's majority.
  2. Bounded: at most `PENDING_AUDITS_MAX` audits wait for reports, `JUDGED_MAX` verdicts are kept for
     late reports, `OUTBOX_MAX` messages wait to be sent (the oldest is dropped: a lost report is a
     `missing` replica at worst).
  3. A leader's `board` lives as long as its `StreamLeader`: a new term starts from an empty view.
  4. Status precedence: drifted > repairing > lag > current (stream/audit.py invariant 3).
  5. An AUDIT is submitted in the replica's proposal chain under its lock, like every proposal
     (stream_replica invariant 2), and its commit awaited after the lock is released: it changes no
     message, so the publishes decided meanwhile need not wait a commit round behind it (they did, on
     every stream every `audit_interval_s`; with the disk stalled, an R1 `persist_mode: async` stream's
     publishes waited for the stall behind its audit).
  6. Every verdict reaches the `Judgement` of each replica that awaits one: the leader's own directly; a
     follower's that agreed when its report said it awaits one (`stream.audit_agreed`), that disagreed
     always (`stream.resync`). A verdict that does not arrive (no majority, a lost message) is made up
     for by asking again: while unjudged, a replica that reported an audit wants another, at most every
     `REASK_S` or twice the report timeout, whichever is longer.

Imports: stdlib, L0, L1 (`raft` errors), L3 (`stream`), trio, server siblings.
Reference: DESIGN.md §8; stream/audit.py.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import JsraftError
from jsraft.raft.errors import NotLeader
from jsraft.replica.advisories import AdvisoryLog
from jsraft.replica.audit_wish import AuditWish
from jsraft.replica.stream_leading import alone_voter
from jsraft.server.groups.stream_expiry import IDLE_TICKS, run_expiry
from jsraft.server.groups.stream_options import StreamOptions
from jsraft.stream import (
    DRIFT_REPAIRED_ADVISORY, AuditReport, AuditVerdict, Health, ReplicaBoard, ReplicaState, StreamLeader,
    judge_audit,
)

if TYPE_CHECKING:
    from jsraft.server.groups.stream_repair import CallPeer
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.audit")

PENDING_AUDITS_MAX = 16
JUDGED_MAX = 16
OUTBOX_MAX = 64
_NEVER_NS = 1 << 62
ASK_EVERY_S = 0.5
REASK_S = 2.0  # invariant 6: an unjudged replica asks again this long after it reported an audit


def report_json(report: AuditReport) -> dict[str, Any]:
    return {"index": report.index, "audit_id": report.audit_id, "first_seq": report.first_seq,
            "last_seq": report.last_seq, "msgs": report.msgs, "bytes": report.bytes, "digest": report.digest,
            "health": str(report.health), "faults": report.faults}


def report_from_json(data: dict[str, Any]) -> AuditReport:
    return AuditReport(index=int(data["index"]), audit_id=int(data["audit_id"]), first_seq=int(data["first_seq"]),
                       last_seq=int(data["last_seq"]), msgs=int(data["msgs"]), bytes=int(data["bytes"]),
                       digest=int(data["digest"]), health=Health(str(data["health"])), faults=int(data["faults"]))


class AuditRunner:
    def __init__(self, replica: "StreamReplica", *, call_peer: "CallPeer", advisories: AdvisoryLog,
                 options: StreamOptions) -> None:
        self.replica = replica
        self.call_peer = call_peer
        self.advisories = advisories
        self.options = options
        self.board: ReplicaBoard | None = None
        self.last_audit_index = 0  # of the last AUDIT this replica applied (and reported)
        self.audits_proposed = 0
        self.verdicts = 0
        self._leader_seen: StreamLeader | None = None
        self._requested = False  # leader: propose an audit at the next turn
        self._wish = AuditWish()  # any replica: ask the leader for an audit until one is reported here
        self._next_ask_s = 0.0
        self._pending: collections.OrderedDict[int, dict[str, AuditReport]] = collections.OrderedDict()
        self._deadlines: dict[int, float] = {}
        self._judged: collections.OrderedDict[int, tuple[int, int, int, int, int] | None] = collections.OrderedDict()
        self._outbox: collections.deque[tuple[str | None, str, dict[str, Any]]] = collections.deque(maxlen=OUTBOX_MAX)
        self._outbox_event = trio.Event()
        self._awaiting: set[str] = set()  # leader: followers whose latest report said they await a verdict

    # --- Inputs --------------------------------------------------------------------------------------

    def on_applied_report(self, report: AuditReport) -> None:
        """The adapter applied an AUDIT entry here (current machine, not replaying): report it."""
        self.last_audit_index = max(self.last_audit_index, report.index)
        adapter = self.replica.adapter
        awaiting = adapter is not None and adapter.judgement.unjudged
        if self._wish.on_reported(report.index, unjudged=awaiting):  # invariant 6: if no verdict comes
            self._next_ask_s = trio.current_time() + max(REASK_S, 2 * self.options.audit_report_timeout_s)
        if self.replica.leader is not None:
            self.collect(self.replica.node_id, report)
        else:
            self._send(None, "stream.audit_report", {"stream": self.replica.name, "replica": self.replica.node_id,
                                                     "report": report_json(report), "awaiting": awaiting})

    def request(self) -> None:
        """An audit was asked for (`stream.audit_request`): the leader proposes one at its next turn."""
        self._requested = True
        self.replica.runtime.ticker.release(self.replica.group)  # the task's turn comes now, even if quiet

    def request_soon(self) -> None:
        """This replica recovered or was repaired: ask the leader (this node or another) for an audit,
        again every `ASK_EVERY_S` until this replica reported one after now (`AuditWish`: a leader taking
        the request is not enough, an InstallSnapshot can carry the replica past that AUDIT)."""
        machine = self.replica.machine
        self._wish.want(machine.applied_index if machine is not None else 0)
        self.replica.runtime.ticker.release(self.replica.group)

    async def _ask_for_audit(self) -> None:
        replica = self.replica
        now_s = trio.current_time()
        if replica.leader is not None:
            if now_s >= self._next_ask_s:  # paced too when it asks again while unjudged (invariant 6)
                self._requested = True
                self._wish.drop()
            return
        leader = replica.leader_id()
        if leader is None or leader == replica.node_id or now_s < self._next_ask_s:
            return
        self._next_ask_s = now_s + ASK_EVERY_S
        try:
            answer, _ = await self.call_peer(leader, "stream.audit_request", {"stream": replica.name},
                                             timeout_s=self.options.rpc_timeout_s)
        except JsraftError as error:
            log.info("stream %s: audit request to %s not taken: %s", replica.name, leader, error)
            return
        self._wish.taken(int(answer.get("applied_index", 0)) if isinstance(answer, dict) else 0)

    def _send(self, to: str | None, method: str, args: dict[str, Any]) -> None:
        self._outbox.append((to, method, args))  # invariant 2: a full outbox drops its oldest
        self._outbox_event.set()

    # --- The task ------------------------------------------------------------------------------------

    async def run(self) -> None:
        ticker = self.replica.runtime.ticker
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_task)
            nursery.start_soon(run_expiry, self.replica)  # max_age and Nats-TTL
            while True:
                if self._ask_due():
                    await self._ask_for_audit()
                await self._leader_turn()
                await ticker.next_tick()  # the node's tick wheel: no trio deadline per replica
                leader = self.replica.leader
                if not (self._ask_due() or self._requested or self._pending
                        or (leader is not None and leader.audit_owed())):  # new entries: an audit to come
                    # Nothing due: look again after IDLE_TICKS or when released (a request, a new
                    # StreamLeader), and sleep through the group's quiescence.
                    await ticker.pause(self.replica.group, IDLE_TICKS)
                    await ticker.wait_awake(self.replica.group)

    def _ask_due(self) -> bool:
        machine = self.replica.machine
        return self._wish.due(current=machine is not None and machine.health is Health.current)

    async def _send_task(self) -> None:
        while True:
            await self._outbox_event.wait()
            self._outbox_event = trio.Event()
            while self._outbox:
                to, method, args = self._outbox.popleft()
                to = to or self.replica.leader_id()
                if to is None or to == self.replica.node_id:
                    continue  # no leader to tell, or it is this node and was told directly
                try:
                    await self.call_peer(to, method, args, timeout_s=self.options.rpc_timeout_s)
                except JsraftError as error:
                    log.info("stream %s: %s to %s not delivered: %s", self.replica.name, method, to, error)

    async def _leader_turn(self) -> None:
        replica = self.replica
        leader = replica.leader
        if leader is not self._leader_seen:
            self._new_term(leader)  # invariant 3
        if leader is None:
            return
        if self._requested:
            self._requested = False
            leader.request_audit()
        # Whether this replica is its group's only voter matters only to a stream never written to (`leader`
        # invariant 6): the group's status is built only then, and at every turn, so a member added since counts.
        alone = leader.machine.last_seq == 0 and alone_voter(replica.runtime.status(replica.group).raft, replica.node_id)
        entry = leader.audit_due(int(trio.current_time() * 1e9), alone=alone)
        if entry is not None:
            try:
                await self._propose(entry)
                self.audits_proposed += 1
            except JsraftError as error:
                log.info("stream %s: audit not proposed: %s", replica.name, error)
        self._judge_due()

    async def _propose(self, entry: bytes) -> None:
        """Invariant 5: submitted under the lock, committed outside it."""
        replica = self.replica
        async with replica._propose_lock:
            leader = replica.leader
            if leader is None:
                raise NotLeader(replica.leader_id())
            try:
                proposal = await replica._submit(entry)
            except JsraftError:
                replica.leader = None  # its in-flight view is now wrong (stream_replica invariant 1)
                raise
        try:
            await replica.runtime.outcome(replica.group, proposal)
        except JsraftError:
            if replica.leader is leader:  # not one rebuilt since, whose view is its own
                replica.leader = None
            raise

    def _new_term(self, leader: StreamLeader | None) -> None:
        self._leader_seen = leader
        self._pending.clear()
        self._deadlines.clear()
        self._judged.clear()
        self.board = None
        if leader is not None:
            self.board = ReplicaBoard(self.replica.name, self.replica.peers)
            interval_s = self.options.audit_interval_s
            leader.audit_interval_ns = int(interval_s * 1e9) if interval_s > 0 else _NEVER_NS

    # --- Judging (leader) ----------------------------------------------------------------------------

    def collect(self, name: str, report: AuditReport, *, awaiting: bool = False) -> None:
        if self.board is None or name not in self.replica.peers:
            return  # not leading (a stale sender), or not a member
        if awaiting:
            self._awaiting.add(name)
        else:
            self._awaiting.discard(name)
        index = report.index
        if index in self._judged:
            self._judge_late(name, report)
            return
        reports = self._pending.get(index)
        if reports is None:
            if len(self._pending) >= PENDING_AUDITS_MAX:
                self._judge(next(iter(self._pending)))  # invariant 2: the oldest is judged as it stands
            reports = self._pending[index] = {}
            self._deadlines[index] = trio.current_time() + self.options.audit_report_timeout_s
        reports[name] = report
        if all(peer in reports for peer in self.replica.peers):
            self._judge(index)

    def _judge_due(self) -> None:
        now_s = trio.current_time()
        for index, deadline_s in list(self._deadlines.items()):
            if now_s >= deadline_s:
                self._judge(index)

    def _judge(self, index: int) -> None:
        reports = self._pending.pop(index)
        self._deadlines.pop(index, None)
        voters = self.replica.peers
        if len(reports) <= len(voters) // 2:
            log.info("stream %s: audit at %d has %d of %d reports: no verdict", self.replica.name, index,
                     len(reports), len(voters))
            return  # invariant 1
        verdict = judge_audit(reports, voters, self.replica.node_id)
        self._judged[index] = verdict.majority
        while len(self._judged) > JUDGED_MAX:
            self._judged.popitem(last=False)
        self._apply_verdict(verdict, reports)

    def _judge_late(self, name: str, report: AuditReport) -> None:
        majority = self._judged[report.index]
        if majority is None:
            return  # a split audit: nobody is resynced for it (stream/audit.py invariant 1)
        agrees = report.agreement_key() == majority
        verdict = AuditVerdict(index=report.index, audit_id=report.audit_id, majority=majority,
                               agreeing=(name,) if agrees else (), drifted=() if agrees else (name,),
                               leader_drifted=not agrees and name == self.replica.node_id)
        self._apply_verdict(verdict, {name: report})

    def _apply_verdict(self, verdict: AuditVerdict, reports: dict[str, AuditReport]) -> None:
        assert self.board is not None
        self.verdicts += 1
        for advisory in self.board.on_verdict(verdict, reports, self.replica.node_id):
            # A repaired replica records its own repaired advisory, with what it fetched (stream_repair).
            if advisory.type != DRIFT_REPAIRED_ADVISORY:
                self.advisories.record(advisory)
        for name in verdict.agreeing:  # invariant 6
            if name == self.replica.node_id:
                self.replica.repair.note_audit(verdict.index, True)  # stream_repair invariant 8
            elif name in self._awaiting:
                self._awaiting.discard(name)
                self._send(name, "stream.audit_agreed", {"stream": self.replica.name, "index": verdict.index})
        for name in verdict.drifted:
            found = reports[name].agreement_key()
            args = {"stream": self.replica.name, "index": verdict.index, "expected": list(verdict.majority or ()),
                    "found": list(found)}
            if name == self.replica.node_id:
                self._step_down(verdict, found)
            else:
                self._send(name, "stream.resync", args)

    def _step_down(self, verdict: AuditVerdict, found: tuple[int, int, int, int, int]) -> None:
        """This leader disagrees with its majority: it must not serve reads or catch-up from its store."""
        replica = self.replica
        log.warning("stream %s: leader %s disagrees with its majority at audit %d: stepping down",
                    replica.name, replica.node_id, verdict.index)
        replica.repair.on_audit_order(verdict.index, verdict.majority or (), found)
        replica.leader = None
        target = next((name for name in verdict.agreeing if name != replica.node_id), None)
        if target is not None:
            replica.repair.hand_over(target, f"outvoted at audit {verdict.index}")

    # --- Status --------------------------------------------------------------------------------------

    def describe(self, replicas: dict[str, dict[str, Any]], commit_index: int) -> dict[str, dict[str, Any]]:
        """Stream info's `cluster.replicas`, each answer of `replica.state` with its status added."""
        lag_max = self.board.lag_entries_max if self.board is not None else 1000
        for name, answer in replicas.items():
            if "health" not in answer:
                answer.update({"current": False, "status": "offline"})
                continue
            seen = self.board.replicas.get(name) if self.board is not None else None
            last_audit = seen.last_audit_index if seen is not None and seen.last_audit_index else None
            agreed = seen.agreed_at_last_audit if seen is not None else None
            lag = max(0, commit_index - int(answer["applied_index"]))
            repair = answer.get("repair", {})
            audit_says_drifted = (agreed is False and last_audit is not None
                                  and int(repair.get("repaired_at_index", 0)) <= last_audit)
            if answer["health"] == str(Health.drifted) or audit_says_drifted:
                state = ReplicaState.drifted
            elif (answer["health"] == str(Health.repairing) or answer.get("faults") or answer.get("holding")
                  or repair.get("state") in ("resyncing", "fetching")):
                state = ReplicaState.repairing
            elif lag > lag_max:
                state = ReplicaState.lag
            else:
                state = ReplicaState.current
            answer.update({"status": str(state), "current": state is ReplicaState.current, "lag": lag,
                           "last_audit_index": last_audit or int(answer.get("last_audit_index", 0)),
                           "agreed_at_last_audit": agreed})
        return replicas
