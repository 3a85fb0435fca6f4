"""Rule R7: what the newest hard state vouches for above the acked watermark, and the cut of the rest (L2).

Owns: `stale_tail` (the decision, a pure function of the recovered hard state and log scan), `anchored`,
and `cut_log` (the durable cut `recovery` makes when it applies).

Why: a truncation removes entries by cutting the segment, and the next hard-state record is written where
they were. A rolled-back write at rest (SimDisk's `rollback_chunk`: a 4 KiB chunk reverts to an earlier
synced version) brings the removed entries back over those records: each verifies, chains to its
predecessor, and lies above the acked watermark, so neither the CRCs, nor `prev_term` (R4), nor the
watermark's term (recovery decision 6) can tell them from the log's own tail (seeds 115 and 245 of
`tests/wal/test_wal_corruption.py`). Such an entry was never acknowledged after the truncation, so cutting
it loses nothing; serving it as log would not be safe: the core would take it as its own (its last
`(index, term)` in vote comparisons, a match in a leader's consistency check), and `Recovered` promises that
when not repairing every entry is the one last written there. Every hard state (format version 3) therefore carries
its *log end* (`format.LogEnd`): the last index and its term when it was saved, and the *anchor*, the
newest hard-state record in the log then. Entries the log holds above that end are the tail of a later
cycle only if they lie after the anchor record; a checkpoint saved for a cut names no anchor at all.

R7, applied to the newest hard state H (watermark W, log end L with term T, anchor A), if H has a log end:
  a. (in `scan`) a record whose log end is below the entries before it: those entries are stale, junk in
     the middle of a segment (corruption, R2); the log resumes after the record.
  b. The log ends below L, or its entry at L does not have term T: entries up to L were durable when H was
     written, so the log lost its tail or holds a stale version of it; what lies above W cannot be trusted.
     Keep up to W.
  c. Else, if the newest record in the log is A (or A = 0 and the log holds none) and A's own log end is
     not above L: entries above L were appended after A, the log's own tail. Keep everything.
  d. Else (A is gone, or H was saved for a cut): entries above L cannot be told from stale ones. Keep up
     to L.
  What is not kept lies above W, above every index this replica acknowledged, so it is cut like a torn
  tail, durably (`cut_log`: later segments removed newest first, then the containing one truncated). If H
  is a log record newer than the witness, the cut may remove it: H goes to the witness first, with the new
  log end and no anchor (torn by a power cut, that write is covered by H's record, not yet cut). If H is
  the witness, the cut takes nothing it holds, and a crash halfway leads the next open to the same cut.
  `Wal` then appends the hard state to the log and the witness again (as `truncate_from` does after its
  cut), so the next cycle's entries lie after a record the witness names; it does the same whenever the
  newest hard state is not anchored (a crash between a cut's checkpoint and its record). The cut is
  reported (`STALE_TAIL_REASON`) but is no damage: nothing acknowledged is lost, and the log kept is the
  one acknowledged (up to W by its term, up to L by log matching at T). A snapshot newer than H (L below
  the snapshot's index) supersedes it: nothing is checked.

Invariants:
  1. `stale_tail` never keeps less than the acked watermark or the snapshot's index.
  2. `cut_log` leaves `scan` describing exactly the files: `last_index` is the kept index, no entry or
     faulty index above it, no segment starting above it.

Imports: L0, L1, siblings `format`, `scan`, `segment`. Reference: DESIGN.md §4 (torn tail vs corruption,
acked watermark), Raft paper §5.3 (log matching).
"""

from __future__ import annotations

from collections.abc import Callable

from jsraft.disk.base import Disk
from jsraft.wal.format import WAL_DIR
from jsraft.wal.scan import HardStateRecord, LogScan

STALE_TAIL_REASON = "stale tail cut"  # the prefix of the finding for an R7 cut (not damage)


def anchored(newest: HardStateRecord, log_best: HardStateRecord | None) -> bool:
    """R7c: the log holds the record `newest` was saved after, and that record does not end above it."""
    end = newest.log_end
    if end is None:
        return True
    if log_best is None:
        return end.anchor == 0
    if log_best.sequence != end.anchor:
        return False
    return log_best.log_end is None or log_best.log_end.index <= end.index


def stale_tail(newest: HardStateRecord, log_best: HardStateRecord | None, scan: LogScan, snap_index: int,
               term_at: Callable[[int], int]) -> tuple[int, str] | None:
    """R7b-d: `(last index to keep, why)` when entries above it are not vouched for; None to keep the log.
    `log_best` is the newest hard-state record in the log, `term_at` the term of a good index (0 if none)."""
    end = newest.log_end
    if end is None or end.index < snap_index:
        return None
    watermark, last = newest.hard_state.acked_watermark, scan.last_index
    if last < end.index:
        keep = watermark
        why = (f"the log ends at {last}, below {end.index} where it ended when the newest hard state was "
               "saved: it lost its tail at rest, and what remains above the acked watermark may be stale")
    elif end.term and term_at(end.index) != end.term:
        keep = watermark
        why = (f"entry {end.index} is faulty or of term {term_at(end.index)}, not {end.term} as when the newest "
               "hard state was saved: what lies above the acked watermark may be a stale version")
    elif anchored(newest, log_best):
        return None
    else:
        keep = end.index
        why = (f"the newest hard state was saved when the log ended at {end.index}, and the hard-state record "
               "it was saved after is not in the log: entries above cannot be told from stale ones")
    keep = max(keep, snap_index)
    if keep >= last:
        return None
    return keep, f"entries {keep + 1}..{last} above the acked watermark {watermark}: {why}"


def cut_log(disk: Disk, scan: LogScan, keep: int) -> int:
    """Remove every index above `keep` durably (newest segment first, then the containing one truncated and
    fsynced) and from `scan`; returns the bytes removed."""
    removed = 0
    while scan.segments and scan.segments[-1].first > keep:
        segment = scan.segments.pop()
        if segment.name is not None:
            removed += segment.size
            disk.remove(f"{WAL_DIR}/{segment.name}")
            disk.sync_dir(WAL_DIR)  # each removal durable before the next: a crash leaves a prefix
    segment = scan.segments[-1] if scan.segments else None
    if segment is not None and segment.last > keep:
        offset = segment.cut_from(keep + 1)
        if segment.name is not None:
            handle = disk.open(f"{WAL_DIR}/{segment.name}")
            handle.truncate(offset)
            handle.sync()
            handle.close()
            removed += segment.size - offset
            segment.size = segment.junk_at = offset
    scan.entries = [entry for entry in scan.entries if entry.index <= keep]
    scan.faulty = {index for index in scan.faulty if index <= keep}
    scan.last_index = keep
    if keep in scan.faulty and segment is not None and segment.first <= keep:
        # A faulty entry's term is only what its successor's record claimed; that record is gone now, so
        # the claim is too (`Wal.truncate_from` does the same): kept, it would refuse the leader's copy
        # of another term in `replace` (sim register seed 36245: a stale tail cut above a faulty 22).
        segment.terms[keep - segment.first] = 0
    return removed
