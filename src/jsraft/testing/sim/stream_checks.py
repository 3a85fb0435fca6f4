"""`StreamChecker`: the stream app's checks — audits agree, the log is consistent, acknowledged publishes stay.

Owns: a *reference replica* (a `StreamStateMachine` on a `MemStore` that never crashes, fed the committed
log the `SafetyChecker` recorded, index by index) and the checks against it and between replicas:

  stream-audit          at every AUDIT entry, every replica's state tuple `(first, last, msgs, bytes,
                        digest)` equals every other replica's report at that index, and the reference
                        replica's. Each report is classified when it is applied (`on_audit`, counted in
                        the stats as `audits_<status>`):
                          vouched     held to equality: any difference is a violation;
                          unhealthy   the replica says itself it is not current or has store faults;
                          replaying   its restart's replay is not done (the store may hold later entries'
                                      messages; production's adapter does not send these reports either);
                          ahead       at or below the highest index a source had applied while it served
                                      this replica's last catch-up (the store may reflect later removals);
                          unverified  DESIGN §8 leaves its store to "the next audit": after a restart on a
                                      disk in the fault atlas, or a catch-up the session could not verify.
                                      Judged as the leader's audit would: agreeing makes it vouched again;
                                      disagreeing marks it drifted (counted in `audit_drifts`), and it is
                                      resynced — a replica is not settled while unverified.
                        At the end, every member's store state equals a fresh reference replica's at the
                        member's applied index.
  state-machine-safety  the reference replica never drifts: a committed log whose MSGS entries do not
                        follow each other's sequences is a leader's mistake.
  durability            a replica outside the fault atlas never reports store faults.
  acked-lost            every acknowledged publish that the log's state still holds (not deleted, purged,
                        expired or removed by a limit since) is in every member's store with its subject
                        and payload; and after the final power failure, an acknowledged MSGS entry counts
                        as durable on a voter whose WAL holds it, or whose snapshot covers it and whose
                        store on disk holds those of its publishes the log still holds (the store is
                        synced before the WAL is compacted past it, DESIGN §2).

Invariants:
  1. The reference replica only reads what `SafetyChecker.applied` recorded (entries some replica applied,
     checked identical across replicas); it changes nothing in the cluster.
  2. Reports are judged once the reference replica reached their index (at most one step later).

Imports: stdlib, `jsraft.raft`, `jsraft.store`, `jsraft.stream`, `jsraft.wal`, siblings.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.raft import EntryType
from jsraft.store.memstore import MemStore
from jsraft.stream import AuditReport, StreamStateMachine
from jsraft.stream.drift import Finding, FindingKind
from jsraft.stream.entries import MsgsBatch, decode_entry
from jsraft.stream.results import Health
from jsraft.testing.sim.violation import Violation
from jsraft.wal import Wal

if TYPE_CHECKING:
    from jsraft.store.base import StreamStore
    from jsraft.testing.sim.checkers import SafetyChecker
    from jsraft.testing.sim.node import NodeDriver
    from jsraft.testing.sim.simulator import Simulation
    from jsraft.testing.sim.stream_app import StreamApp, StreamReplica


def _key_text(key: tuple[int, ...]) -> str:
    first, last, msgs, total, digest = key
    return f"(first {first}, last {last}, msgs {msgs}, bytes {total}, digest {digest:#x})"


class StreamChecker:
    def __init__(self, app: StreamApp) -> None:
        self.app = app
        self.reference = self.new_reference()
        self.reference_reports: dict[int, AuditReport] = {}
        self.final: StreamStateMachine | None = None  # the end-of-run reference (`check_members`)
        self.waiting: list[tuple[StreamReplica, AuditReport, str]] = []
        self.first_report: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.audits: Counter[str] = Counter()  # reports by how they were judged (status in `on_audit`)
        self.audit_drifts = self.repairs = self.resyncs = self.interrupted = self.failed = 0
        # Per node, across restarts: audits up to this index are not judged (a catch-up took removals from a
        # source that had applied that far), and whether its store awaits an audit's confirmation.
        self.vouch_after: dict[str, int] = {}
        self.unverified: set[str] = set()

    def on_caught_up(self, node_id: str, source_index: int, *, verified: bool) -> None:
        self.vouch_after[node_id] = max(self.vouch_after.get(node_id, 0), source_index)
        if verified:
            self.unverified.discard(node_id)
        else:
            self.unverified.add(node_id)

    def stats(self) -> dict[str, int]:
        return {**{f"audits_{status}": count for status, count in sorted(self.audits.items())},
                "audit_drifts": self.audit_drifts, "catchups": self.repairs, "catchups_interrupted": self.interrupted,
                "catchups_failed": self.failed, "resyncs": self.resyncs}

    # --- The reference replica ----------------------------------------------------------------

    def new_reference(self, *, final: bool = False) -> StreamStateMachine:
        """A never-crashing replica on a `MemStore` (the consumer app composes its consumers in)."""
        return StreamStateMachine(MemStore(self.app.store_config()), self.app.config, self.app.raw)

    def advance(self, checker: SafetyChecker, to_index: int, reference: StreamStateMachine | None = None) -> None:
        """Feed `reference` (the running one by default) the committed log up to `to_index`, as known."""
        reference = reference or self.reference
        while reference.applied_index < to_index:
            index = reference.applied_index + 1
            known = checker.applied.get(index)
            if known is None:
                return
            _, entry_type, data = known
            if entry_type is not EntryType.NORMAL:
                reference.applied_index = index
                continue
            result = reference.apply(index, data)
            if result.audit is not None and reference is self.reference:
                self.reference_reports[index] = result.audit
            if reference.health is not Health.current:
                raise Violation("state-machine-safety", f"the committed log does not apply cleanly at {index}: "
                                                        f"{reference.findings[-1:]}")

    # --- Audits -------------------------------------------------------------------------------

    def on_audit(self, replica: StreamReplica, report: AuditReport) -> None:
        """`replica` applied an AUDIT entry: classify its report now (judged after the step)."""
        if report.faults and not replica.driver.setup.corruptible:
            raise Violation("durability", f"{replica.node_id} is outside the fault atlas, yet its store lists "
                                          f"{report.faults} faults at AUDIT {report.index}")
        if report.health is not Health.current or report.faults:
            status = "unhealthy"  # the replica says itself that its store is not the group's
        elif replica.machine.replaying:
            status = "replaying"  # its store may still hold messages of later entries (finish_recovery)
        elif report.index <= self.vouch_after.get(replica.node_id, 0):
            status = "ahead"  # its last catch-up took removals from a source further along (stream_repair)
        else:
            status = "unverified" if replica.node_id in self.unverified else "vouched"
        self.waiting.append((replica, report, status))

    def after_step(self, sim: Simulation) -> None:
        if not self.waiting:
            return
        waiting, self.waiting = self.waiting, []
        for replica, report, status in waiting:
            self.advance(sim.checker, report.index)
            if self.reference.applied_index < report.index:
                self.waiting.append((replica, report, status))
            else:
                self.audits[status] += 1
                if status == "vouched":
                    self._judge(replica.node_id, report)
                    replica.adapter.judgement.verdict(report.index, True)  # the leader's agreeing verdict
                elif status == "unverified":
                    self._settle(replica, report)

    def _judge(self, node_id: str, report: AuditReport) -> None:
        index, key = report.index, report.agreement_key()
        reference = self.reference_reports[index].agreement_key()
        first_node, first_key = self.first_report.setdefault(index, (node_id, key))
        if first_key != key:
            raise Violation("stream-audit", f"at AUDIT {index} {node_id} reports {_key_text(key)}, {first_node} "
                                            f"reported {_key_text(first_key)} (the log gives {_key_text(reference)})")
        if key != reference:
            raise Violation("stream-audit", f"at AUDIT {index} {node_id} reports {_key_text(key)}, the log "
                                            f"applied to a reference replica gives {_key_text(reference)}")

    def _settle(self, replica: StreamReplica, report: AuditReport) -> None:
        """An unverified replica's report (after a restart on a damaged disk, or a catch-up the session could
        not verify: DESIGN §8 leaves those to the next audit). Agreeing makes it verified; disagreeing is
        what the leader's audit judgment finds: the replica is marked drifted, and resynced."""
        index, key = report.index, report.agreement_key()
        reference = self.reference_reports[index].agreement_key()
        replica.adapter.judgement.verdict(index, key == reference)  # as the leader's verdict reaches it
        if key == reference:
            self.unverified.discard(replica.node_id)
            return
        self.audit_drifts += 1
        replica.trace(f"AUDIT {index} finds it drifted: {_key_text(key)}, the group holds {_key_text(reference)}")
        adapter = replica.adapter
        # As production's `RepairWorker.on_audit_order`: a replica already repairing is left to it.
        if (replica.driver.up and replica.driver.replica is replica and replica.machine.health is Health.current
                and adapter.plan is None and not adapter.holding):
            replica.machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch, first=key[0], last=key[1],
                                                 detail=f"AUDIT {index}"))

    # --- End of run -------------------------------------------------------------------------------

    def check_members(self, sim: Simulation, group: tuple[str, ...]) -> None:
        """Each member's store against a fresh reference replica brought to the member's applied index (in
        index order; the running reference may already be further along)."""
        final = self.final = self.new_reference(final=True)
        by_index = sorted((sim.drivers[n].replica.machine.applied_index, n) for n in group)
        for applied, node_id in by_index:
            replica = sim.drivers[node_id].replica
            self.advance(sim.checker, applied, final)
            if final.applied_index != applied:
                raise Violation("state-machine-safety", f"{node_id} applied through {applied}, but the log "
                                                        f"is known only through {final.applied_index}")
            mine, log = replica.machine.store.state().agreement_key(), final.store.state().agreement_key()
            if mine != log:
                raise Violation("stream-audit", f"at the end {node_id} holds {_key_text(mine)}, the log applied to "
                                                f"a reference replica gives {_key_text(log)} (index {applied})")
            self._check_acked(sim, node_id, replica.machine.store)

    def _still_held(self, seq: int, subject: str, payload: bytes) -> bool:
        """Whether the log's state still holds this acknowledged publish (else it was removed on purpose)."""
        try:
            msg = (self.final or self.reference).store.load(seq)
        except NoMessageFound:
            return False
        if (msg.subject, msg.payload) != (subject, payload):
            raise Violation("acked-lost", f"the log holds {msg.payload[:12]!r} at seq {seq}, acknowledged "
                                          f"{payload[:12]!r}")
        return True

    def _check_acked(self, sim: Simulation, node_id: str, store: StreamStore) -> None:
        for seq, (subject, payload) in sorted(sim.clients.acked.items()):
            if not self._still_held(seq, subject, payload):
                continue
            try:
                msg = store.load(seq)
            except (NoMessageFound, DamagedSequence) as error:
                raise Violation("acked-lost", f"{node_id} lacks acknowledged seq {seq} ({payload[:12]!r}): "
                                              f"{type(error).__name__}") from None
            if (msg.subject, msg.payload) != (subject, payload):
                raise Violation("acked-lost", f"{node_id} holds {msg.payload[:12]!r} at acknowledged seq {seq}, "
                                              f"not {payload[:12]!r}")

    def durable(self, sim: Simulation, driver: NodeDriver):  # type: ignore[no-untyped-def]
        """A predicate over what `driver`'s disk holds after the final power failure (module docstring)."""
        wal, recovered = Wal.open(driver.disk)
        wal.close()
        entries = {e.index: e for e in recovered.entries}
        snapshot_index = recovered.snapshot[0].index if recovered.snapshot is not None else 0
        store = self.app.open_store(driver.disk, read_only=True) if snapshot_index else None

        def held(index: int, term: int, value: bytes) -> bool:
            if index > snapshot_index:
                entry = entries.get(index)
                return entry is not None and entry.term == term and entry.data == value
            batch = decode_entry(value)
            if not isinstance(batch, MsgsBatch):
                return True  # a liveness probe (a CONSUMER entry): nothing in the store to hold
            assert store is not None
            for offset, (subject, _, payload, _, _, _) in enumerate(batch.msgs):
                seq = batch.first_seq + offset
                if not self._still_held(seq, subject, payload):
                    continue
                try:
                    msg = store.load(seq)
                except (NoMessageFound, DamagedSequence):
                    return False
                if msg.payload != payload:
                    return False
            return True

        return held
