"""`Wal`: one Raft group's log, hard state and snapshots on a `Disk` (layer L2).

Owns: every write to a WAL directory after it is opened (opening is `recovery`). The Raft core never sees
files; its driver calls `append`, `sync`, `save_hard_state`, `truncate_from`, `replace`, `save_snapshot`,
`compact`, and reads with `entries`/`term`.

How each change is made durable, and why:
  - `append` makes one write per call and segment touched (a large one unjoined), no fsync; `sync` fsyncs each touched
    segment, oldest first, then the `wal/` directory if a segment was created: group commit.
  - `save_hard_state` appends a `WAL_HARD_STATE` record after the cycle's entries, so the segment's fsync
    makes both durable together (a torn cycle loses both; recovery cuts it and uses its predecessor); each
    hard state names where the log ended and the record it follows (`format.LogEnd`, `vouch`);
    `sync` then writes the same hard state to the witness file (`hardstate`: why it exists, and why it
    is still fsynced every cycle). Before anything removes or rewrites bytes that may hold hard-state
    records (`truncate_from`, `compact`, `replace`), the hard state is checkpointed to the witness, and
    after a cut or rewrite it is appended to the log again.
  - `truncate_from` *physically* truncates: newer segments are removed newest first, each removal made
    durable (directory fsync) before the next, and the containing segment is truncated and fsynced before
    it returns. No truncation marker exists in the segments (an index could then repeat, which is what a
    stale write looks like, R4 in `scan`); the checkpoint's log end is its trace (`vouch`). Since the cut
    is durable before any new append, new records never overwrite durable ones in place, so a crash can
    only leave a torn tail of new records (R1), never old and new bytes interleaved. An acked watermark at
    or above the cut is lowered to `index - 1` (the removed entries were never committed); the Raft core
    must take the new value from `hard_state` rather than save its old one again.
  - `replace` rewrites each affected segment atomically (`segment.rebuild` + `Disk.write_atomic`) and then
    re-reads the log with the same rules recovery uses, so what it believes is exactly what a restart will
    find.
  - Every operation that fsyncs `wal/` first fsyncs all dirty segments (`sync`), so a segment's name is
    never durable before its content; otherwise a crash could leave a durable but empty segment after a
    torn one, and R1 would have to call the torn tail corruption.

Invariants:
  1. `first_index() == snapshot index + 1`; every index in `[first_index(), last_index()]` is in exactly one
     segment and is either good or in `faulty()`.
  2. Appended indexes are `last_index() + 1, ...`, contiguous, with non-decreasing terms.
  3. Never truncate a committed entry: `truncate_from(i)` requires `i > hard_state.commit_index`, unless the
     stored hard state says repairing (its commit hint may then cover stale copies the core replaces).
  4. `compact(i)` only removes segments whose every index is `<= i <=` the durable snapshot's index.
  5. A segment holding only its header (made ahead by `make_first_segment`, or rolled and not yet
     written) is a valid, empty segment: recovery keeps it, and appends continue in it. Its name is
     durable before any record in it is (a `wal/` fsync, or the caller's tree sync), as for any segment.
  6. `faulty()` shrinks only by `replace`, `truncate_from` and `compact`: a re-read keeps any other faulty
     index faulty, term unknown, though it may read good now; the core repairs it with the leader's copy,
     of any term (sim register seed 31003: a misread 136 of term 74 read good, then `replace` refused 83).

Imports: L0, L1 (`codec`, `raft.types`, `disk` protocol), attrs. Reference: DESIGN.md §2 (group commit),
§4 (storage faults); etcd-io/raft `Storage`.
"""

from __future__ import annotations

import bisect

import attrs

from jsraft.disk.base import Disk, DiskFile, append_pieces
from jsraft.errors import CorruptRecord, invariant
from jsraft.raft.types import Entry, HardState, SnapshotMeta
from jsraft.wal import snapshots
from jsraft.wal.files import SegmentFiles, keep_faulty
from jsraft.wal.format import (
    ANCHOR_NONE, SEGMENT_FILE_TYPE, SEGMENT_FORMAT_VERSION, WAL_DIR, LogEnd, encode_entry_parts, encode_wal_hard_state,
    read_checked,
)
from jsraft.wal.recovery import Opened, Recovered, list_segments, recover, remove_covered
from jsraft.wal.scan import scan_log
from jsraft.wal.segment import Segment, decode_span

