"""Message schedules (ADR-51 at nats-server 2.12, JetStream API level 2): delayed messages (layer L3).

Owns: the publish-side checks of a schedule (`check_schedule`: `Nats-Schedule: @at <RFC3339>`,
`Nats-Schedule-Target`, `Nats-Schedule-TTL`, the rollup a schedule implies), the message a schedule fires
(`fired_message`), and `ScheduleBook`, the stream leader's record of the schedules stored, from which it
fires them when due.

A schedule is a message stored on its own subject (a `Nats-Rollup: sub` is added: a newer schedule on
the subject replaces the older). When its time comes the leader publishes, through the log like any
publish, a copy of it to the target subject — its headers without the schedule's, `Nats-Expected-*`,
`Nats-Msg-Id`, `Nats-TTL` and `Nats-Rollup`, plus `Nats-Scheduler: <schedule subject>`,
`Nats-Schedule-Next: purge` and `Nats-TTL: <Nats-Schedule-TTL>` when one was given — flagged
`FLAG_SCHEDULE_PURGE`, so that every replica, applying it, purges the schedule's subject up to it.

Invariants:
  1. Only the leader fires, by its clock; replicas only apply (DESIGN §6). The fired message and the
     purge of its schedule are one entry: a schedule fires at most once across leader changes and
     restarts — either the entry committed and the schedule is gone from every store, or it did not and a
     later leader (whose book is rebuilt from its store, `rebuild`) fires it again.
  2. While a fired message is in flight its schedule is not fired again (`ScheduleBook.inflight`); a
     firing that was refused (limits, a stream not current) is retried after `RETRY_NS`.
  3. Before firing, the message stored at the schedule's sequence is read back and its schedule checked
     again: one no longer stored (purged, deleted, replaced) is forgotten, never fired.
  4. nats-server 2.12 accepts only `@at` schedules: any other pattern is refused (10189; 10188 on a
     stream without schedules). `@every` and cron schedules came with 2.14 (API level 4).
  5. An `@at` naming Go's zero time (0001-01-01T00:00:00Z, in any offset) is no schedule, as nats-server
     2.12's `getMessageSchedule(...).IsZero()` reads it: the message is stored as a plain one (no rollup
     added, never fired), even on a stream without schedules.

Imports: L0, L2 (`store` values), `stream.headers`, `stream.ttl`, `stream.outcomes`; no clock.
Reference: ADR-51; nats-server v2.12 `server/scheduler.go`, `server/stream.go` (`getMessageSchedule`,
`processJetStreamMsgWithRollup`).
"""

from __future__ import annotations

import calendar
import heapq
import re

from typing import TYPE_CHECKING

from jsraft import subjects
from jsraft.errors import DamagedSequence, JsraftError, NoMessageFound
from jsraft.store.base import StreamStore
from jsraft.stream.entries import FLAG_SCHEDULE_PURGE
from jsraft.stream import headers as hdr
from jsraft.stream import ttl as ttllib
from jsraft.stream.outcomes import ApiError, ttl_disabled

SCHEDULE = "Nats-Schedule"
SCHEDULE_TARGET = "Nats-Schedule-Target"
SCHEDULE_TTL = "Nats-Schedule-TTL"
SCHEDULER = "Nats-Scheduler"
SCHEDULE_NEXT = "Nats-Schedule-Next"
SCHEDULE_NEXT_PURGE = "purge"
RETRY_NS = 1_000_000_000
ZERO_TIME_NS = calendar.timegm((1, 1, 1, 0, 0, 0)) * 1_000_000_000  # Go's zero time.Time: 0001-01-01T00:00:00Z
FIRES_PER_TURN_MAX = 256
if TYPE_CHECKING:
    from jsraft.jsapi.stream_config import StreamConfig

_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:\d{2})")
_STRIPPED_PREFIXES = (b"nats-schedule-", b"nats-expected-")
_STRIPPED = (b"nats-schedule", b"nats-msg-id", b"nats-ttl", b"nats-rollup")


def schedules_disabled() -> ApiError:
    return ApiError(400, 10188, "message schedules is disabled")


def pattern_invalid() -> ApiError:
    return ApiError(400, 10189, "message schedules pattern is invalid")


def target_invalid() -> ApiError:
    return ApiError(400, 10190, "message schedules target is invalid")


def schedule_ttl_invalid() -> ApiError:
    return ApiError(400, 10191, "message schedules invalid per-message TTL")


def rollup_invalid() -> ApiError:
    return ApiError(400, 10192, "message schedules invalid rollup")


