"""`StreamLeader`: the stream leader's decisions before anything is proposed (layer L3).

Owns: accepting or rejecting publishes (DESIGN §2 step 2) and coalescing the accepted ones into MSGS
entries with explicit sequences (step 3); the leader's other proposals: DELETE, PURGE (stamped with
the stream's position), CONFIG, EXPIRE from `max_age` and DELETE for messages whose `Nats-TTL` passed
(`ttl_due`, from `stream.ttl.TtlSchedule`; replicas never expire on their own clocks), and the AUDIT
schedule.

Checks per publish, in nats-server's order: sealed (10109), sizes (10097 headers, 10054 message and
`max_msg_size`), subject (then `subject_transform` applied: the rest sees the stored subject), headers framing, duplicate `Nats-Msg-Id` within `duplicate_window` (answered
with the original's seq), `Nats-Expected-Stream` (10060), `-Last-Subject-Sequence` (10071),
`-Last-Sequence` (10071), `-Last-Msg-Id` (10070), `Nats-Rollup` (10111), `Nats-TTL` (10166 when the
stream does not allow TTLs, 10165 when invalid; ADR-43), `discard: new` limits (10077).

Invariants:
  1. Every check counts in-flight proposals (`InFlight`): two publishes expecting the same last sequence
     cannot both be accepted, even before either commits.
  2. Accepted messages get `last_seq + 1 ...` in arrival order; a rejected one consumes no sequence.
  3. Timestamps never go backwards in the log: each is `max(now, last assigned)`. Expiry and the dedupe
     window age by them, so they must be ordered.
  4. A stored record found damaged while a check reads it (the `discard: new` dry run sizes the message
     a publish would evict) rejects that publish as unavailable (10008) instead of escaping `decide`: the
     store now lists the fault, the replica stops leading and is repaired, and the publish lost nothing.
  5. Construct a `StreamLeader` only once the machine has applied every entry of earlier terms (the new
     term's no-op committed and applied); drop it when leadership is lost. Its in-flight state is then
     either applied or gone with the term.
  6. No audit is proposed, requested or not, while the caller says the group is `alone` (its only voter
     is this one, no learner, as its membership is at that call) and the stream was never written to (last
     sequence 0, empty state, no fault): a verdict is a majority of the voters' reports, a single voter is
     its own, so the audit could only agree. It cost each new R1 stream a Ready cycle at its create.

Imports: L0, L1 (`subjects`, `jsapi`), `stream` below it; no clock: `now_ns` is an argument.
Reference: nats-server `server/stream.go` (`processJetStreamMsg`), `server/jetstream_cluster.go`
(`processClusteredInboundMsg`); DESIGN.md §2, §8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from jsraft import limits, subjects
from jsraft.errors import DamagedSequence, JsraftError, NoMessageFound
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.jsapi.subject_transform import stored_subject
from jsraft.store.base import StoredMsg, msg_size
from jsraft.store.limits_check import check_purge_args
from jsraft.stream import batches, counters, entries, schedules
from jsraft.stream import headers as hdr
from jsraft.stream import markers
from jsraft.stream import ttl as ttllib
from jsraft.stream.entry_builder import EntryBuilder
from jsraft.stream.inflight import InFlight, Proposal
from jsraft.stream.leader_checks import DiscardNew, check_expected, rollup_flags, subject_last_seq
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.results import Health
from jsraft.stream.outcomes import (
    ApiError, PubOutcome, bad_request, delete_failed, header_too_large, message_too_large, not_available,
    purge_failed, rejected, sealed, update_failed,
)

AUDIT_INTERVAL_NS_DEFAULT = 5_000_000_000  # DESIGN §8: "every few seconds"
_NEVER_WRITTEN = (0, 0, 0, 0, 0, 0)  # (machine last_seq, then first_seq, last_seq, msgs, bytes, digest): an untouched stream


class Decision(NamedTuple):
    entries: list[bytes]  # MSGS entries to propose, in order (empty when nothing was accepted)
    outcomes: list[PubOutcome]  # one per publish, in the order given


class LeaderProposal(NamedTuple):
    entry: bytes | None
    error: ApiError | None = None


class StreamLeader:
    def __init__(self, machine: StreamStateMachine, *, audit_interval_ns: int = AUDIT_INTERVAL_NS_DEFAULT,
                 batch_budget: batches.NodeBudget | None = None) -> None:
        self.machine = machine
        self.inflight = InFlight()
        self.audit_interval_ns = audit_interval_ns
        self._next_audit_id = machine.last_audit_id + 1
        self._last_audit_ns: int | None = None  # None: audit at once (a new leader follows a recovery)
        self._audited: tuple[int, ...] | None = None  # what the last audit proposed here covered
        self._expire_cutoff_ns = 0  # cut-off of the last EXPIRE proposed
        self.ttl_schedule = ttllib.TtlSchedule()  # ADR-43: rebuilt from the store by each new leader
        if machine.config.allow_msg_ttl:
            self.ttl_schedule.rebuild(machine.store)
        self.schedule_book = schedules.ScheduleBook()  # ADR-51: likewise
        self.batch_stager = batches.BatchStager(batch_budget)  # ADR-50: open atomic batches, gone with the leadership
        if machine.config.allow_msg_schedules:
            self.schedule_book.rebuild(machine.store)

    @property
    def last_seq(self) -> int:
        """The stream's last sequence counting in-flight proposals."""
        self.inflight.prune(self.machine.last_seq)
        last_seq = max(self.machine.last_seq, self.inflight.last_seq)
        # A stream configured with `first_seq` numbers its first message from it.
        return last_seq or max(self.machine.config.first_seq - 1, 0)

    @property
    def _last_msg_id(self) -> str:
        pending = self.inflight.last_message()
        return pending.last_msg_id if pending is not None else self.machine.last_msg_id

    # --- Publishes -------------------------------------------------------------------------------

    def decide(self, publishes: Sequence[tuple[str, bytes, bytes]], now_ns: int) -> Decision:
        """Decide `(subject, headers, payload)` publishes that arrived together; coalesce the accepted."""
        last_seq = self.last_seq  # prunes what has applied
        pending = self.inflight.last_message()
        timestamp_ns = max(now_ns, self.machine.last_timestamp_ns, pending.timestamp_ns if pending else 0)
        batch = EntryBuilder(timestamp_ns)
        proposal = self.inflight.open(last_seq, timestamp_ns)
        limits_check = DiscardNew(self.machine.config, self.machine.store, self.inflight)
        outcomes: list[PubOutcome] = []
        decided: list[bytes] = []
        for subject, headers, payload in publishes:
            outcome = self._admit(subject, headers, payload, now_ns, proposal, batch, limits_check)
            if isinstance(outcome, tuple) and not isinstance(outcome, PubOutcome):  # an atomic batch's commit
                batch.flush()
                decided += batch.entries
                self.inflight.drop_if_empty(proposal)
                outcome, committed = self._commit_batch(*outcome, timestamp_ns, now_ns)
                decided += committed
                batch = EntryBuilder(timestamp_ns)
                proposal = self.inflight.open(self.last_seq, timestamp_ns)
            outcomes.append(outcome)
        batch.flush()
        self.inflight.drop_if_empty(proposal)
        return Decision(decided + batch.entries, outcomes)

    def _commit_batch(self, batch_id: str, msgs: list[tuple[str, bytes, bytes]], timestamp_ns: int,
                      now_ns: int) -> tuple[PubOutcome, list[bytes]]:
        """An atomic batch's messages, checked in order as one decision into one entry, or refused whole
        with the first refusal (`stream.batches` invariants 1 and 3)."""
        proposal = self.inflight.open(self.last_seq, timestamp_ns)
        builder = EntryBuilder(timestamp_ns, atomic=True)
        limits_check = DiscardNew(self.machine.config, self.machine.store, self.inflight)
        written: set[str] = set()
        for position, (subject, headers, payload) in enumerate(msgs):
            found = hdr.parse_headers(headers)  # parsed once already when it was staged
            msg_id = found.get(hdr.MSG_ID, "")
            conflict = batches.expected_conflict(found, subject, position, written)
            written.add(subject)
            if hdr.EXPECTED_LAST_MSG_ID in found:
                outcome = rejected(batches.unsupported_header(hdr.EXPECTED_LAST_MSG_ID))
            elif conflict is not None:
                outcome = rejected(conflict)
            elif msg_id and self._duplicate(msg_id, now_ns) is not None:
                outcome = rejected(batches.duplicate_message())
            else:
                outcome = self._admit_checked(subject, headers, payload, found, msg_id, proposal, builder, limits_check)
            if outcome.error is not None:
                self.inflight.drop(proposal)
                return outcome, []
        builder.flush()
        return PubOutcome(proposal.last_seq, batch=(batch_id, len(msgs))), builder.entries

    def _admit(self, subject: str, headers: bytes, payload: bytes, now_ns: int, proposal: Proposal,
               batch: EntryBuilder, limits_check: DiscardNew) -> PubOutcome:
        config = self.machine.config
        if self.machine.health is not Health.current:
            return rejected(not_available())
        if config.sealed:
            return rejected(sealed())
        if len(headers) > limits.headers_bytes_max:
            return rejected(header_too_large())
        size = len(headers) + len(payload)
        if len(payload) > limits.payload_bytes_max or 0 <= config.max_msg_size < size:
            return rejected(message_too_large())
        try:
            subjects.validate_published(subject)  # wildcard tokens stored literally, as nats-server
            if config.subject_transform is not None:  # stored (and checked) under its transformed subject
                subject = stored_subject(config.subject_transform.src, config.subject_transform.dest, subject)
            found = hdr.parse_headers(headers)
        except JsraftError as error:
            return rejected(bad_request(error.description))
        if batches.BATCH_ID in found:  # an atomic batch's message: staged, or its commit (`stream.batches`)
            taken = self.batch_stager.take(found, (subject, headers, payload), config.allow_atomic, now_ns)
            if taken is None:
                return PubOutcome(0, staged=True)
            return rejected(taken) if isinstance(taken, ApiError) else taken
        msg_id = found.get(hdr.MSG_ID, "")
        if msg_id:
            duplicate = self._duplicate(msg_id, now_ns)
            if duplicate is not None:
                return duplicate
        return self._admit_checked(subject, headers, payload, found, msg_id, proposal, batch, limits_check)

    def _admit_checked(self, subject: str, headers: bytes, payload: bytes, found: dict[str, str], msg_id: str,
                       proposal: Proposal, batch: EntryBuilder, limits_check: DiscardNew) -> PubOutcome:
        machine = self.machine
        last_seq = max(machine.last_seq, proposal.last_seq)
        flags = ttl_s = 0
        incr = schedule_ns = None
        if found:  # most publishes carry no `Nats-` header: skip the header checks entirely
            incr = counters.increment(found, payload, machine.config.allow_msg_counter)
            if isinstance(incr, ApiError):
                return rejected(incr)
            try:
                error = check_expected(found, machine.config.name, subject, last_seq, self._last_msg_id,
                                       lambda f: subject_last_seq(machine.store, self.inflight, f))
            except JsraftError as bad:
                return rejected(bad_request(bad.description))
            if error is not None:
                return rejected(error)
            schedule_ns = schedules.check_schedule(found, subject, machine.config)
            if isinstance(schedule_ns, ApiError):
                return rejected(schedule_ns)
            if schedule_ns is not None:  # a schedule rolls up its subject (`stream.schedules`)
                headers, found = schedules.with_rollup(headers, found), {**found, hdr.ROLLUP: hdr.ROLLUP_SUBJECT}
            checked = rollup_flags(found, machine.config)
            if isinstance(checked, ApiError):
                return rejected(checked)
            flags = checked or schedules.next_flags(found)
            ttl_s = ttllib.message_ttl(found, machine.config.allow_msg_ttl)
            if isinstance(ttl_s, ApiError):
                return rejected(ttl_s)
            floor = markers.ttl_floor(ttl_s, machine.config.subject_delete_marker_ttl,
                                      machine.config.max_msgs_per_subject)
            if floor != ttl_s:
                ttl_s, headers = floor, markers.with_ttl(headers, floor)
        counted = None
        if machine.config.allow_msg_counter:
            counted = counters.count(self.inflight, machine.store, machine.config, subject, incr, headers)
            if isinstance(counted, ApiError):
                return rejected(counted)
            headers, payload = counted[0], counted[1]
        size = msg_size(len(subject.encode()), len(headers), len(payload))
        try:
            net = limits_check.admit(subject, size) if limits_check.active else (1, size)
        except DamagedSequence:  # invariant 4
            return rejected(not_available())
        if isinstance(net, ApiError):
            return rejected(net)
        seq = last_seq + 1
        proposal.add(seq, subject, size, msg_id, net[0], net[1])
        batch.add(seq, subject, headers, payload, msg_id, flags)
        if ttl_s > 0:
            self.ttl_schedule.add(seq, batch.timestamp_ns, ttl_s)
        if schedule_ns is not None:
            self.schedule_book.add(subject, seq, schedule_ns)
        if counted is not None:
            proposal.counter_totals[subject] = counted[2]
            return PubOutcome(seq, value=str(counted[2].total))
        return PubOutcome(seq)

    def _duplicate(self, msg_id: str, now_ns: int) -> PubOutcome | None:
        if len(msg_id.encode()) > entries.MSG_ID_BYTES_MAX:
            return rejected(bad_request(f"{hdr.MSG_ID} is longer than {entries.MSG_ID_BYTES_MAX} bytes"))
        seq = self.inflight.msg_id_seq(msg_id)
        if seq:
            return PubOutcome(seq, duplicate=True, pending=True)
        held = self.machine.dedupe.get(msg_id)
        if held is not None and now_ns - held[1] <= self.machine.config.duplicate_window:
            return PubOutcome(held[0], duplicate=True)
        return None

    # --- Other proposals ---------------------------------------------------------------------------

    def propose_delete(self, seq: int, *, erase: bool = False) -> LeaderProposal:
        config = self.machine.config
        if config.sealed:
            return LeaderProposal(None, sealed())
        if config.deny_delete:
            return LeaderProposal(None, delete_failed("message delete not permitted"))
        if not isinstance(seq, int) or not 1 <= seq <= self.last_seq:
            return LeaderProposal(None, delete_failed("no message found"))
        return LeaderProposal(entries.encode_delete(seq, erase))

    def propose_purge(self, subject: str | None = None, seq: int | None = None,
                      keep: int | None = None) -> LeaderProposal:
        """A purge request (`$JS.API.STREAM.PURGE`: `filter`, `seq`, `keep`), stamped with the stream's
        position so that replaying it never touches later messages."""
        config = self.machine.config
        if config.sealed:
            return LeaderProposal(None, sealed())
        if config.deny_purge:
            return LeaderProposal(None, purge_failed("stream purge not permitted"))
        try:
            subject, seq, keep = check_purge_args(subject, seq, keep)
        except JsraftError as error:
            return LeaderProposal(None, bad_request(error.description))
        last_seq = self.last_seq
        if subject is None and seq is not None and seq > last_seq + 1:
            # The purge moves the stream's next sequence: later publishes must be numbered past it.
            self.inflight.open(seq - 1, 0)
        return LeaderProposal(entries.encode_purge(subject, seq, keep, last_seq))

    def propose_config(self, raw: bytes, meta_index: int = 0) -> LeaderProposal:
        """A stream update the meta layer accepted at `meta_index`, applied by the group at its index."""
        try:
            parse_stream_config(raw, expected_name=self.machine.config.name)
        except JsraftError as error:
            return LeaderProposal(None, update_failed(error.description))
        return LeaderProposal(entries.encode_config(raw, meta_index))

    def expire_due(self, now_ns: int) -> bytes | None:
        """`expiry_due`'s EXPIRE entry alone, for a caller serving streams without subject delete markers
        (on a stream with them, its markers would be dropped: use `expiry_due`)."""
        due = self.expiry_due(now_ns)
        return due[-1] if due else None

    def expiry_due(self, now_ns: int) -> list[bytes]:
        """An EXPIRE entry when the oldest message is older than `max_age`, unless one is in flight; on
        a stream with subject delete markers, first the markers that replace the subjects' last
        messages among those, and an EXPIRE bounded to the messages looked at (`stream.markers`)."""
        max_age = self.machine.config.max_age
        if max_age <= 0 or self._expire_cutoff_ns > self.machine.last_expire_cutoff_ns:
            return []
        state = self.machine.store.state()
        cutoff_ns = now_ns - max_age
        if not state.msgs or state.first_timestamp_ns >= cutoff_ns:
            return []
        self._expire_cutoff_ns = cutoff_ns
        if not self.machine.config.subject_delete_marker_ttl:
            return [entries.encode_expire(cutoff_ns, self.last_seq + 1)]
        expired, up_to_seq = markers.expired_head(self.machine.store, cutoff_ns)
        out: list[bytes] = []
        for msg in expired:
            out.extend(self._marker_for(msg, now_ns))
        out.append(entries.encode_expire(cutoff_ns, up_to_seq))
        return out

    def schedules_due(self, now_ns: int) -> list[bytes]:
        """MSGS entries of the schedules due at `now_ns` (leader clock), each decided as a publish of the
        fired message (`stream.schedules`: its purge flag removes the schedule with it, invariant 1)."""
        book, out = self.schedule_book, []
        for subject, _, message in book.due(self.machine.store, self.machine.last_seq, now_ns):
            decision = self.decide([message], now_ns)
            outcome = decision.outcomes[0]
            if outcome.error is not None or outcome.duplicate or not decision.entries:
                book.refused(subject, now_ns)
                continue
            book.fired(subject, outcome.seq)
            out.extend(decision.entries)
        return out

    def ttl_due(self, now_ns: int) -> list[bytes]:
        """DELETE entries for the stored messages whose `Nats-TTL` has passed at `now_ns` (leader clock),
        or, on a stream with subject delete markers, a marker for a subject's last message.

        Not `propose_delete`: expiry removes messages even from a `deny_delete` stream (a KV bucket is
        one), as nats-server's TTL expiry does."""
        if not self.machine.config.allow_msg_ttl:
            return []
        due = self.ttl_schedule.due(self.machine.store, now_ns)
        if not self.machine.config.subject_delete_marker_ttl:
            return [entries.encode_delete(seq) for seq in due]
        out: list[bytes] = []
        for seq in due:
            try:
                marker = self._marker_for(self.machine.store.load(seq), now_ns)
            except (NoMessageFound, DamagedSequence):
                continue  # gone meanwhile, or a fault the repair settles: nothing to expire now
            out.extend(marker or [entries.encode_delete(seq)])
        return out

    def _marker_for(self, msg: StoredMsg, now_ns: int) -> list[bytes]:
        """The MSGS entries of a subject delete marker replacing expiring `msg`, or [] when `msg` is not
        its subject's last message, is a marker itself, or the marker is refused (markers invariant 2)."""
        if markers.is_marker(msg.headers):
            return []
        if subject_last_seq(self.machine.store, self.inflight, msg.subject) != msg.seq:
            return []
        ttl_s = markers.marker_ttl_s(self.machine.config.subject_delete_marker_ttl)
        decision = self.decide([(msg.subject, markers.marker_headers(ttl_s), b"")], now_ns)
        return decision.entries if decision.outcomes[0].error is None else []

    def request_audit(self) -> None:
        """Audit at the next `audit_due` (after a replica recovered or was repaired)."""
        self._last_audit_ns = None

    def audit_owed(self) -> bool:
        """Whether the stream changed since the last audit proposed here, so a periodic audit is still to
        come: the task that proposes it must not sleep through the group's quiescence meanwhile."""
        return (self.machine.last_seq, *self.machine.store.state().agreement_key()) != self._audited

    def audit_due(self, now_ns: int, *, alone: bool = False) -> bytes | None:
        """An AUDIT entry to propose now, or None. Periodic audits skip a stream whose state tuple (and
        last sequence) did not change since the last audit proposed here: every replica's tuple is
        computed from the entries it applied, so with none applied there is nothing new to compare — an
        idle stream would otherwise cost an entry and an fsync on every replica each interval. A
        requested audit (after a recovery, a repair, a new leader) always runs, unless `alone` (invariant 6)."""
        if self._last_audit_ns is not None and now_ns - self._last_audit_ns < self.audit_interval_ns:
            return None
        covered = (self.machine.last_seq, *self.machine.store.state().agreement_key())
        if alone and covered == _NEVER_WRITTEN and not self.machine.store.faults():
            self._last_audit_ns, self._audited = now_ns, covered  # invariant 6: as if audited now
            return None
        if self._last_audit_ns is not None and covered == self._audited:
            self._last_audit_ns = now_ns
            return None
        self._last_audit_ns, self._audited = now_ns, covered
        audit_id = max(self._next_audit_id, self.machine.last_audit_id + 1)
        self._next_audit_id = audit_id + 1
        return entries.encode_audit(audit_id)
