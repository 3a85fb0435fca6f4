"""Reading a WAL's segments back: which entries are good, which are faulty, what may be cut (layer L2).

Owns: the recovery rules of DESIGN.md §4 as they apply to the log, as a pure function of the segment
bytes, the snapshot's `(index, term)` and the acked watermark. It decides; `log.Wal` acts (cuts a torn
tail, persists repairing).

The walk visits segments in first-index order and records in file order, with a cursor at the end of the
last accepted record. Bytes between the cursor and the next accepted record are *junk*: damaged records,
or valid records that do not belong there (stale, repeated, misplaced). Rules, each named where it is
applied below:

  R1 torn tail: junk may be cut as a torn write only when it is at the physical end of the last segment,
     no valid record of any kind lies in it, and the index it would hold is above the acked watermark.
  R2 corruption keeps identity: any other junk is corruption. The indexes it hides are known from its
     neighbours (previous accepted index + 1 up to the next accepted index - 1, or just the previous + 1
     at the end of the log); they are reported faulty, and nothing after the junk is dropped.
  R3 missing segment: a gap between one segment's last index and the next one's first index, or before
     the first segment, is missing data: those indexes are faulty.
  R4 log matching: indexes are contiguous (a record below the expected index is junk) and terms
     non-decreasing; each entry's `prev_term` must equal the term of the entry before it. A break marks
     both entries faulty, because a locally valid but stale record (a rolled-back write) can sit on either
     side of it. R4b: across faulty indexes too (the core refuses falling terms): an entry below the term of
     entries accepted before the gap is faulty, and so is every accepted entry of a higher term (sim seed 30169).
  R5 the snapshot covers everything at or below its index: damage there is irrelevant, and the first
     entry after it chains to the snapshot's term.
  R6 hard-state records (segment format 2) are accepted where they lie; junk before one is corruption like
     junk before an entry (a valid record follows it). The newest by sequence is kept, and from the
     moment it is newer than the hard state recovery started from, its acked watermark is the one R1
     compares with: a cycle's record follows that cycle's entries, so a torn cycle loses both and the
     watermark never vouches for a torn entry.
  R7a stale before a record (format 4 records carry their log end, `format.LogEnd`): entries walked past a
     record's log end lie before a record written after they were truncated, so a rolled-back write brought
     them back; they are junk in the middle (corruption) and the walk resumes after the record. The rest of
     R7 (a stale tail) needs the witness too and is applied by `recovery` (`vouch`).

Invariants:
  1. Every index from the first live index to `last_index` is in exactly one segment's arrays and is
     either in `entries` or in `faulty`, never both.
  2. Nothing is cut except under R1; at most one cut, in the last segment.
  3. `reasons` is bounded (`REASONS_MAX`); `corrupt` is set for every R2/R3/R4 finding above the snapshot.

Imports: L0, L1, attrs. Reference: DESIGN.md §4 (torn tail vs corruption), Raft paper §5.3 (log matching).
"""

from __future__ import annotations

import attrs

from jsraft.codec.records import FILE_HEADER_BYTES, HEADER_BYTES, Kind, RecordView, scan_records
from jsraft.errors import CorruptRecord
from jsraft.raft.types import Entry, HardState
from jsraft.wal.format import (
    SEGMENT_DATA_START,
    SEGMENT_FILE_TYPE,
    SEGMENT_KINDS,
    LogEnd,
    decode_entry_body,
    decode_hard_state,
    file_header_version,
    segment_body_version,
)
from jsraft.wal.segment import Segment

REASONS_MAX = 64
WATERMARK_UNKNOWN = 1 << 64  # hard state lost: every index may have been acknowledged, so nothing is cut
SEQUENCE_NEWEST = 1 << 64  # the watermark given to `scan_log` is newer than any record (the open `Wal`)
_KIND_WAL_HARD_STATE = int(Kind.WAL_HARD_STATE)


@attrs.frozen(kw_only=True)
class HardStateRecord:
    """A verified hard state read back from a segment record (or a slot: `recovery`)."""

    hard_state: HardState
    sequence: int
    watermark_term: int
    log_end: LogEnd | None = None  # where the log ended when it was saved (`format`); None before version 3


def read_hard_state_record(record: RecordView, buffer: bytes, segment_version: int) -> HardStateRecord | None:
    """The hard state in a verified `WAL_HARD_STATE` record of a segment of `segment_version`; None if its
    body is malformed or the segment's format holds none (junk)."""
    body_version = segment_body_version(segment_version)
    if body_version == 0:
        return None
    try:
        body = buffer[record.offset + HEADER_BYTES : record.offset + record.length]
        decoded = decode_hard_state(body, body_version)
    except CorruptRecord:
        return None
    if decoded.hard_state.current_term != record.ident_b:
        return None
    return HardStateRecord(hard_state=decoded.hard_state, sequence=record.ident_a,
                           watermark_term=decoded.watermark_term, log_end=decoded.log_end)