def parse_at(value: str) -> int | None:
    """`@at <RFC3339>` -> its time in ns since the epoch, or None when it is not one (invariant 4): what Go's
    `time.Parse(time.RFC3339, ...)` takes, a fraction after `.` or `,` and year 0000 included."""
    if not value.startswith("@at "):
        return None
    match = _RFC3339.fullmatch(value[4:])
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    # Go takes year 0000 (proleptic Gregorian), Python's calendar does not: count it 400 years (146,097
    # days, a whole Gregorian cycle) later and take the cycle off again.
    shift = 400 if year == 0 else 0
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year + shift, month)[1] and hour < 24
            and minute < 60 and second < 60):
        return None
    fraction = (match.group(7) or "")[:9].ljust(9, "0")
    zone = match.group(8)
    offset_s = 0 if zone == "Z" else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    seconds = calendar.timegm((year + shift, month, day, hour, minute, second)) - offset_s
    seconds -= shift // 400 * 146_097 * 86_400
    return seconds * 1_000_000_000 + int(fraction)


def check_schedule(found: dict[str, str], subject: str, config: "StreamConfig") -> int | None | ApiError:
    """A publish's schedule, in nats-server's order of checks: its due time (ns), None when it has no
    `Nats-Schedule`, or the refusal. A `Nats-Schedule-Next: purge` from a client needs schedules too."""
    allowed = config.allow_msg_schedules
    value = found.get(SCHEDULE)
    due_ns = None
    if value:
        due_ns = parse_at(value)
        if due_ns is None:
            return pattern_invalid() if allowed else schedules_disabled()
        if due_ns == ZERO_TIME_NS:  # invariant 5
            due_ns = None
        elif not allowed:
            return schedules_disabled()
        else:
            refusal = _schedule_refusal(found, subject, config)
            if refusal is not None:
                return refusal
    if found.get(SCHEDULE_NEXT) == SCHEDULE_NEXT_PURGE and not allowed:
        return schedules_disabled()
    return due_ns


def _schedule_refusal(found: dict[str, str], subject: str, config: "StreamConfig") -> ApiError | None:
    """A schedule's TTL, target and rollup checks, in nats-server's order."""
    ttl_value = found.get(SCHEDULE_TTL)
    if ttl_value:
        try:
            ttllib.parse_ttl(ttl_value)
        except ttllib.InvalidTtl:
            return schedule_ttl_invalid()
        if not config.allow_msg_ttl:
            return ttl_disabled()
    if not _valid_target(found.get(SCHEDULE_TARGET, ""), subject, config.subjects):
        return target_invalid()
    rollup = found.get(hdr.ROLLUP)
    if rollup is not None and rollup != hdr.ROLLUP_SUBJECT:
        return rollup_invalid()
    return None


def _valid_target(target: str, subject: str, config_subjects: tuple[str, ...]) -> bool:
    try:
        subjects.validate(target, wildcards=False)
    except JsraftError:
        return False
    if subjects.overlaps(target, subject):
        return False
    return any(subjects.overlaps(stream_subject, target) for stream_subject in config_subjects)


def next_flags(found: dict[str, str]) -> int:
    """The MSGS flag of a message with `Nats-Schedule-Next: purge` (a fired schedule), else 0."""
    return FLAG_SCHEDULE_PURGE if found.get(SCHEDULE_NEXT) == SCHEDULE_NEXT_PURGE else 0


def with_rollup(headers: bytes, found: dict[str, str]) -> bytes:
    """A schedule's headers with `Nats-Rollup: sub` added unless it carries it already."""
    return headers if hdr.ROLLUP in found else hdr.set_header(headers, hdr.ROLLUP, hdr.ROLLUP_SUBJECT)


def fired_message(schedule_subject: str, headers: bytes, payload: bytes) -> tuple[str, bytes, bytes] | None:
    """What a stored schedule publishes when due — `(target, headers, payload)` — or None when the stored
    message is not a valid schedule any more (invariant 3)."""
    try:
        found = hdr.parse_headers(headers)
    except JsraftError:
        return None
    target = found.get(SCHEDULE_TARGET)
    if not target or parse_at(found.get(SCHEDULE, "")) is None:
        return None
    ttl_value = found.get(SCHEDULE_TTL, "")
    kept = []
    for line in headers[:-4].split(b"\r\n")[1:]:
        name = line.split(b":", 1)[0].strip().lower()
        if name in _STRIPPED or name.startswith(_STRIPPED_PREFIXES):
            continue
        kept.append(line)
    added = [f"{SCHEDULER}: {schedule_subject}".encode(), f"{SCHEDULE_NEXT}: {SCHEDULE_NEXT_PURGE}".encode()]
    if ttl_value:
        added.append(f"{hdr.TTL}: {ttl_value}".encode())
    block = b"NATS/1.0\r\n" + b"".join(line + b"\r\n" for line in kept + added) + b"\r\n"
    return target, block, payload


