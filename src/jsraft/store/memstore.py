"""`MemStore`: a stream's messages held in memory (layer L2).

Owns: the in-memory `StreamStore`. The rules that do not depend on where bytes live
(`check_message`, `DiscardNewCheck`, `check_purge_args`) are in `limits_check`, shared with `FileStore`.

Semantics every store matches (the parametrized suite in `tests/store/` checks both stores):
  1. A store nothing has happened to reports first_seq = last_seq = 0. With live messages, first_seq
     is the lowest live seq; with none, first_seq = last_seq + 1 (as nats-server reports it).
  2. Limits apply after each message: max_msgs_per_subject first (that subject's oldest goes, under
     either discard policy), then under `discard: old` max_msgs and max_bytes (the oldest go);
     `update_config` applies them likewise to the whole store. Under `discard: new` an append that
     would leave the store above max_msgs or max_bytes, counting the per-subject eviction it causes,
     is refused, as is one to a subject at its limit with `discard_new_per_subject`.
  3. Checks run message by message: seq, subject, timestamp, size (max_msg_size counts headers +
     payload, as nats-server does), then `discard: new` per-subject, max_msgs, max_bytes; the first
     failure refuses the whole batch.
  4. purge: subject None or ">" is every subject; then `seq` is `compact(seq)` and `keep` keeps the
     newest `keep` live messages. With a filter, `seq` removes matching messages below `seq` and `keep`
     keeps the filter's newest `keep`. 0 means "not given"; `seq` with `keep` is refused.
  5. expire removes from the head while timestamp < cutoff, stopping at the first that is not.
     first/last timestamps are those of the first/last live message (0 when there is none).

Invariants (`scan` re-checks them, crashing through `invariant()`; memory is not a fault domain, so
`faults()` is always empty and `repair`/`repair_deleted` are refused):
  1. Every stored record verifies and matches its seq, timestamp and CRC.
  2. Bytes, digest, per-range digests and the subject index equal a rebuild from the messages.

Imports: L0, L1 (`codec.records`, `subjects`), `store.base`; no clock, no randomness.
Reference: DESIGN.md §6; nats-server `server/memstore.go`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from jsraft import subjects
from jsraft.codec.records import (
    HEADER_BYTES, Kind, decode_message_body, encode_message, message_digest, read_record,
)
from jsraft.errors import (
    BadRequest, CorruptRecord, InvalidConfig, NoMessageFound, SequenceOutOfOrder, StoreClosed,
    invariant,
)
from jsraft.store.limits_check import DiscardNewCheck, check_message, check_purge_args
from jsraft.store.base import (
    DIGEST_RANGE_SEQS, UNLIMITED, Discard, Fault, StoreConfig, StoredMsg, StoreState, msg_size,
)

_U64_MAX = (1 << 64) - 1


class _Entry:
    """One live message: its canonical `MSG` record, which the digest and `scan` are defined on."""

    __slots__ = ("subject", "record", "crc", "size", "timestamp_ns")

    def __init__(self, seq: int, subject: str, subject_bytes: bytes, headers: bytes, payload: bytes, ts: int):
        self.subject, self.timestamp_ns = subject, ts
        self.record, self.crc = encode_message(seq, ts, subject_bytes, headers, payload)
        self.size = msg_size(len(subject_bytes), len(headers), len(payload))


class MemStore:
    """A `StreamStore` in memory. See the module docstring for its semantics and invariants."""

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = (config if config is not None else StoreConfig()).validate()
        # Ordered by seq (appends add the highest), so first/last and removal anywhere are O(1).
        self._msgs: OrderedDict[int, _Entry] = OrderedDict()
        self._by_subject: dict[str, OrderedDict[int, None]] = {}
        self._last_seq = self._empty_first_seq = 0  # the latter is first_seq while there are no messages
        self._bytes = self._digest = 0
        self._ranges: dict[int, list[int]] = {}  # digest range -> [live count, digest]
        self._closed = False
        self.changes = 0  # base invariant 7: bumped by `_remove`, the one way a message leaves

    def append(self, seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> None:
        self.append_batch(((seq, subject, headers, payload, timestamp_ns),))

    def append_batch(self, msgs: Sequence[tuple[int, str, bytes, bytes, int]]) -> None:
        """Append every message or, on bad input or a `discard: new` refusal, none (semantics 3)."""
        self._check_open()
        prepared: list[tuple[int, _Entry]] = []
        dry_run = DiscardNewCheck(
            self.config, len(self._msgs), self._bytes, lambda s: len(self._by_subject.get(s, ())),
            lambda s: (self._msgs[seq].size for seq in self._by_subject.get(s, ())),
        )
        for seq, subject, headers, payload, timestamp_ns in msgs:
            expected = self._last_seq + 1 + len(prepared)
            if seq != expected:
                raise SequenceOutOfOrder(expected, seq)
            headers, payload = bytes(headers), bytes(payload)
            subject_bytes = check_message(self.config, subject, headers, payload, timestamp_ns)
            entry = _Entry(seq, subject, subject_bytes, headers, payload, timestamp_ns)
            dry_run.add(subject, entry.size)
            prepared.append((seq, entry))
        for seq, entry in prepared:
            self._add(seq, entry)
            self._enforce_limits(entry.subject)

    def skip(self, seq: int, count: int = 1) -> None:
        self._check_open()
        if seq != self._last_seq + 1:
            raise SequenceOutOfOrder(self._last_seq + 1, seq)
        if not isinstance(count, int) or count < 1 or seq + count - 1 > _U64_MAX:
            raise BadRequest(f"skip count must be a positive integer within u64 sequences, not {count!r}")
        self._last_seq = seq + count - 1
        if not self._msgs:
            self._empty_first_seq = self._last_seq + 1

    def load(self, seq: int) -> StoredMsg:
        self._check_open()
        if seq not in self._msgs:
            raise NoMessageFound(f"no message at sequence {seq}")
        return self._stored(seq)

    def held_run(self, first_seq: int, msgs: Sequence[Sequence], start: int = 0) -> int:
        for index in range(start, len(msgs)):
            seq = first_seq + index
            if seq not in self._msgs:
                return index
            held = self._stored(seq)
            if (held.subject, held.headers, held.payload, held.timestamp_ns) != tuple(msgs[index][:4]):
                return index
        return len(msgs)

    def load_last(self, subject_filter: str = ">") -> StoredMsg:
        seq = self.last_matching_seq(subject_filter)
        if not seq:
            raise NoMessageFound(f"no message matches {subject_filter!r}")
        return self._stored(seq)

    def last_matching_seq(self, subject_filter: str = ">") -> int:
        self._check_open()
        subjects.validate(subject_filter, wildcards=True)
        if subject_filter == ">":  # the stream's last message, without visiting every subject
            return next(reversed(self._msgs), 0)
        names = self._subjects_matching(subject_filter)
        return max((next(reversed(self._by_subject[name])) for name in names), default=0)

    def verify_run(self, start_seq: int, count_max: int) -> int:
        """`load_run`'s last sequence (nothing to verify in memory)."""
        run = self.load_run(start_seq, count_max)
        return run[-1].seq if run else 0

    def load_run(self, start_seq: int, count_max: int, filters: str | Sequence[str] | None = None) -> list[StoredMsg]:
        """Successive `load_next` results. Unfiltered, the sequences are probed one by one (at most
        `2 * count_max` of them, then the run stops early) instead of a `load_next` per message."""
        run: list[StoredMsg] = []
        if filters is None or filters == ">":
            self._check_open()
            seq = max(start_seq, next(iter(self._msgs), start_seq))
            for seq in range(seq, min(seq + 2 * count_max, self._last_seq + 1)):
                if seq in self._msgs:
                    run.append(self._stored(seq))
                    if len(run) >= count_max:
                        break
            return run
        while len(run) < count_max:
            try:
                run.append(self.load_next(filters, run[-1].seq + 1 if run else start_seq))
            except NoMessageFound:
                break
        return run

    def run_pays(self, filters: str | Sequence[str], seq: int) -> bool:
        """Never: a filtered `load_run` here is `load_next` over and over, so a run saves nothing."""
        return False

    def load_next(self, filters: str | Sequence[str] | None, start_seq: int) -> StoredMsg:
        self._check_open()
        names = [filters] if isinstance(filters, str) else [">"] if filters is None else filters
        filter_set = subjects.FilterSet(names)  # validates every filter
        match = None if not filter_set or ">" in filter_set.filters else filter_set.matches
        if self._msgs:
            start = max(start_seq, next(iter(self._msgs)))
            # Probe seq by seq in a dense range; across large gaps walking the live messages is cheaper.
            if self._last_seq - start + 1 <= len(self._msgs):
                candidates = ((seq, self._msgs.get(seq)) for seq in range(start, self._last_seq + 1))
            else:
                candidates = ((seq, entry) for seq, entry in self._msgs.items() if seq >= start)
            for seq, entry in candidates:
                if entry is not None and (match is None or match(entry.subject)):
                    return self._stored(seq)
        raise NoMessageFound(f"no message matches {filters!r} at or after sequence {start_seq}")

    def subject_counts(self, subject_filter: str = ">") -> dict[str, int]:
        self._check_open()
        subjects.validate(subject_filter, wildcards=True)
        return {name: len(self._by_subject[name]) for name in self._subjects_matching(subject_filter)}

    def state(self) -> StoreState:
        self._check_open()
        msgs = len(self._msgs)
        first_seq, first = next(iter(self._msgs.items())) if msgs else (self._empty_first_seq, None)
        return StoreState(
            first_seq=first_seq, last_seq=self._last_seq, msgs=msgs, bytes=self._bytes,
            num_deleted=self._last_seq - first_seq + 1 - msgs if msgs else 0,
            num_subjects=len(self._by_subject), digest=self._digest,
            first_timestamp_ns=first.timestamp_ns if first else 0,
            last_timestamp_ns=self._msgs[next(reversed(self._msgs))].timestamp_ns if msgs else 0,
        )

    def digest_ranges(self) -> dict[int, int]:
        self._check_open()
        return {number: slot[1] for number, slot in self._ranges.items()}

    def delete(self, seq: int) -> bool:
        self._check_open()
        return self._remove(seq)

    # The record is the only copy of the message the store holds: dropping it is the overwrite.
    erase = delete

    def purge(self, subject: str | None = None, seq: int | None = None, keep: int | None = None) -> int:
        self._check_open()
        subject, seq, keep = check_purge_args(subject, seq, keep)
        if subject is None and seq is not None:
            return self.compact(seq)
        if subject is None:
            victims = list(self._msgs)
        else:
            names = self._subjects_matching(subject)
            victims = sorted(s for name in names for s in self._by_subject[name] if seq is None or s < seq)
        if keep is not None:
            victims = victims[: max(0, len(victims) - keep)]
        for victim in victims:
            self._remove(victim)
        if not self._msgs:
            self._empty_first_seq = self._last_seq + 1
        return len(victims)

    def compact(self, seq: int) -> int:
        """Remove every message below `seq`. Past `last_seq + 1`, `last_seq` moves to `seq - 1`."""
        self._check_open()
        if not isinstance(seq, int) or not 1 <= seq <= _U64_MAX:
            raise BadRequest(f"compact needs a sequence of at least 1, not {seq!r}")
        removed = 0
        while self._msgs and next(iter(self._msgs)) < seq:
            removed += self._remove(next(iter(self._msgs)))
        self._last_seq = max(self._last_seq, seq - 1)
        if not self._msgs:
            self._empty_first_seq = self._last_seq + 1
        return removed

    def truncate(self, seq: int) -> None:
        """Remove every message above `seq`; `seq` must lie in `[first_seq - 1, last_seq]`."""
        self._check_open()
        low = max(0, (next(iter(self._msgs)) if self._msgs else self._empty_first_seq) - 1)
        if not isinstance(seq, int) or not low <= seq <= self._last_seq:
            raise BadRequest(f"truncate to {seq!r} outside [{low}, {self._last_seq}]")
        while self._msgs and next(reversed(self._msgs)) > seq:
            self._remove(next(reversed(self._msgs)))
        if not self._msgs and seq != self._last_seq:
            self._empty_first_seq = seq + 1
        self._last_seq = seq

    def expire(self, cutoff_ns: int) -> int:
        self._check_open()
        removed = 0
        while self._msgs and self._msgs[next(iter(self._msgs))].timestamp_ns < cutoff_ns:
            removed += self._remove(next(iter(self._msgs)))
        return removed

    def faults(self) -> list[Fault]:
        self._check_open()
        return []

    def scan(self) -> list[Fault]:
        self._check_open()
        for seq, entry in self._msgs.items():
            try:
                view = read_record(entry.record, 0)
            except CorruptRecord:
                view = None
            found = view and (view.length, view.kind, view.ident_a, view.ident_b, view.crc)
            expected = (len(entry.record), Kind.MSG, seq, entry.timestamp_ns, entry.crc)
            invariant(found == expected, f"record {seq} held in memory no longer verifies")
        self._check_totals()
        return []

    def repair(self, seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> None:
        self._check_open()
        raise BadRequest(f"sequence {seq} is not damaged: a store never overwrites an intact message")

    def repair_deleted(self, first: int, last: int) -> None:
        self._check_open()
        raise BadRequest(f"sequences {first}..{last} are not damaged: intact messages stay")

    def update_config(self, config: StoreConfig, *, enforce_limits: bool = True) -> None:
        """Adopt `config` and (unless told not to) apply its limits to the stored messages at once
        (semantics 2)."""
        self._check_open()
        invariant(isinstance(config, StoreConfig), "update_config takes a StoreConfig")
        config.validate()
        if config.name != self.config.name:
            raise InvalidConfig(f"a store's name cannot change ({self.config.name!r} -> {config.name!r})")
        self.config = config
        if enforce_limits:
            self._enforce_limits(None)

    def sync(self) -> None:
        self._check_open()

    def close(self) -> None:
        """Release the messages; every later call except `close` raises `StoreClosed`."""
        self._closed = True
        self._msgs, self._by_subject = OrderedDict(), {}

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed()

    def _stored(self, seq: int) -> StoredMsg:
        entry = self._msgs[seq]
        _, headers, payload = decode_message_body(memoryview(entry.record)[HEADER_BYTES:])
        return StoredMsg(subject=entry.subject, seq=seq, headers=headers, payload=payload,
                         timestamp_ns=entry.timestamp_ns)

    def _subjects_matching(self, subject_filter: str) -> list[str]:
        """Live subjects matching a validated filter (a literal one is a single lookup)."""
        if subjects.is_literal(subject_filter):
            return [subject_filter] if subject_filter in self._by_subject else []
        return [name for name in self._by_subject if subjects.matches(subject_filter, name)]

    def _add(self, seq: int, entry: _Entry) -> None:
        invariant(seq == self._last_seq + 1, "appends are contiguous")
        self._msgs[seq] = entry
        self._by_subject.setdefault(entry.subject, OrderedDict())[seq] = None
        self._last_seq = seq
        self._account(seq, entry, +1)

    def _remove(self, seq: int) -> bool:
        entry = self._msgs.pop(seq, None)
        if entry is None:
            return False
        self.changes += 1
        index = self._by_subject[entry.subject]
        del index[seq]
        if not index:
            del self._by_subject[entry.subject]
        self._account(seq, entry, -1)
        if not self._msgs:
            self._empty_first_seq = self._last_seq + 1
        return True

    def _account(self, seq: int, entry: _Entry, sign: int) -> None:
        """Add (`sign` +1) or subtract (-1) one message's bytes and digest term, in O(1)."""
        term = message_digest(seq, entry.crc) * sign
        self._bytes += entry.size * sign
        self._digest = (self._digest + term) & _U64_MAX
        number = (seq - 1) // DIGEST_RANGE_SEQS
        slot = self._ranges.setdefault(number, [0, 0])
        slot[0] += sign
        slot[1] = (slot[1] + term) & _U64_MAX
        invariant(slot[0] >= 0 and self._bytes >= 0, "accounting never goes negative")
        if slot[0] == 0:
            del self._ranges[number]

    def _enforce_limits(self, subject: str | None) -> None:
        """Apply the limits after an append to `subject`, or to the whole store when None."""
        config, per_max = self.config, self.config.max_msgs_per_subject
        if per_max != UNLIMITED:
            for name in (subject,) if subject is not None else tuple(self._by_subject):
                index = self._by_subject.get(name)  # per_max >= 1: never emptied by this loop
                while index is not None and len(index) > per_max:
                    self._remove(next(iter(index)))
        # A limit is -1 (unlimited) or positive, so `0 <= limit < value` means "limit set and exceeded".
        while config.discard == Discard.old and (
            0 <= config.max_msgs < len(self._msgs) or 0 <= config.max_bytes < self._bytes
        ):
            self._remove(next(iter(self._msgs)))

    def _check_totals(self) -> None:
        """Invariant 2: the running totals and the subject index equal a rebuild from the messages."""
        rebuilt = MemStore()
        for seq, entry in self._msgs.items():
            rebuilt._account(seq, entry, +1)
            rebuilt._by_subject.setdefault(entry.subject, OrderedDict())[seq] = None
        fresh = (rebuilt._bytes, rebuilt._digest, rebuilt._ranges, rebuilt._by_subject)
        invariant(fresh == (self._bytes, self._digest, self._ranges, self._by_subject), "totals drifted")
