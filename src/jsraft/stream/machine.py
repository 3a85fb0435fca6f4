"""`StreamStateMachine`: a stream's committed entries applied to its store, deterministically (layer L3).

Owns: applying every entry kind (`apply`), the group position the log implies (`last_seq`, dedupe
window, last msg-id, last timestamp), the replica's health (`current`, `repairing`, `drifted`), stream
snapshots (`snapshot` / `restore`, which returns the repair plan against the local store), and the audit
report at an exact index.

Invariants:
  1. Entries apply in index order; an index at or below `applied_index` is already reflected (a snapshot
     covered it) and is skipped; a gap is a bug.
  2. The last-sequence check: a MSGS entry is appended only when it starts at the store's
     `last_seq + 1`. Anything else means the store disagrees with the log: the replica is marked
     `drifted` with a finding and its store is left alone — never appended at another sequence. The one
     exception is a replay after restart (`replaying`), where a store already holding the entry's
     messages is verified against them instead. Limits then apply again only at the entry holding the
     store's last sequence (the store's durable state is a prefix of its history: a crash may have lost
     that append's limit tombstones, no earlier entry's), and a replayed CONFIG applies none to a store
     holding later entries' messages (opening a store applies none either).
  3. The group position (`last_seq`, dedupe window, `last_msg_id`) follows the log whatever the store's
     health, so a repaired replica and a new leader continue from the right place.
  4. While not `current` the store is not mutated by entries: a repair (`catchup.CatchupSession`) brings
     it to a snapshot's state and `finish_repair` makes the replica current again.
  5. No clock: every time is an entry's timestamp or cut-off, decided by the leader.
  6. An expiry a store fault stopped is owed; it runs again once no fault is left below its bound.

Lifecycle (what the runtime does):
  - start: `StreamStateMachine(store, config, raw)`; with a local Raft snapshot, `restore(data,
    recovering=True)` and, if the plan is not empty, a `CatchupSession(store_may_be_ahead=True)` against
    the leader; then `apply` the WAL's committed entries after the snapshot; then `finish_recovery()`
    and ask the leader for an AUDIT (`StreamLeader.request_audit`).
  - a leader's snapshot (InstallSnapshot, or a resync after an audit marked this replica drifted —
    `mark_drifted` first): `plan = restore(data)`, then `CatchupSession(...).start(plan)` and its requests
    until done; entries after the snapshot's index apply as usual meanwhile only once it is done.
  - every AUDIT applied: send `ApplyResult.audit` to the leader, which judges with `audit.judge_audit`.
Imports: L0, L1 (`jsapi`), L2 (`store`), `stream.*` below it. Reference: DESIGN.md §2, §6, §8.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import attrs

from jsraft.errors import DamagedSequence, JsraftError, invariant
from jsraft.jsapi.stream_config import StreamConfig, parse_stream_config
from jsraft.store.base import StoreState, StreamStore
from jsraft.stream import apply_ops
from jsraft.stream.dedupe import DedupeWindow
from jsraft.stream.drift import Finding, FindingKind, RepairPlan, plan_repair
from jsraft.stream.entries import (
    AuditEntry, ConfigEntry, ConsumerEntry, DeleteEntry, EntryKind,
    ExpireEntry, MsgsBatch, PurgeEntry, decode_entry,
)
from jsraft.stream.outcomes import ApiError, update_failed
from jsraft.stream.errors import MalformedEntry, StaleSnapshot, StreamNotHealthy
from jsraft.stream.results import ApplyResult, AuditReport, Health
from jsraft.stream.snapshot import GroupState, StreamSnapshot, decode_snapshot, encode_snapshot, group_state_of
from jsraft.stream.store_config import store_config_for

_AUDIT_REPORTS_MAX = 16  # reports kept for `audit_report(index)`: enough for a few audits in flight
_FINDINGS_MAX = 64


class StreamStateMachine:
    """Apply a stream group's committed entries to `store`. See the module docstring."""

    def __init__(self, store: StreamStore, config: StreamConfig, raw_config: bytes = b"") -> None:
        self.store = store
        self.config = config
        self.raw_config = raw_config
        # The meta log index of the config in force (CONFIG `meta_index`): an older one never replaces it.
        self.config_meta_index = 0
        self.applied_index = 0
        self.last_seq = 0  # the stream's last sequence as the log says at `applied_index`
        self.last_msg_id = ""  # of the last applied message ("" when it had none): Nats-Expected-Last-Msg-Id
        self.last_timestamp_ns = 0
        self.last_audit_id = self.last_expire_cutoff_ns = 0
        self._expire_owed: tuple[int, int] | None = None  # (cut-off, bound) of a stopped expiry (invariant 6)
        self.dedupe = DedupeWindow(config.duplicate_window)
        self.health = Health.current
        self.findings: list[Finding] = []
        state = store.state()
        self._store_last_seq = state.last_seq
        # A store that already holds messages — or only a moved head (a purge of an empty stream) — before
        # any entry is applied was written by an earlier run: the replay verifies it (invariant 2).
        self.replaying = state.last_seq > 0 or state.first_seq > 0
        self._audits: OrderedDict[int, AuditReport] = OrderedDict()
        self.snapshot_extra = b""  # what the last restored snapshot carried for the runtime (consumers)

    # --- Applying entries ------------------------------------------------------------------------

    def apply(self, index: int, data: bytes) -> ApplyResult:
        if index <= self.applied_index:
            return ApplyResult(index, None)
        invariant(index == self.applied_index + 1, f"stream entries apply in order: {index} after {self.applied_index}")
        try:
            # A store that copies the payloads it keeps takes them as views of `data` (entries invariant 5).
            entry = decode_entry(data, payload_views=getattr(self.store, "copies_payloads", False))
        except MalformedEntry as error:
            # Every replica holds the same committed bytes and refuses them alike: report, do not crash.
            self.applied_index = index
            return ApplyResult(index, None, error=ApiError.from_error(error))
        result = _HANDLERS[entry.kind](self, index, entry)
        self.applied_index = index
        if self._expire_owed is not None and self.health is Health.current:  # invariant 6
            self._expire_owed = apply_ops.settle_owed_expire(self.store, self._store_last_seq, self._expire_owed)
        return result

    def _apply_msgs(self, index: int, batch: MsgsBatch) -> ApplyResult:
        expected = self.last_seq + 1
        if batch.first_seq != expected and not self._starts_stream(batch):
            finding = Finding(kind=FindingKind.sequence_mismatch, first=batch.first_seq, last=batch.last_seq,
                              detail=f"the log's position is {self.last_seq}")
            self._advance(batch)
            return ApplyResult(index, EntryKind.MSGS, batch.first_seq, batch.last_seq, finding=self._drift(finding))
        self._advance(batch)
        if self.health is not Health.current:
            return ApplyResult(index, EntryKind.MSGS, batch.first_seq, batch.last_seq)
        store_last = self._store_last_seq
        start = 0
        if store_last >= batch.first_seq and self.replaying:
            overlap = min(store_last, batch.last_seq) - batch.first_seq + 1
            differs = apply_ops.verify_run(self.store, batch.first_seq, batch.msgs[:overlap])
            if differs is not None:
                finding = Finding(kind=FindingKind.content_mismatch, first=differs, last=differs,
                                  detail="a replayed message differs from the stored one")
                return ApplyResult(index, EntryKind.MSGS, batch.first_seq, batch.last_seq, finding=self._drift(finding))
            for position in range(overlap):  # the replayed messages' purges, bounded by their seqs
                if batch.msgs[position][5]:
                    apply_ops.flagged_purge(self.store, self._store_last_seq, batch.msgs[position],
                                            batch.first_seq + position)
            if store_last <= batch.last_seq:  # the crash may have lost this append's limit tombstones
                self.store.update_config(self.store.config)  # (invariant 2): apply the limits again
            start = overlap
        elif store_last != batch.first_seq - 1:
            kind = FindingKind.store_ahead if store_last >= batch.first_seq else FindingKind.store_behind
            finding = Finding(kind=kind, first=batch.first_seq, last=batch.last_seq,
                              detail=f"the store's last sequence is {store_last}")
            return ApplyResult(index, EntryKind.MSGS, batch.first_seq, batch.last_seq, finding=self._drift(finding))
        refused = self._append_from(batch, start) if start < len(batch.msgs) else {}
        return ApplyResult(index, EntryKind.MSGS, batch.first_seq, batch.last_seq, refused=refused or None)

    def _starts_stream(self, batch: MsgsBatch) -> bool:
        """The first message of a stream with `first_seq` configured: lift an untouched store to it."""
        if self.last_seq != 0 or batch.first_seq != max(self.config.first_seq, 1):
            return False
        if self.health is Health.current and self._store_last_seq < batch.first_seq - 1:
            self.store.compact(batch.first_seq)
            self._store_last_seq = batch.first_seq - 1
        self.last_seq = batch.first_seq - 1
        return True

    def _advance(self, batch: MsgsBatch) -> None:
        """Move the group position past `batch`, whatever the store's health (invariant 3)."""
        dedupe, first_seq = self.dedupe, batch.first_seq
        for offset, (_, _, _, timestamp_ns, msg_id, _) in enumerate(batch.msgs):
            if msg_id:
                dedupe.record(msg_id, first_seq + offset, timestamp_ns)
        last = batch.msgs[-1]
        self.last_msg_id, self.last_timestamp_ns = last[4], max(self.last_timestamp_ns, last[3])
        self.last_seq = batch.last_seq
        dedupe.expire(self.last_timestamp_ns)

    def _append_from(self, batch: MsgsBatch, start: int) -> dict[int, ApiError]:
        """Append `batch.msgs[start:]`, split after each rollup message so its purge runs in order."""
        refused: dict[int, ApiError] = {}
        msgs, position = batch.msgs, start
        while position < len(msgs):
            stop = position
            while stop < len(msgs) - 1 and not msgs[stop][5]:
                stop += 1
            first = batch.first_seq + position
            try:
                refused.update(apply_ops.append_run(self.store, first, msgs[position : stop + 1]))
            except JsraftError as error:  # a sequence refusal: our record of the store's position is wrong
                self._drift(Finding(kind=FindingKind.sequence_mismatch, first=first, last=batch.last_seq,
                                    detail=str(error)))
                return refused
            self._store_last_seq = batch.first_seq + stop
            if msgs[stop][5] and batch.first_seq + stop not in refused:
                apply_ops.flagged_purge(self.store, self._store_last_seq, msgs[stop], batch.first_seq + stop)
            position = stop + 1
        return refused

    def _apply_delete(self, index: int, entry: DeleteEntry) -> ApplyResult:
        if self.health is not Health.current:
            return ApplyResult(index, EntryKind.DELETE)
        error = apply_ops.delete(self.store, entry.seq, erase=entry.erase)
        return ApplyResult(index, EntryKind.DELETE, entry.seq, entry.seq, removed=int(error is None), error=error)

    def _apply_purge(self, index: int, entry: PurgeEntry) -> ApplyResult:
        # Purging every subject up to a sequence past the end moves the stream's next sequence there, as
        # in nats-server (`Compact`): the group position moves with it, whatever the store's health.
        moves_last = entry.subject in (None, ">") and entry.seq is not None and entry.seq > self.last_seq + 1
        if moves_last:
            self.last_seq = entry.seq - 1
        if self.health is not Health.current:
            return ApplyResult(index, EntryKind.PURGE)
        try:
            removed = apply_ops.purge_bounded(self.store, self._store_last_seq, entry.subject, entry.seq,
                                              entry.keep, entry.last_seq)
        except JsraftError as error:
            return ApplyResult(index, EntryKind.PURGE, error=ApiError.from_error(error))
        if moves_last and self._store_last_seq < self.last_seq:
            self._store_last_seq = self.last_seq
        return ApplyResult(index, EntryKind.PURGE, removed=removed)

    def _apply_expire(self, index: int, entry: ExpireEntry) -> ApplyResult:
        self.last_expire_cutoff_ns = max(self.last_expire_cutoff_ns, entry.cutoff_ns)
        if self.health is not Health.current:
            return ApplyResult(index, EntryKind.EXPIRE)
        removed, self._expire_owed = apply_ops.expire_entry(self.store, self._store_last_seq, entry.cutoff_ns,
                                                            entry.up_to_seq)
        return ApplyResult(index, EntryKind.EXPIRE, removed=removed)

    def _apply_config(self, index: int, entry: ConfigEntry) -> ApplyResult:
        if entry.meta_index and entry.meta_index <= self.config_meta_index:
            return ApplyResult(index, EntryKind.CONFIG)  # already in force, or superseded: never go back
        try:
            config, raw = parse_stream_config(entry.raw, expected_name=self.config.name)
        except JsraftError as error:
            return ApplyResult(index, EntryKind.CONFIG, error=update_failed(error.description))
        self.config, self.raw_config = config, raw
        self.config_meta_index = max(self.config_meta_index, entry.meta_index)
        self.dedupe.window_ns = config.duplicate_window
        self.dedupe.expire(self.last_timestamp_ns)
        if self.health is Health.current:
            # A store holding later entries' messages has this entry's limits applied already (invariant 2).
            ahead = self.replaying and self._store_last_seq > self.last_seq
            self.store.update_config(store_config_for(config, self.store.config), enforce_limits=not ahead)
        return ApplyResult(index, EntryKind.CONFIG)

    def _apply_audit(self, index: int, entry: AuditEntry) -> ApplyResult:
        self.last_audit_id = max(self.last_audit_id, entry.audit_id)
        state = self.store.state()
        report = AuditReport(index=index, audit_id=entry.audit_id, first_seq=state.first_seq,
                             last_seq=state.last_seq, msgs=state.msgs, bytes=state.bytes, digest=state.digest,
                             health=self.health, faults=len(self.store.faults()))
        self._audits[index] = report
        while len(self._audits) > _AUDIT_REPORTS_MAX:
            self._audits.popitem(last=False)
        return ApplyResult(index, EntryKind.AUDIT, audit=report)

    def _apply_consumer(self, index: int, entry: ConsumerEntry) -> ApplyResult:
        return ApplyResult(index, EntryKind.CONSUMER, consumer_body=entry.body)

    def remove_for_retention(self, index: int, seqs: Iterable[int]) -> int:
        """Delete `seqs`, unneeded by interest / work-queue retention once the entry at `index` (just applied)
        took effect: the same messages at the same index on every replica; like DELETE, none unless current."""
        invariant(index == self.applied_index, f"retention removes at the applied index, not {index}")
        if self.health is not Health.current:
            return 0
        return sum(1 for seq in seqs if self.store.delete(seq))

    # --- Health ----------------------------------------------------------------------------------

    def _drift(self, finding: Finding, health: Health = Health.drifted) -> Finding:
        self.health = health
        self.note(finding)
        return finding

    def note(self, finding: Finding) -> None:
        self.findings.append(finding)
        del self.findings[:-_FINDINGS_MAX]

    def mark_drifted(self, finding: Finding, health: Health = Health.drifted) -> None:
        """An audit found the store disagreeing with the majority (`repairing`: a memory store restarted empty)."""
        self._drift(finding, health)

    @property
    def can_lead(self) -> bool:
        """A replica serves as leader (and as a catch-up source) only while current and fault-free."""
        return self.health is Health.current and not self.store.faults()

    def audit_report(self, index: int) -> AuditReport:
        """The state tuple this replica computed when it applied the AUDIT entry at `index`."""
        report = self._audits.get(index)
        invariant(report is not None, f"no audit applied at index {index} is retained")
        return report

    # --- Snapshots, recovery and repair -----------------------------------------------------------

    def snapshot(self, extra: bytes = b"") -> bytes:
        """The stream snapshot at `applied_index`. Refused unless the replica is current and fault-free:
        a snapshot of a store that disagrees with the group would spread the disagreement."""
        if not self.can_lead:
            raise StreamNotHealthy(f"stream replica is {self.health} with {len(self.store.faults())} faults")
        state = self.store.state()
        if state.last_seq != self.last_seq and not self.replaying:
            self._drift(Finding(kind=FindingKind.sequence_mismatch, first=state.last_seq, last=self.last_seq,
                                detail="the store's last sequence is not the log's"))
            raise StreamNotHealthy("stream replica's store disagrees with its log")
        try:
            group = group_state_of(self.store, state)
        except DamagedSequence as error:  # found damaged while reading the deleted ranges: now a listed fault
            raise StreamNotHealthy(f"stream replica's store is damaged at sequence {error.seq}") from error
        snapshot = StreamSnapshot(
            applied_index=self.applied_index, group=group, raw_config=self.raw_config,
            last_msg_id=self.last_msg_id, last_timestamp_ns=self.last_timestamp_ns,
            last_audit_id=self.last_audit_id, dedupe=tuple(self.dedupe.items()), extra=extra,
            config_meta_index=self.config_meta_index,
        )
        return encode_snapshot(snapshot)

    def restore(self, data: bytes, *, recovering: bool = False) -> RepairPlan:
        """Install a stream snapshot and return the plan that brings the local store to its state.

        `recovering`: the snapshot is this replica's own, read at startup; the store may already hold
        entries applied after it, which the WAL replay verifies (drift invariant 2). Otherwise the
        snapshot came from the leader (Raft InstallSnapshot or a drift resync) and is the full truth.
        """
        snapshot = decode_snapshot(data)
        if not recovering and snapshot.applied_index < self.applied_index:
            # The leader had not applied as far as this replica yet: ask again rather than move back.
            raise StaleSnapshot(f"snapshot at {snapshot.applied_index} is behind this replica's {self.applied_index}")
        config, raw = parse_stream_config(snapshot.raw_config) if snapshot.raw_config else (self.config, self.raw_config)
        self.config, self.raw_config = config, raw
        self.config_meta_index = snapshot.config_meta_index
        self.applied_index, self.last_seq = snapshot.applied_index, snapshot.group.last_seq
        self.last_msg_id, self.last_timestamp_ns = snapshot.last_msg_id, snapshot.last_timestamp_ns
        self.last_audit_id = snapshot.last_audit_id
        self.dedupe = DedupeWindow.from_items(config.duplicate_window, snapshot.dedupe)
        self.snapshot_extra, self._expire_owed = snapshot.extra, None  # the snapshot's state is the truth
        if recovering:  # the store may be ahead: the replay applies limits at their entries (invariant 2)
            self.store.update_config(store_config_for(config, self.store.config), enforce_limits=False)
        plan = self.plan_against(snapshot.group, store_may_be_ahead=recovering)
        self.replaying = recovering
        if plan.is_empty:
            self.finish_repair()  # the store already holds the group's state (or is ahead: the replay checks)
            return plan
        self.health = Health.repairing
        for finding in plan.findings:
            self.note(finding)
        return plan

    def plan_against(self, group: GroupState, *, store_may_be_ahead: bool = False) -> RepairPlan:
        """Compare the store with `group` now (drift.plan_repair) and re-read the store's position."""
        state = self.store.state()
        self._store_last_seq = state.last_seq
        return plan_repair(state, self.store.faults(), self.store.digest_ranges(), group,
                           store_may_be_ahead=store_may_be_ahead)

    def replace_store(self, store: StreamStore) -> None:
        """Adopt a fresh store (a repair that needs one: the old store cut its head beyond the group's)."""
        self.store = store
        self._store_last_seq = store.state().last_seq

    def store_moved(self, state: StoreState | None = None) -> None:
        """The repair changed the store's position: re-read it."""
        self._store_last_seq = (state or self.store.state()).last_seq

    def finish_repair(self) -> None:
        """A repair (catch-up) brought the store to the group state: the replica is current again."""
        self.store_moved()
        invariant(self.replaying or self._store_last_seq == self.last_seq,
                  "a repaired store is at the log's last sequence")
        wanted = store_config_for(self.config, self.store.config)
        if wanted != self.store.config:  # a repair's lifted limits, or CONFIG entries applied meanwhile
            # Before a replay the store may be ahead, under later limits: the replay applies them (inv. 2).
            self.store.update_config(wanted, enforce_limits=not self.replaying)
        self.health = Health.current

    def finish_recovery(self) -> list[Finding]:
        """The WAL replay after a restart is done: apply the last rows of the reactions table. A store
        still ahead of the log is truncated back to it (DESIGN §8: those messages came from entries this
        replica no longer holds; the log re-delivers them). Returns what was found; the runtime should ask
        the leader for an AUDIT now, which settles the rest (digest, head)."""
        self.replaying = False
        if self.health is not Health.current:
            return []
        self.store_moved()
        if self._store_last_seq <= self.last_seq:
            return []
        finding = Finding(kind=FindingKind.store_ahead, first=self.last_seq + 1, last=self._store_last_seq)
        try:
            self.store.truncate(self.last_seq)
        except JsraftError as error:  # nothing at or below the log's last: a repair must replace the store
            return [self._drift(attrs.evolve(finding, detail=str(error)))]
        self.store_moved()
        self.note(finding)
        return [finding]


_HANDLERS = {
    EntryKind.MSGS: StreamStateMachine._apply_msgs,
    EntryKind.DELETE: StreamStateMachine._apply_delete,
    EntryKind.PURGE: StreamStateMachine._apply_purge,
    EntryKind.EXPIRE: StreamStateMachine._apply_expire,
    EntryKind.CONFIG: StreamStateMachine._apply_config,
    EntryKind.AUDIT: StreamStateMachine._apply_audit,
    EntryKind.CONSUMER: StreamStateMachine._apply_consumer,
}