def scheduler_of(headers: bytes) -> str | None:
    """The schedule subject a `Nats-Schedule-Next: purge` message names (`Nats-Scheduler`), or None."""
    try:
        found = hdr.parse_headers(headers)
    except JsraftError:
        return None
    if found.get(SCHEDULE_NEXT) != SCHEDULE_NEXT_PURGE or not found.get(SCHEDULER):
        return None
    try:  # a client may send these headers: an invalid subject purges nothing, it never fails an apply
        subjects.validate(found[SCHEDULER], wildcards=True)
    except JsraftError:
        return None
    return found[SCHEDULER]


class ScheduleBook:
    """The stream leader's schedules: subject -> (seq, due_ns), and a heap of what is due first."""

    def __init__(self) -> None:
        self.by_subject: dict[str, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, str]] = []  # (due_ns, seq, subject); stale rows are skipped
        self.inflight: dict[str, int] = {}  # subject -> seq of its fired message, until that seq applied
        self._retry_ns: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.by_subject)

    def next_due_ns(self) -> int | None:
        """The earliest due time in the book (a stale row's included: looking early costs one look), or
        None when it is empty. What the leader's timer sleeps towards (stream_expiry invariant 4)."""
        return self._heap[0][0] if self._heap else None

    def add(self, subject: str, seq: int, due_ns: int) -> None:
        self.by_subject[subject] = (seq, due_ns)
        self.inflight.pop(subject, None)
        heapq.heappush(self._heap, (due_ns, seq, subject))

    def rebuild(self, store: StreamStore) -> None:
        """Every schedule stored (invariant 1): a new leader's book, from its store alone."""
        state = store.state()
        for seq in range(state.first_seq, state.last_seq + 1) if state.msgs else ():
            try:
                msg = store.load(seq)
            except (NoMessageFound, DamagedSequence):
                continue
            if msg.headers and SCHEDULE.encode() in msg.headers:
                try:
                    due_ns = parse_at(hdr.parse_headers(msg.headers).get(SCHEDULE, ""))
                except JsraftError:
                    continue
                if due_ns is not None and due_ns != ZERO_TIME_NS:  # invariant 5
                    self.add(msg.subject, seq, due_ns)

    def due(self, store: StreamStore, applied_last_seq: int, now_ns: int) -> list[tuple[str, int, tuple[str, bytes, bytes]]]:
        """The schedules due at `now_ns`, not in flight: `(schedule subject, seq, message to publish)`.
        `applied_last_seq` is the machine's: a schedule not applied yet, or whose fired message is not, waits."""
        out: list[tuple[str, int, tuple[str, bytes, bytes]]] = []
        held: list[tuple[int, int, str]] = []
        while self._heap and self._heap[0][0] <= now_ns and len(out) < FIRES_PER_TURN_MAX:
            due_ns, seq, subject = heapq.heappop(self._heap)
            if self.by_subject.get(subject) != (seq, due_ns):
                continue  # replaced by a newer schedule on the subject, or forgotten
            fired_seq = self.inflight.get(subject)
            if fired_seq is not None and fired_seq <= applied_last_seq:
                del self.inflight[subject]  # its fired message applied (or was lost): the store tells which
                fired_seq = None
            if fired_seq is not None or seq > applied_last_seq or self._retry_ns.get(subject, 0) > now_ns:
                held.append((due_ns, seq, subject))
                continue
            fired = self._fired(store, subject, seq)
            if fired is None:
                continue
            out.append((subject, seq, fired))
            held.append((due_ns, seq, subject))  # until its purge applies (or it is retried)
        for row in held:
            heapq.heappush(self._heap, row)
        return out

    def _fired(self, store: StreamStore, subject: str, seq: int) -> tuple[str, bytes, bytes] | None:
        try:
            msg = store.load(seq)
        except (NoMessageFound, DamagedSequence):
            msg = None
        fired = fired_message(subject, msg.headers, msg.payload) if msg is not None and msg.subject == subject else None
        if fired is None:
            self.by_subject.pop(subject, None)
            self.inflight.pop(subject, None)
        return fired

    def fired(self, subject: str, fired_seq: int) -> None:
        """The schedule on `subject` fired as the message decided at `fired_seq` (invariant 2)."""
        self.inflight[subject] = fired_seq

    def refused(self, subject: str, now_ns: int) -> None:
        self._retry_ns[subject] = now_ns + RETRY_NS