SEGMENT_BYTES_DEFAULT = 4 << 20  # a few MiB: cheap to rewrite on repair, few files per group
SEGMENT_BYTES_MIN = 64


class Wal(SegmentFiles):
    """A Raft group's durable log. Create with `Wal.open(disk)`; single-threaded, like the Raft core."""

    def __init__(self, disk: Disk, segment_bytes: int, opened: Opened) -> None:
        invariant(segment_bytes >= SEGMENT_BYTES_MIN, "segment_bytes is below SEGMENT_BYTES_MIN")
        self._disk = disk
        self._segment_bytes = segment_bytes
        self._hs_file = opened.hs_file
        self._hs = opened.hard_state
        self._snapshot = opened.snapshot
        self._snap_index = opened.snapshot.index if opened.snapshot else 0
        self._snap_term = opened.snapshot.term if opened.snapshot else 0
        self._handles: dict[str, DiskFile] = {}  # open segment files: the active one and unsynced ones
        self._dirty: set[str] = set()
        self._dir_dirty = False
        self._active: str | None = None  # name of the segment appends go to; None: next append rolls
        self._hs_sequence = opened.hs_sequence  # the highest hard-state sequence written (slots, records)
        self._witness_due = False  # a hard state was appended that the witness file does not hold yet
        self._anchor = opened.anchor  # sequence of the newest hard-state record in the log (`format.LogEnd`)
        self._adopt(opened.scan.segments, opened.scan.faulty, opened.scan.last_index)
        if opened.restate:  # in the log first, so a power cut tearing the witness write is no damage
            self._restate()  # (after a cut, `vouch`: the next cycle's entries then follow a record it names)
        remove_covered(disk, opened.covered)

    @classmethod
    def open(cls, disk: Disk, *, segment_bytes: int = SEGMENT_BYTES_DEFAULT) -> tuple["Wal", Recovered]:
        opened, recovered = recover(disk)
        return cls(disk, segment_bytes, opened), recovered

    def _adopt(self, segments: list[Segment], faulty: set[int], last_index: int) -> None:
        self._segments = segments
        self._faulty = faulty
        self._last_index = last_index
        last = segments[-1] if segments else None
        # Appends continue in the last segment only if it is a real file with a valid header that ends
        # at the log's end; otherwise the next append starts a new segment.
        # A format 1 segment (an older build's) gets no new records: its version says it holds none.
        if (last is not None and last.name is not None and last.header_ok and last.last == last_index
                and last.version == SEGMENT_FORMAT_VERSION):
            self._active = last.name
            if last.name not in self._handles:
                self._handles[last.name] = self._disk.open(f"{WAL_DIR}/{last.name}")
        else:
            self._active = None
        self._close_idle()

    # --- Reads -----------------------------------------------------------------------------------

    @property
    def hard_state(self) -> HardState:
        return self._hs

    @property
    def snapshot_meta(self) -> SnapshotMeta | None:
        return self._snapshot

    def first_index(self) -> int:
        return self._snap_index + 1

    def last_index(self) -> int:
        return self._last_index

    def faulty(self) -> frozenset[int]:
        return frozenset(self._faulty)

    def _segment_of(self, index: int) -> Segment:
        position = bisect.bisect_right(self._segments, index, key=lambda segment: segment.first) - 1
        invariant(position >= 0 and index <= self._segments[position].last, f"index {index} is in no segment")
        return self._segments[position]

    def term(self, index: int) -> int | None:
        """Term of `index`; None if unknown (before the snapshot, after the end, or faulty with no clue)."""
        if index == self._snap_index:
            return self._snap_term
        if index < self._snap_index or index > self._last_index:
            return None
        segment = self._segment_of(index)
        return segment.terms[index - segment.first] or None

    def _trusted_term(self, index: int) -> int:
        """Term of a good index (or the snapshot's), else 0: what a new record may chain to."""
        if index == self._snap_index:
            return self._snap_term
        if index in self._faulty or index < self._snap_index or index > self._last_index:
            return 0
        return self.term(index) or 0

    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries `[lo, hi)`. Raises `CorruptRecord` if any is faulty, or fails its CRC now (it is then
        added to `faulty()`)."""
        invariant(self._snap_index < lo <= hi <= self._last_index + 1, f"entries [{lo}, {hi}) out of range")
        bad = next((index for index in range(lo, hi) if index in self._faulty), None)
        if bad is not None:
            raise CorruptRecord(f"WAL index {bad} is faulty and awaits repair")
        out: list[Entry] = []
        index = lo
        while index < hi:
            segment = self._segment_of(index)
            stop = min(hi, segment.last + 1)
            out.extend(self._read(segment, index, stop))
            index = stop
        return out

    def _read(self, segment: Segment, lo: int, hi: int) -> list[Entry]:
        start, end = segment.span(lo, hi)
        decoded = decode_span(segment, self._pread(segment, start, end - start), start, lo, hi)
        if isinstance(decoded, int):
            self._faulty.add(decoded)
            raise CorruptRecord(f"WAL index {decoded} failed its CRC on read; it is now faulty")
        return decoded

    # --- Appending and group commit -----------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Write `entries` after `last_index()`; durable only after `sync()`."""
        if not entries:
            return
        prev_term = self._trusted_term(self._last_index)
        known_last_term = self.term(self._last_index) or 0
        invariant(entries[0].term >= known_last_term, "terms in the log never decrease")
        position = 0
        while position < len(entries):
            segment = self._writable_segment(entries[position].index)
            room = self._segment_bytes - segment.size
            parts, lengths = [], []  # each record as its two pieces (joined at most once by `_write`), its length
            while position < len(entries) and (not lengths or room > 0):
                entry = entries[position]
                invariant(entry.index == entries[0].index + position, "appended indexes must be contiguous")
                invariant(entry.term >= prev_term, "terms in the log never decrease")
                head, data = encode_entry_parts(entry, prev_term)
                parts += (head, data)
                lengths.append(len(head) + len(data))
                room -= lengths[-1]
                prev_term = entry.term
                position += 1
            self._write(segment, parts, lengths, entries[position - len(lengths) : position])

    def _write(self, segment: Segment, parts: list[bytes], lengths: list[int], entries: list[Entry]) -> None:
        name = segment.name or ""
        offset = append_pieces(self._handles[name], parts, sum(lengths))  # a large write is not joined
        for length, entry in zip(lengths, entries):
            segment.add(offset, length, entry.term)
            offset += length
        segment.size = segment.junk_at = offset
        self._dirty.add(name)
        self._last_index = entries[-1].index

    def sync(self) -> None:
        """One fsync per touched segment (oldest first), then the directory if a segment was created, then
        the witness file (its own fsync) if a hard state was saved since it was last written: every cycle
        that saves one, so such a cycle costs two fsyncs (`hardstate`: why the witness cannot ride along).
        The same as `sync_log()` then `sync_witness()`."""
        self.sync_log()
        self.sync_witness()

    def sync_witness(self) -> None:
        """`sync`'s second part, only after `sync_log` (the witness never outruns the log it vouches for);
        writes that need only the log durable (a marker) may run meanwhile on other threads, off this `Wal`."""
        if self._witness_due:
            self._checkpoint()

    def save_hard_state(self, hs: HardState) -> None:
        """Append `hs` as a record after what was appended so far; durable with the next `sync()`, which
        the caller must run before anything uses it (persist before use). The record also holds the term at
        `hs.acked_watermark` and the log end, so recovery can tell a stale log (`recovery`, `vouch`)."""
        self._hs_sequence = self._anchor = self._hs_sequence + 1
        record = encode_wal_hard_state(hs, self._hs_sequence, self._trusted_term(hs.acked_watermark),
                                       LogEnd(self._last_index, self._trusted_term(self._last_index), self._anchor))
        segment = self._writable_segment(self._last_index + 1) if self._active is None else self._segments[-1]
        name = segment.name or ""
        segment.size = segment.junk_at = self._handles[name].append(record) + len(record)
        self._dirty.add(name)
        self._hs = hs
        self._witness_due = True

    def _checkpoint(self, log_end: LogEnd | None = None) -> None:
        """Write the current hard state to the witness (fsynced), newer than every record; `log_end`: a cut's."""
        log_end = log_end or LogEnd(self._last_index, self._trusted_term(self._last_index), self._anchor)
        self._hs_sequence = self._hs_file.save(self._hs, self._trusted_term(self._hs.acked_watermark), log_end,
                                               self._hs_sequence + 1)
        self._witness_due = False

    def _logged_checkpoint(self, log_end: LogEnd | None = None) -> None:
        """`_checkpoint` after the same hard state went into the log as a record (the log as it is now: a cut
        comes after), fsynced: a power cut tearing the witness write leaves a slot that newer record covers
        (recovery decision 2), not damage (stream simulator seed 684: a cut's witness-only checkpoint torn)."""
        self.save_hard_state(self._hs)
        self._sync_segments()
        self._checkpoint(log_end)

    def _restate(self) -> None:
        """After a cut or rewrite took hard-state records away: put the current one back in the log."""
        self.save_hard_state(self._hs)
        self.sync()

    # --- Conflicts and repair --------------------------------------------------------------------

    def truncate_from(self, index: int) -> None:
        """Remove entries `>= index` (a Raft conflict), durably, before returning."""
        invariant(self._snap_index < index <= self._last_index + 1, f"truncate_from({index}) out of range")
        # A repairing replica's commit hint may cover stale copies of committed entries (a rolled-back write):
        # the Raft core then replaces them, truncating below the hint (raft `append`, invariant 5).
        invariant(index > self._hs.commit_index or self._hs.repairing,
                  f"never truncate a committed entry (truncate_from({index}))")
        if index == self._last_index + 1:
            return
        self.sync()
        if self._hs.acked_watermark >= index:
            # The removed entries were never committed (invariant 3), so this replica no longer vouches for
            # them; left in place, the watermark would call the shorter log a loss at the next restart. It
            # goes down in the checkpoint, before the cut, so no crash leaves it above the log.
            self._hs = attrs.evolve(self._hs, acked_watermark=index - 1)
        # The cut may take the newest hard-state records; no anchor: a crash before it, recovery finishes it (R7d)
        self._logged_checkpoint(LogEnd(index - 1, self._trusted_term(index - 1), ANCHOR_NONE))
        while self._segments and self._segments[-1].first >= index:
            self._remove_segment(self._segments.pop())
        segment = self._segments[-1] if self._segments else None
        if segment is not None and segment.last >= index:
            offset = segment.cut_from(index)
            if segment.name is not None:
                handle = self._handles.get(segment.name) or self._disk.open(f"{WAL_DIR}/{segment.name}")
                self._handles[segment.name] = handle
                handle.truncate(offset)
                handle.sync()
                segment.size = segment.junk_at = offset
        self._faulty = {bad for bad in self._faulty if bad < index}
        if index - 1 in self._faulty:
            # A faulty entry's term is only what its successor's record claimed; that record is gone now,
            # so the claim is too (left in place, it would refuse the leader's copy in `replace`).
            owner = self._segment_of(index - 1)
            owner.terms[index - 1 - owner.first] = 0
        self._adopt(self._segments, self._faulty, index - 1)
        self._restate()

    def replace(self, entries: list[Entry]) -> None:
        """Put the leader's copies of faulty entries in place (see `segment` for why by rewrite)."""
        if not entries:
            return
        by_index = {entry.index: entry for entry in entries}
        for entry in entries:
            index = entry.index
            invariant(index in self._faulty, f"replace({index}): only faulty entries are replaced")
            known = self.term(index)
            invariant(known in (None, entry.term), f"replace({index}): term conflict, use truncate_from")
        self.sync()
        self._logged_checkpoint()  # a rewritten segment keeps its entries only, not its hard-state records
        groups: dict[int, dict[int, Entry]] = {}
        for index in sorted(by_index):
            groups.setdefault(id(self._segment_of(index)), {})[index] = by_index[index]
        for segment in list(self._segments):
            group = groups.get(id(segment))
            if group:
                self._rewrite(segment, group)
        self._reload(self._faulty - set(by_index))
        self._restate()

    def _reload(self, faulty: set[int]) -> None:
        """Re-read every segment with recovery's rules (no cuts: nothing found while running is torn);
        `faulty` stays so (`files.keep_faulty`: invariant 6)."""
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        read = self._disk.read_file
        files = [(name, first, read_checked(read, f"{WAL_DIR}/{name}", SEGMENT_FILE_TYPE))
                 for first, name in list_segments(self._disk)]
        scan = scan_log(files, snap_index=self._snap_index, snap_term=self._snap_term,
                        watermark=self._hs.acked_watermark, allow_torn=False)
        keep_faulty(scan, faulty)
        if scan.last_index != self._last_index:
            raise CorruptRecord(
                f"log changed while open: re-read ends at {scan.last_index}, not {self._last_index}"
            )
        self._adopt(scan.segments, scan.faulty, scan.last_index)

    # --- Snapshots and compaction ----------------------------------------------------------------

    def save_snapshot(self, meta: SnapshotMeta, data: bytes) -> None:
        """Write a snapshot durably. If it reaches past the log, the log restarts after it."""
        invariant(meta.index >= self._snap_index, "snapshots never go backwards")
        if self._snap_index < meta.index <= self._last_index:
            invariant(
                self.term(meta.index) in (None, meta.term),
                "a snapshot that conflicts with the log needs truncate_from first",
            )
        snapshots.save_snapshot(self._disk, meta, data)
        self._snapshot, self._snap_index, self._snap_term = meta, meta.index, meta.term
        self._faulty = {index for index in self._faulty if index > meta.index}
        if meta.index >= self._last_index:
            # The log now ends at the snapshot. Appends go on in the active segment only if it ends exactly
            # there; past it, the next append starts a segment at meta.index + 1.
            self._adopt(self._segments, self._faulty, meta.index)

    def compact(self, index: int) -> None:
        """Remove segments whose every index is `<= index`; a durable snapshot must cover `index`."""
        invariant(index <= self._snap_index, "compact only what a durable snapshot covers")
        self.sync()
        # The active segment stays even when the snapshot covers all of it: appends continue in it.
        active = self._active
        covered = [s for s in self._segments if s.last <= index and (s.name is None or s.name != active)]
        if not covered:
            return
        if self._hs_file.sequence < self._hs_sequence:
            # The removed segments may hold the newest hard-state record, and the witness lags it (only
            # after a restart whose witness write was lost whole). The checkpoint copies that record, so a
            # power cut tearing it leaves a slot the log still covers.
            self._checkpoint()
        # Else (after every `sync` that saved a hard state) the witness's newest slot already holds the
        # newest state with the highest sequence: a checkpoint would copy nothing new, and a power cut
        # tearing it would leave a bad slot no newer log record covers: damage for a write that was never
        # acknowledged (register simulator seed 5, `tests/wal/test_wal_witness_torn.py`).
        for segment in covered:
            if segment.name is not None:
                handle = self._handles.pop(segment.name, None)
                if handle is not None:
                    handle.close()
                self._disk.remove(f"{WAL_DIR}/{segment.name}")
        # One directory fsync: every removed index is covered by the snapshot, so a crash that keeps some
        # of these files and loses others leaves nothing a restart would read (R5).
        self._disk.sync_dir(WAL_DIR)
        self._segments = [s for s in self._segments if s not in covered]

    def close(self) -> None:
        """Close files. Unsynced appends are not made durable (call `sync()` first if they must be)."""
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        self._hs_file.close()