def newest_hard_state(buffer: bytes) -> HardStateRecord | None:
    """The newest valid hard-state record anywhere in a segment's bytes (for segments about to be removed)."""
    best = None
    version = file_header_version(buffer, SEGMENT_FILE_TYPE)
    for record in scan_records(buffer, 0, SEGMENT_KINDS).records:
        if record.kind == _KIND_WAL_HARD_STATE:
            found = read_hard_state_record(record, buffer, version)
            if found is not None and (best is None or found.sequence > best.sequence):
                best = found
    return best


@attrs.frozen(kw_only=True)
class TornCut:
    """R1 applies: cut segment `name` at `offset` (remove the file if nothing valid precedes it)."""

    name: str
    offset: int
    bytes_cut: int
    remove_file: bool


@attrs.define(kw_only=True)
class LogScan:
    segments: list[Segment]
    faulty: set[int]
    entries: list[Entry]
    reasons: list[str]
    corrupt: bool
    torn: TornCut | None
    max_term: int
    last_index: int
    hard_state: HardStateRecord | None = None  # the newest valid hard-state record (R6)

    def term_at(self, index: int) -> int:
        """Term of a good `index` in the scanned log; 0 if faulty or not in any segment."""
        if index in self.faulty:
            return 0
        for segment in self.segments:
            if segment.first <= index <= segment.last:
                return segment.terms[index - segment.first]
        return 0


