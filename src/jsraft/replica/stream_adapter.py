"""`StreamAdapter`: `StreamStateMachine` behind the runtime's `StateMachine` protocol (layer L3½).

Owns: feeding a stream group's committed entries to its state machine (NOOP and CONF_CHANGE entries only
move `applied_index`), the end of the WAL replay after a restart (`finish_recovery`, stream/machine.py
lifecycle), the repair plan a restored snapshot leaves (`plan`), and holding entries back while that plan
is carried out (`hold_after`, the deferred entries).

Why entries are held: a repair brings the store to a snapshot's group state, which is the state at the
snapshot's index. The machine must stand at exactly that index when the repair finishes, so the entries
the log commits meanwhile wait here (bounded) and are applied once the store is whole again — as the
lifecycle in stream/machine.py says, "entries after the snapshot's index apply ... only once it is done".
The runtime still sees them applied: `applied_index` counts them.

Three ways a plan arrives:
  - the runtime restores a snapshot: this replica's own at startup (`recovering`), or the leader's
    (Raft InstallSnapshot);
  - a resync (`begin_resync`): the leader's stream snapshot at its applied index L, fetched over `$rpc`
    because this replica drifted or has faults; it is restored when the machine reaches L (entries up to
    L apply first, entries after it are held).

Invariants:
  1. Every committed entry reaches the machine exactly once, in index order; `applied_index` (what the
     runtime checks) is the last entry given to `apply` or covered by a restored snapshot.
  2. Entries are held only while a plan is pending or a resync waits for its index; they are released,
     in order, by `release()` or by a plan that turns out empty. Beyond `DEFERRED_ENTRIES_MAX` entries or
     `DEFERRED_BYTES_MAX` bytes the plan is abandoned: the held entries apply (a machine under repair only
     moves its position) and a fresh resync starts from a newer snapshot.
  3. `finish_recovery()` is called once, when the machine reached the log's last index at open time
     (`recovery_target`): only then is a store still ahead of the log truly ahead. A log truncated below
     that target since (a new leader's entries replaced an uncommitted tail) lowers it (`bound_recovery`):
     entries that were never committed were never applied, so the store holds nothing of them; without
     it, an idle stream's replica stayed replaying — reporting no audit, taking no snapshot, serving no
     repair — until the log grew past the old tail (simulator `--app consumer` seed 51287).
  4. `noop_term`: as in `meta_adapter` — a StreamLeader is built only once its term's NOOP applied.
  5. `snapshot()` is offered (`snapshot_ready()`) only while the machine is current, fault-free, not
     replaying and holds nothing back, and it fsyncs the store first (DESIGN §2: the store is durable
     before the WAL is compacted past it), and so does `prepare_install()` before a leader's snapshot
     compacts it. It reads back, CRC-checked, the messages stored since the last snapshot taken or
     restored here (`apply_ops.read_back`): the log is about to drop the entries that could rewrite them.
     A fault found while it is built (a damaged record, a read-time flip) raises
     `SnapshotUnavailable`: the cycle skips that compaction; the fault is listed, so `snapshot_ready()`
     says no until the store is repaired.
  6. An AUDIT's report leaves this replica (`on_audit`) only when it was computed by a current machine
     outside the recovery replay: anything else is known not to stand for the group.
  7. The stream's consumers (`consumers`, replica/consumer_replica.py) see every entry right after the
     machine applied it, and travel in every snapshot (its `extra`) and every restore with it: recovery,
     InstallSnapshot and resync alike. A CONSUMER entry's result is the consumer set's `ApplyResult`.
  8. A leader's snapshot is marked (`install_mark`, replica/install_mark.py) before the WAL holds it and
     unmarked only once the store holds its state: restored at open while still marked, it is compared
     with the store strictly, as at its install — never taken for this replica's own (whose store may be
     ahead of it and is only verified by the replay).
  9. `pace` (replica/snapshot_pace.py) counts the messages and entry bytes applied since the last snapshot
     taken or restored here and asks for one past its bound, so a restart replays a bounded log whatever
     the entries' batching; the cycle's entry count still applies beside it.
  10. `republisher` (replica/republish.py) sees each entry just before and just after the machine
      applies it: what it republishes was stored by that very apply.
  11. No snapshot of its own while the store is unjudged (`judgement`, replica/judgement.py: a repair
      left unverified, a disagreeing verdict): the snapshot would state the store's tuple as the group's.
      A leader's snapshot (InstallSnapshot) or a resync that finds the store already equal to it judges
      the store, as a verified repair does.

Imports: L0, L1 (`raft.types`), L3 (`stream`), attrs, stdlib, replica siblings (`consumer_replica`,
`install_mark`, `judgement`, `snapshot_pace`, `republish`). Reference: stream/machine.py "Lifecycle".
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence

import attrs

from jsraft.errors import DamagedSequence, JsraftError
from jsraft.raft.types import Entry, EntryType, SnapshotMeta
from jsraft.replica.consumer_replica import ConsumerReplica
from jsraft.replica.install_mark import IndexMark, InstallMark
from jsraft.replica.judgement import Judgement
from jsraft.replica.republish import Republisher
from jsraft.replica.snapshot_pace import SnapshotBound, SnapshotPace
from jsraft.replica.state_machine import SnapshotUnavailable
from jsraft.stream import (
    ApplyResult, AuditReport, EntryKind, Finding, Health, MalformedSnapshot, RepairPlan, StaleSnapshot, StreamNotHealthy,
    StreamStateMachine, decode_snapshot,
)
from jsraft.stream.apply_ops import read_back

log = logging.getLogger("jsraft.server.stream")

DEFERRED_ENTRIES_MAX = 65536
DEFERRED_BYTES_MAX = 256 << 20


@attrs.frozen(kw_only=True)
class PendingPlan:
    """A repair to carry out: bring the store to `plan.group`, the state at `index`."""

    plan: RepairPlan
    index: int
    recovering: bool  # the snapshot is this replica's own (startup): the store may be ahead of it
    generation: int  # a session for an older generation is abandoned
    source: str  # "recovery", "install" (Raft InstallSnapshot) or "resync"


def _ignore(*_: object) -> None:
    return None


class StreamAdapter:
    def __init__(self, machine: StreamStateMachine, *, on_audit: Callable[[AuditReport], None] = _ignore,
                 on_change: Callable[[], None] = _ignore, install_mark: InstallMark | None = None,
                 audit_mark: IndexMark | None = None, pace: SnapshotPace | None = None) -> None:
        self.machine = machine
        self.install_mark = install_mark  # None: nothing durable beside the store (tests, memory-only)
        self.judgement = Judgement(audit_mark)  # invariant 11
        self.noop_term = 0
        self.recovery_target: int | None = None  # set once the group is open; None: not known yet
        self.plan: PendingPlan | None = None
        self.generation = 0
        self.hold_after: int | None = None  # entries above this index are held back (invariant 2)
        self.recovery_findings: list[Finding] = []  # what finish_recovery found, for the repair worker
        self.abandoned = 0  # plans given up because too much was held back
        self._deferred: collections.deque[Entry] = collections.deque()
        self._deferred_bytes = 0
        self._resync: tuple[int, bytes] | None = None  # (index, leader's snapshot) to restore at index
        self._on_audit = on_audit
        self._on_change = on_change
        self.consumers = ConsumerReplica(machine)  # the stream's consumers, applied at the same indexes
        self.pace = pace or SnapshotPace(SnapshotBound())  # invariant 9 (no bound: only counts)
        self.republisher: Republisher | None = None  # the stream's `republish`, when the replica attaches it
        self._read_back_from = 1  # messages from here on were not read back by a snapshot yet (invariant 5)

    @property
    def applied_index(self) -> int:
        return self._deferred[-1].index if self._deferred else self.machine.applied_index

    @property
    def holding(self) -> bool:
        return self.hold_after is not None

    @property
    def resync_pending(self) -> int | None:
        return self._resync[0] if self._resync is not None else None

    @property
    def deferred(self) -> int:
        return len(self._deferred)

    # --- Applying --------------------------------------------------------------------------------

    def apply(self, entries: Sequence[Entry]) -> list[object]:
        results: list[object] = []
        for entry in entries:
            if self.hold_after is not None and entry.index > self.hold_after:
                self._defer(entry)
                results.append(None)
                continue
            results.append(self._apply_one(entry))
            if self._resync is not None and self.machine.applied_index == self._resync[0]:
                self._restore_resync()
        self.check_recovery()
        return results

    def _apply_one(self, entry: Entry) -> object:
        machine = self.machine
        if entry.type is not EntryType.NORMAL:
            machine.applied_index = entry.index  # nothing for the stream: only the position moves
            if entry.type is EntryType.NOOP:
                self.noop_term = max(self.noop_term, entry.term)
            return None
        republisher = self.republisher
        pending = republisher.before(entry) if republisher is not None else None
        result = machine.apply(entry.index, entry.data)
        if pending is not None:
            republisher.after(pending, result)  # type: ignore[union-attr]  # invariant 10
        if isinstance(result, ApplyResult):
            msgs = result.last_seq - result.first_seq + 1 if result.kind is EntryKind.MSGS else 0
            self.pace.applied(msgs, len(entry.data))  # invariant 9
            if result.audit is not None and machine.health is Health.current and not machine.replaying:
                self._on_audit(result.audit)  # invariant 6
            if result.finding is not None:
                self._on_change()
            # Invariant 7: a CONSUMER entry's outcome is the consumer set's result (what its proposer awaits).
            applied = self.consumers.on_applied(entry.index, result, entry.data)
            if applied is not None:
                return applied
        return result

    def _defer(self, entry: Entry) -> None:
        self._deferred.append(entry)
        self._deferred_bytes += len(entry.data)
        if len(self._deferred) <= DEFERRED_ENTRIES_MAX and self._deferred_bytes <= DEFERRED_BYTES_MAX:
            return
        # Invariant 2: the repair is too slow for the log. Let the held entries apply (a machine under
        # repair moves only its position) and start over from a newer snapshot.
        log.warning("stream %s: %d entries held back during a repair: abandoning it for a fresh resync",
                    self.machine.config.name, len(self._deferred))
        self.abandoned += 1
        self.plan, self._resync, self.hold_after = None, None, None
        self.generation += 1
        self._release_deferred()
        self._on_change()

    def _release_deferred(self) -> None:
        while self._deferred and self.hold_after is None:
            entry = self._deferred.popleft()
            self._deferred_bytes -= len(entry.data)
            self._apply_one(entry)
            if self._resync is not None and self.machine.applied_index == self._resync[0]:
                self._restore_resync()
        self.check_recovery()

    def release(self) -> None:
        """The plan was carried out: apply what was held back (invariant 2)."""
        self.plan, self.hold_after = None, None
        self._unmark()  # invariant 8: the store holds the snapshot's state, before any later entry applies
        self._release_deferred()

    def bound_recovery(self, log_last_index: int) -> None:
        """The Raft log's last index now: below the replay's target, the target falls to it (invariant 3)."""
        if self.recovery_target is not None and log_last_index < self.recovery_target:
            self.recovery_target = log_last_index
            self.check_recovery()

    def check_recovery(self) -> None:
        target = self.recovery_target
        machine = self.machine
        if target is not None and machine.replaying and self.hold_after is None and machine.applied_index >= target:
            findings = machine.finish_recovery()
            if findings:
                log.warning("stream %s: recovery findings: %s", machine.config.name, findings)
                self.recovery_findings.extend(findings)
                self._on_change()

    # --- Snapshots and plans -----------------------------------------------------------------------

    def snapshot_ready(self) -> bool:
        machine = self.machine
        if self.hold_after is not None or self._deferred or self._resync is not None:
            return False
        if self.judgement.unjudged:  # invariant 11
            return False
        if machine.replaying or not machine.can_lead:
            return False
        return machine.store.state().last_seq == machine.last_seq

    def snapshot(self) -> bytes:
        machine = self.machine
        machine.store.sync()  # invariant 5
        self._unmark()  # invariant 8: our own snapshot may fall on a marked index the install never reached
        try:
            read_back(machine.store, self._read_back_from, machine.last_seq)  # invariant 5
            data = machine.snapshot(extra=self.consumers.snapshot_extra())  # invariant 7
        except DamagedSequence as error:  # read back damaged: now a listed store fault
            raise SnapshotUnavailable(f"stream snapshot refused: {error}") from error
        except StreamNotHealthy as error:
            raise SnapshotUnavailable(f"stream snapshot refused: {error.description}") from error
        self.pace.reset()  # invariant 9
        self._read_back_from = machine.last_seq + 1
        return data

    def prepare_install(self, meta: SnapshotMeta) -> None:
        """A leader's snapshot is about to be made durable in the WAL, which then drops the entries it
        covers: what the store holds of them is made durable first (invariant 5). Without it, a store that
        already matched the snapshot (no plan) could lose, at the next power cut, applied deletes the log
        can no longer replay, and recovery would find them back (simulator stream seed 185)."""
        self.machine.store.sync()
        if self.install_mark is not None:
            self.install_mark.set(meta.index)  # invariant 8: durable before the WAL holds the snapshot

    def restore(self, data: bytes) -> None:
        """The runtime's restore: this replica's own snapshot at open, or the leader's (InstallSnapshot).
        At open, a snapshot still marked as the leader's (invariant 8) is restored as at its install."""
        recovering = self.recovery_target is None and not self._marked(data)
        self._deferred.clear()  # a snapshot above them covers them all
        self._deferred_bytes = 0
        self._resync = None
        plan = self.machine.restore(data, recovering=recovering)
        self.pace.reset()  # invariant 9
        self._read_back_from = self.machine.last_seq + 1
        self.consumers.restored()  # invariant 7
        self._adopt(plan, recovering, "recovery" if recovering else "install")

    def begin_resync(self, index: int, data: bytes) -> None:
        """Restore the leader's stream snapshot `data`, taken at its applied `index`, once the machine
        stands there: at once if it does, when the log gets there if it is behind. A machine past `index`
        cannot go back to it: `StaleSnapshot` (ask again)."""
        if index < self.machine.applied_index:
            raise StaleSnapshot(f"the leader's snapshot at {index} is behind this replica's "
                                f"{self.machine.applied_index}")
        # Checked now (format, CRC, index): restored later from inside `apply`, a bad snapshot would
        # stop the group instead of failing this try.
        if decode_snapshot(data).applied_index != index:
            raise MalformedSnapshot(f"the leader's snapshot is not at index {index}")
        self.plan = None  # a pending plan is superseded: its session is abandoned
        self.generation += 1
        self.hold_after = None
        while self._deferred and self._deferred[0].index <= index:
            entry = self._deferred.popleft()  # held only under a plan: the machine moves its position
            self._deferred_bytes -= len(entry.data)
            self._apply_one(entry)
        self._resync = (index, data)
        if self.machine.applied_index == index:
            self._restore_resync()
        else:
            self.hold_after = index

    def mark_store_lost(self, finding: Finding) -> None:
        """The store came back without its messages by design (a memory store at a restart): whatever
        plan the replica's own snapshot left is dropped — the store holds none of the group's messages,
        before or after that snapshot — and the replica repairs from a peer (a resync) or, when no replica
        holds them, accepts the loss (`accept_store_loss`). Called at open, before the WAL replay."""
        self.plan, self._resync, self.hold_after = None, None, None
        self.generation += 1
        self.machine.mark_drifted(finding, Health.repairing)
        self._release_deferred()

    def accept_store_loss(self) -> None:
        """No replica holds the stream's messages any more (memory storage, every replica restarted): drop
        the pending plan or resync, go on empty at the log's position, apply what was held back."""
        self.plan, self._resync, self.hold_after = None, None, None
        self.generation += 1  # a session still in flight is abandoned (stream_repair invariant 2)
        machine = self.machine
        # Empty at the log's position: first_seq = last_seq + 1, so no sequence is ever handed out twice.
        if machine.last_seq > 0 and (machine.store.state().last_seq < machine.last_seq or machine.store.state().msgs):
            machine.store.compact(machine.last_seq + 1)
        machine.finish_repair()
        self._unmark()
        self._release_deferred()
        self._on_change()

    def _restore_resync(self) -> None:
        assert self._resync is not None
        index, data = self._resync
        self._resync = None
        self.hold_after = None
        try:
            plan = self.machine.restore(data)
        except JsraftError as error:  # e.g. a config this node cannot parse: the worker tries again
            log.warning("stream %s: the leader's snapshot at %d does not restore: %s", self.machine.config.name,
                        index, error)
            self._on_change()
            return
        self.consumers.restored()  # invariant 7
        self._adopt(plan, False, "resync")

    def _adopt(self, plan: RepairPlan, recovering: bool, source: str) -> None:
        self.generation += 1
        if plan.is_empty:
            self.plan, self.hold_after = None, None  # the store already holds the group's state
            if not recovering:  # invariant 11: compared with the leader's snapshot, strictly
                same = self.machine.store.state().agreement_key() == plan.group.agreement_key()
                self.judgement.repaired(self.machine.applied_index, verified=same)
            self._unmark()  # invariant 8
            self._release_deferred()
        else:
            log.warning("stream %s: %s snapshot at %d leaves a repair plan: %s", self.machine.config.name,
                        source, self.machine.applied_index, plan)
            self.plan = PendingPlan(plan=plan, index=self.machine.applied_index, recovering=recovering,
                                    generation=self.generation, source=source)
            self.hold_after = self.machine.applied_index
        self._on_change()

    # --- The install mark (invariant 8) ------------------------------------------------------------

    def _marked(self, data: bytes) -> bool:
        """True when `data`, restored at open, is the leader's snapshot whose repair never finished."""
        mark = self.install_mark
        if mark is None:
            return False
        pending = mark.pending()
        if pending is None:
            return False
        if pending == decode_snapshot(data).applied_index:
            log.warning("stream %s: the snapshot at %d is the leader's and its repair did not finish: "
                        "comparing the store with it in full", self.machine.config.name, pending)
            return True
        mark.clear()  # stale: the WAL never held the marked snapshot (invariant 8 holds it was set first)
        return False

    def _unmark(self) -> None:
        if self.install_mark is not None:
            self.install_mark.clear()