class _Walk:
    def __init__(self, snap_index: int, snap_term: int, watermark: int, hs_sequence: int,
                 allow_torn: bool) -> None:
        self.snap_index, self.snap_term = snap_index, snap_term
        self.watermark, self.allow_torn = watermark, allow_torn
        self.hs_sequence = hs_sequence  # sequence of the hard state `watermark` came from
        self.hard_state: HardStateRecord | None = None
        self.segments: list[Segment] = []
        self.faulty: set[int] = set()
        self.entries: dict[int, Entry] = {}
        self.reasons: list[str] = []
        self.corrupt = False
        self.torn: TornCut | None = None
        self.expected: int | None = None
        self.prev_term = 0  # term of index `expected - 1` when known and trusted, else 0
        self.term_floor = snap_term  # the highest term of an entry accepted so far (R4b)
        self.max_term = snap_term

    def problem(self, index: int, text: str) -> None:
        """Record corruption at `index` unless the snapshot covers it (R5)."""
        if index <= self.snap_index:
            return
        self.corrupt = True
        if len(self.reasons) < REASONS_MAX:
            self.reasons.append(text)
        elif len(self.reasons) == REASONS_MAX:
            self.reasons.append("(further problems not listed)")

    def fault(self, segment: Segment, index: int, offset: int) -> None:
        segment.add(offset, 0, 0)
        if index > self.snap_index:
            self.faulty.add(index)

    def start_segment(self, name: str, first: int) -> Segment:
        expected = self.expected
        if expected is None:
            expected = self.snap_index + 1 if first > self.snap_index + 1 else first
            if first > expected:
                self.segments.append(Segment(expected, None))
        if first > expected:
            # R3: the indexes between are missing; they belong to the segment before (or the head).
            before = self.segments[-1]
            for index in range(expected, first):
                self.fault(before, index, before.junk_at)
            which = f"index {expected}" if first - 1 == expected else f"indexes {expected}..{first - 1}"
            if before.junk_at < before.size:
                where = f"segment {before.name} bytes {before.junk_at}..{before.size}"
                self.problem(first - 1, f"corrupt record at {which} (end of {where})")
            else:
                self.problem(first - 1, f"{which} missing before segment {name} (a segment is missing)")
            self.prev_term, expected = 0, first
        elif first < expected:
            self.problem(expected, f"segment {name} starts at {first}, inside the segment before it")
        elif self.segments and self.segments[-1].junk_at < self.segments[-1].size:
            self.problem(first, f"corrupt bytes at the end of segment {self.segments[-1].name}")
        self.expected = expected
        segment = Segment(expected, name)
        self.segments.append(segment)
        return segment

    def accept(self, segment: Segment, record: RecordView, buffer: bytes, cursor: int) -> bool:
        """Take `record` as the next entry (R2, R4); False if it is junk after all."""
        index, term = record.ident_a, record.ident_b
        try:
            body = buffer[record.offset + HEADER_BYTES : record.offset + record.length]
            entry, prev_claim = decode_entry_body(index, term, body)
        except CorruptRecord:
            return False
        expected = self.expected
        if index > expected:
            # R2: junk (or nothing, if bytes were lost) hid these indexes; identity from the neighbours.
            for missing in range(expected, index):
                self.fault(segment, missing, cursor)
            where = f"segment {segment.name} bytes {cursor}..{record.offset}"
            if record.offset == cursor:
                where = f"no bytes for them in segment {segment.name}"
            which = f"index {expected}" if index - 1 == expected else f"indexes {expected}..{index - 1}"
            self.problem(index - 1, f"corrupt record at {which} ({where})")
            self.prev_term = 0
        elif record.offset > cursor:
            self.problem(index, f"corrupt bytes before index {index} (segment {segment.name} bytes "
                                f"{cursor}..{record.offset}; no index missing)")
        if index - 1 == self.snap_index:
            self.prev_term = self.snap_term  # R5
        segment.add(record.offset, record.length, term)
        if index - 1 in self.faulty and prev_claim:
            self.set_term(index - 1, prev_claim)  # the successor names its predecessor's term
        prev = self.prev_term
        if prev and (term < prev or (prev_claim and prev_claim != prev)) and index > self.snap_index:
            # R4: one side of this break is stale; without a way to tell which, both are faulty.
            self.faulty.add(index)
            segment.terms[-1] = 0
            if index - 1 > self.snap_index:
                self.faulty.add(index - 1)
                self.entries.pop(index - 1, None)
                self.set_term(index - 1, 0)
                self.refloor()
            self.problem(
                index,
                f"log matching broken between {index - 1} and {index} "
                f"(term {term}, prev_term {prev_claim}, previous term {prev})",
            )
            self.prev_term = 0
        elif not prev and term < self.term_floor and index > self.snap_index:
            self.problem(index, f"term {term} at {index} below term {self.term_floor} before faulty indexes")
            self.faulty.add(index)
            segment.terms[-1] = 0
            for above in [other for other, accepted in self.entries.items() if accepted.term > term]:
                self.faulty.add(above)
                self.entries.pop(above)
                self.set_term(above, 0)
            self.refloor()
        else:
            if index > self.snap_index:
                self.entries[index] = entry
                self.term_floor = max(self.term_floor, term)
            self.prev_term = term
        self.expected = index + 1
        return True

    def take_hard_state(self, segment: Segment, record: RecordView, buffer: bytes, cursor: int) -> bool:
        """R6: take a hard-state record; False if its body is malformed (it is junk then)."""
        found = read_hard_state_record(record, buffer, segment.version)
        if found is None:
            return False
        if record.offset > cursor:
            # A cycle's record follows its entries: junk before it may hide the entries up to the watermark
            # it vouches for. Their identity is known (R2), their terms are not.
            expected, watermark = self.expected, found.hard_state.acked_watermark
            for missing in range(expected, watermark + 1):
                self.fault(segment, missing, cursor)
            if watermark >= expected:
                self.expected, self.prev_term = watermark + 1, 0
            self.problem(max(expected, watermark), f"corrupt bytes before a hard-state record (segment "
                                                   f"{segment.name} bytes {cursor}..{record.offset})")
        end = found.log_end
        if end is not None and self.snap_index <= end.index < self.expected - 1:
            self.stale_before(segment, end)
        self.max_term = max(self.max_term, found.hard_state.current_term)
        if self.hard_state is None or found.sequence > self.hard_state.sequence:
            self.hard_state = found
            if found.sequence > self.hs_sequence:
                self.watermark, self.hs_sequence = found.hard_state.acked_watermark, found.sequence
        return True

    def stale_before(self, segment: Segment, end: LogEnd) -> None:
        """R7a: entries above `end.index` lie before a record saved when the log ended there, so a
        truncation had removed them before the record was written and a rolled-back write brought them
        back. They are junk in the middle (corruption, R2); the log goes on after the record from
        `end.index + 1`."""
        first_stale, last_stale = end.index + 1, self.expected - 1
        self.problem(first_stale, f"stale entries {first_stale}..{last_stale} before a hard-state record saved "
                                  f"when the log ended at {end.index} (segment {segment.name})")
        if segment.first > first_stale:
            return  # they reach into an earlier segment, which no write does: left as found (corrupt)
        segment.cut_from(first_stale)
        if end.index in self.faulty:
            self.set_term(end.index, 0)  # its term was a claim of the stale record after it, cut now
        for index in range(first_stale, last_stale + 1):
            self.entries.pop(index, None)
            self.faulty.discard(index)
        self.refloor()
        self.expected = first_stale
        trusted = self.snap_term if end.index == self.snap_index else self.trusted_term(end.index)
        self.prev_term = trusted if trusted and end.term in (0, trusted) else 0

    def refloor(self) -> None:  # R4b's floor again, after entries were taken out (rare: on damage; O(entries))
        self.term_floor = max((entry.term for entry in self.entries.values()), default=self.snap_term)

    def trusted_term(self, index: int) -> int:
        """Term of a good `index` walked so far; 0 if faulty or unknown."""
        if index in self.faulty:
            return 0
        for segment in reversed(self.segments):
            if segment.first <= index <= segment.last:
                return segment.terms[index - segment.first]
        return 0

    def set_term(self, index: int, term: int) -> None:
        for segment in reversed(self.segments):
            if segment.first <= index <= segment.last:
                segment.terms[index - segment.first] = term
                return

    def walk_segment(self, name: str, first: int, buffer: bytes, is_last: bool) -> None:
        segment = self.start_segment(name, first)
        segment.size = len(buffer)
        segment.version = file_header_version(buffer, SEGMENT_FILE_TYPE)
        cursor = FILE_HEADER_BYTES if segment.version else 0
        records = scan_records(buffer, 0, SEGMENT_KINDS).records
        header_seen = False
        for record in records:
            # Any term seen, even in junk, bounds the term this replica may already have voted in.
            self.max_term = max(self.max_term, record.ident_b if record.kind == Kind.WAL_ENTRY else 0)
            if record.kind == Kind.WAL_SEGMENT_HEADER:
                in_place = record.offset == cursor == FILE_HEADER_BYTES and record.ident_a == first
                if in_place and not header_seen:
                    cursor, header_seen = record.offset + record.length, True
                continue  # a misplaced header is junk
            if record.kind == _KIND_WAL_HARD_STATE:
                if segment.version >= 2 and self.take_hard_state(segment, record, buffer, cursor):
                    cursor = record.offset + record.length
                continue  # in a format 1 segment (or malformed) it is junk
            if record.ident_a < self.expected:
                continue  # R4: below the expected index (stale or repeated): junk
            if self.accept(segment, record, buffer, cursor):
                cursor = record.offset + record.length
        segment.header_ok = header_seen
        segment.junk_at = cursor
        if is_last and (cursor < len(buffer) or cursor < SEGMENT_DATA_START):
            self.end_of_log(segment, records, cursor, len(buffer))

    def end_of_log(self, segment: Segment, records: list[RecordView], cursor: int, size: int) -> None:
        """Junk at the end of the last segment: R1 (torn, cut) or R2 (corruption, one faulty index)."""
        expected = self.expected
        valid_in_tail = any(record.offset >= cursor for record in records)
        if self.allow_torn and not valid_in_tail and expected > self.watermark:
            remove = cursor < SEGMENT_DATA_START and len(segment.offsets) == 0
            self.torn = TornCut(name=segment.name, offset=cursor, bytes_cut=size - cursor, remove_file=remove)
            segment.size = segment.junk_at = cursor
            return
        why = "valid records lie in it" if valid_in_tail else f"index {expected} is not above the watermark"
        if not self.allow_torn:
            why = "damage found while running"
        self.fault(segment, expected, cursor)
        self.problem(
            expected,
            f"corrupt record at index {expected}: segment {segment.name} bytes {cursor}..{size} at the end "
            f"of the log (not a torn write: {why})",
        )
        self.expected, self.prev_term = expected + 1, 0


def scan_log(
    files: list[tuple[str, int, bytes]],
    *,
    snap_index: int,
    snap_term: int,
    watermark: int,
    allow_torn: bool,
    hs_sequence: int = SEQUENCE_NEWEST,
) -> LogScan:
    """Apply R1-R6 to `files` (`(name, first index, content)`, in first-index order). `watermark` is the
    acked watermark of the hard state with sequence `hs_sequence`; a newer record in the log replaces it."""
    walk = _Walk(snap_index, snap_term, watermark, hs_sequence, allow_torn)
    for position, (name, first, buffer) in enumerate(files):
        walk.walk_segment(name, first, buffer, position == len(files) - 1)
    last = max(snap_index, walk.expected - 1) if walk.expected is not None else snap_index
    return LogScan(
        segments=walk.segments,
        faulty=walk.faulty,
        entries=list(walk.entries.values()),
        reasons=walk.reasons,
        corrupt=walk.corrupt,
        torn=walk.torn,
        max_term=walk.max_term,
        last_index=last,
        hard_state=walk.hard_state,
    )
