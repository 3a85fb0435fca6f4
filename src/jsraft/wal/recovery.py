"""Opening a WAL: read hard state, snapshot and log back, and act on what the recovery rules decide (L2).

Owns: `Recovered` (what a Raft group restarts from) and the fallbacks for lost hard state. Its writes:
cutting a provably torn tail (rule R1 in `scan`) or a stale one (R7, `vouch`), and a new hard state when
the old one is lost; what else it decides (`repairing`, rewriting damaged slots, removing segments a
snapshot covers once the hard state they may hold is persisted) `Wal` writes as it opens (`Opened`).

Decisions, in order:
  1. No hard-state file, no segment, no snapshot: a new WAL; create it (`wal/` and the hard state; the
     `snapshots/` directory comes with the first snapshot, `snapshots` invariant 5).
  2. Hard state: the valid one with the highest sequence among the two slots of the witness file
     (`hardstate`) and the `WAL_HARD_STATE` records of the segments (`scan` R6; a torn last record is cut
     with the torn tail under R1, so the cycle's record before it is used). A bad slot is damage only if
     no valid segment record is newer than the good slot: term, vote and the repairing flag reach the
     witness only after a segment record with the same values was fsynced (`log`), so a newer valid record
     shows that whatever the bad slot held, torn or rotted, is also in the log. Otherwise (a slot whose
     content the log does not cover) it is damage, as is a missing witness: both slots bad, or the file
     missing while data exists: term and vote are unknown, and the safe fallback is
     `current_term` = the highest term in any log record or the snapshot, no vote, `vote_fence_term` = that
     term (the core then refuses to vote again in it, `raft.vote_fence`), repairing (a lost slot may have held a vote in a
     higher term, and a repairing replica's vote does not count toward a majority), `acked_watermark` =
     the recovered last index, and no torn-tail cut (every index may have been acknowledged).
  3. Snapshot: the newest that verifies; any newer unreadable one → repairing (never a silent fallback).
  4. Log: `scan.scan_log` with rules R1–R5; R1 cuts are applied here (truncate + fsync, or remove +
     directory fsync when nothing valid is left in the segment).
  5. Term floor: a log record in a term above the stored `current_term` raises it (vote unknown).
  6. Watermark: the log must reach the acked watermark, and the entry there must have the term the hard
     state recorded with it (`format`: the watermark term). A mismatch means the log is an older version
     of itself (a rolled-back write), even if every record in it verifies.
  7. Repairing if: stored so, hard state lost, any corruption, a missing segment, an unreadable snapshot,
     or a watermark problem (6). It is persisted before `open` returns, as a cycle's hard state is: a
     record in the log, fsynced, then the witness (`Wal`), so a power cut tearing the witness write leaves
     a slot the log covers (decision 2), not damage. Only a lost hard state goes to the witness directly.
  8. Stale tail (R7, `vouch`): above the acked watermark, the log keeps only what the newest hard state's
     log end vouches for (entries it held then, or a later cycle's after the record it names); the rest,
     never acknowledged, is cut durably after a checkpoint, and reported but not as damage. A stale entry
     above the watermark must not be served as log: the core would take it as its own (last `(index,
     term)` in vote comparisons, a match in a leader's consistency check) although this replica removed it
     and never acknowledged it since, and when not repairing every entry returned is the one last written.

Imports: L0, L1, attrs. Reference: DESIGN.md §4.
"""

from __future__ import annotations

import attrs

from jsraft.disk.base import Disk
from jsraft.errors import invariant
from jsraft.raft.types import Entry, HardState, SnapshotMeta
from jsraft.wal.format import (
    ANCHOR_NONE, HARD_STATE_FILE, SEGMENT_FILE_TYPE, TEMP_SUFFIX, WAL_DIR, LogEnd, parse_segment_name,
    read_checked,
)
from jsraft.wal.hardstate import HardStateFile, SlotRead, read_slots
from jsraft.wal.scan import WATERMARK_UNKNOWN, HardStateRecord, LogScan, newest_hard_state, scan_log
from jsraft.wal.snapshots import list_snapshots, load_newest
from jsraft.wal.vouch import STALE_TAIL_REASON, anchored, cut_log, stale_tail

TORN_TAIL_REASON = "torn tail cut"  # the prefix of the finding for a rule R1 cut (a normal crash)
STALE_SLOT_REASON = "hard-state slot rewritten"  # a bad slot the log covers (decision 2): not damage


@attrs.frozen(kw_only=True)
class Recovered:
    """What a Raft group restarts from.

    `entries`: every good entry after the snapshot, in index order; faulty ones are left out.
    `faulty`: indexes whose record is damaged or missing but whose place in the log is known from its
    neighbours; they must be fetched from a peer (`Wal.replace`). `reasons`: one line per finding.
    When `repairing`, `entries` may also hold records that verify but are stale (a rolled-back write
    restores an older, self-consistent stretch of the log; it is detected where it meets newer records or
    the watermark, not record by record), so a repairing replica must check its whole log against the
    leader's terms before trusting it. When not repairing, every entry up to the watermark is the one
    that was acknowledged.
    """

    hard_state: HardState
    snapshot: tuple[SnapshotMeta, bytes] | None
    entries: list[Entry]
    faulty: frozenset[int]
    repairing: bool
    reasons: list[str]
    torn_tail_bytes_cut: int

    def damage_findings(self) -> tuple[str, ...]:
        """Every finding that means damage: all but torn-tail cuts (a crash mid-write is normal) and bad
        slots a newer log record covers (decision 2).

        The runtime passes these as `RestoredState.repair_reasons`, which makes the replica repairing
        (the core's rule 2) even where the WAL itself does not say repairing: one bad hard-state slot the
        log does not cover, from which recovery falls back to the other. A bit flip at rest can hit the
        *newest* slot, whose vote was already granted; the older slot has forgotten it, and the replica
        could vote twice in one term (found by the simulator, `double-vote`). Repairing, it votes only
        after a leader has repaired it, and not in the term it may have voted in (raft `repair`).
        """
        return tuple(reason for reason in self.reasons
                     if not reason.startswith((TORN_TAIL_REASON, STALE_SLOT_REASON, STALE_TAIL_REASON)))



@attrs.define(kw_only=True)
class Opened:
    """Everything `Wal` is built from (internal)."""

    hs_file: HardStateFile
    hard_state: HardState
    snapshot: SnapshotMeta | None
    scan: LogScan
    hs_sequence: int  # the highest hard-state sequence written so far (slots and records)
    anchor: int  # the newest hard-state record in the log (`format.LogEnd`), 0 if none; ANCHOR_NONE: none the
    # newest hard state was saved after is there (after an R7 cut)
    restate: bool  # `Wal` must persist `hard_state`: in the log, then the witness (decision 7), before...
    covered: list[str]  # ...it removes these segments, which a snapshot covers (and may hold its newest record)


def list_segments(disk: Disk) -> list[tuple[int, str]]:
    """`(first index, name)` of each segment, in order; removes temp files of an interrupted rewrite."""
    if not disk.is_dir(WAL_DIR):
        return []
    found = []
    for name in disk.listdir(WAL_DIR):
        if name.endswith(TEMP_SUFFIX):
            disk.remove(f"{WAL_DIR}/{name}")  # the rename never happened: the old segment is intact
            continue
        first = parse_segment_name(name)
        if first is not None:
            found.append((first, name))
    return sorted(found)


def _read_segments(disk: Disk, snap_index: int) -> tuple[list[tuple[str, int, bytes]], list[str],
                                                         HardStateRecord | None]:
    """Contents of the segments not wholly covered by the snapshot, the names of the covered ones (R5: to be
    removed once the hard state is checkpointed) and the newest hard-state record among those."""
    segments = list_segments(disk)
    keep, covered = [], []
    for position, (first, name) in enumerate(segments):
        following = segments[position + 1][0] if position + 1 < len(segments) else None
        (covered if following is not None and following <= snap_index + 1 else keep).append(name)
    found = [newest_hard_state(disk.read_file(f"{WAL_DIR}/{name}")) for name in covered]
    best = _newest(*found)
    files = [(name, parse_segment_name(name) or 0, read_checked(disk.read_file, f"{WAL_DIR}/{name}", SEGMENT_FILE_TYPE))
             for name in keep]
    return files, covered, best


def _newest(*candidates: HardStateRecord | SlotRead | None) -> HardStateRecord | None:
    """The valid candidate with the highest sequence (slots are converted), or None."""
    best: HardStateRecord | None = None
    for found in candidates:
        if isinstance(found, SlotRead):
            if found.hard_state is None:
                continue
            found = HardStateRecord(hard_state=found.hard_state, sequence=found.sequence,
                                    watermark_term=found.watermark_term, log_end=found.log_end)
        if found is not None and (best is None or found.sequence > best.sequence):
            best = found
    return best


def remove_covered(disk: Disk, names: list[str]) -> None:
    """Remove segments a snapshot covers (once the hard state they may hold is persisted elsewhere)."""
    for name in names:
        disk.remove(f"{WAL_DIR}/{name}")
    if names:
        disk.sync_dir(WAL_DIR)


@attrs.frozen(kw_only=True)
class _Witness:
    """What the hard-state file held: its slots (None if the file is missing) and its open handle."""

    slots: tuple[SlotRead, SlotRead] | None
    hs_file: HardStateFile | None
    header_ok: bool = True

    @property
    def newest(self) -> SlotRead | None:
        valid = [slot for slot in self.slots or () if slot.hard_state is not None]
        return max(valid, key=lambda slot: slot.sequence) if valid else None


def _load_witness(disk: Disk) -> _Witness:
    if not disk.exists(HARD_STATE_FILE):
        return _Witness(slots=None, hs_file=None)
    slot0, slot1, header_version = read_slots(disk)
    # An older build's header (version 1) is no damage: it is rewritten like a damaged one, silently.
    return _Witness(slots=(slot0, slot1), hs_file=HardStateFile(disk, (slot0, slot1), header_version),
                    header_ok=header_version != 0)


def _witness_findings(witness: _Witness, log_best: HardStateRecord | None,
                      reasons: list[str]) -> tuple[bool, bool]:
    """Decision 2 for the witness file: append its findings; (the hard state counts as lost, a bad slot the
    log does not cover is left). Such a slot stays in the file as evidence until a new state is saved
    (`hardstate` invariant 5), so a crash before then finds the same damage again."""
    if witness.slots is None:
        reasons.append("hard-state file missing while log or snapshot data exists")
        return True, False
    if not witness.header_ok:
        reasons.append("hard-state file header damaged (slots are checked on their own; header rewritten)")
    good = witness.newest
    covered = good is not None and log_best is not None and log_best.sequence > good.sequence
    uncovered = False
    for number, slot in enumerate(witness.slots):
        if slot.hard_state is None:
            if covered:
                reasons.append(f"{STALE_SLOT_REASON}: slot {number} {slot.problem}; a newer hard-state record "
                               "in the log holds everything it could have held")
            else:
                reasons.append(f"hard-state slot {number} {slot.problem}")
                uncovered = True
    return good is None, uncovered


def _term_at(scan: LogScan, meta: SnapshotMeta | None, index: int) -> int:
    """Term of a good `index` (the snapshot's own index included); 0 if unknown."""
    if meta is not None and index <= meta.index:
        return meta.term if index == meta.index else 0
    return scan.term_at(index)


def _watermark_problem(stored: HardStateRecord | None, scan: LogScan, meta: SnapshotMeta | None) -> str | None:
    """Checks that need the hard state and the log together: the log must reach the acked watermark, and the
    entry there must have the term recorded when it was acknowledged (else the log is a stale version)."""
    if stored is None:
        return None
    watermark = stored.hard_state.acked_watermark
    if scan.last_index < watermark:
        return f"log recovered to {scan.last_index} below acked watermark {watermark}"
    actual = _term_at(scan, meta, watermark)
    if stored.watermark_term and actual and actual != stored.watermark_term:
        return (
            f"entry at acked watermark {watermark} has term {actual}, but term {stored.watermark_term} was "
            "acknowledged: the log is a stale (rolled-back) version"
        )
    return None


def _persist(disk: Disk, hs_file: HardStateFile | None, hs: HardState, watermark_term: int, log_end: LogEnd,
             at_least: int) -> tuple[HardStateFile, int]:
    """Persist repairing (and any fallback) before anything acts on it, as the newest hard state (a
    sequence of at least `at_least`); rewrite damaged slots too. Returns the file and the sequence used."""
    if hs_file is None:
        hs_file = HardStateFile.create(disk, hs)
    sequence = hs_file.save(hs, watermark_term, log_end, at_least)
    if not hs_file.intact:
        sequence = hs_file.save(hs, watermark_term, log_end, sequence + 1)
    return hs_file, sequence


def _apply_cut(disk: Disk, scan: LogScan, reasons: list[str]) -> int:
    """R1: cut the provably torn tail the scan found, durably, before anything is appended after it."""
    torn = scan.torn
    if torn is None:
        return 0
    path = f"{WAL_DIR}/{torn.name}"
    if torn.remove_file:
        disk.remove(path)
        disk.sync_dir(WAL_DIR)
        removed = scan.segments.pop()
        invariant(removed.name == torn.name, "R1 only ever cuts the last segment")
    else:
        handle = disk.open(path)
        handle.truncate(torn.offset)
        handle.sync()
        handle.close()
    reasons.append(f"{TORN_TAIL_REASON}: {torn.bytes_cut} bytes at offset {torn.offset} of segment {torn.name}")
    return torn.bytes_cut


def _drop_covered(scan: LogScan, snap_index: int) -> list[str]:
    """Forget segments whose every index the snapshot covers, e.g. after a snapshot install; returns their
    names, to be removed once the hard state is checkpointed."""
    # An entry-less segment named snap_index + 1 stays: appends (and `Wal`'s restate) go on in it.
    covered = [s for s in scan.segments if s.last <= snap_index and s.first <= snap_index]
    scan.segments = [s for s in scan.segments if s not in covered]
    return [s.name for s in covered if s.name is not None]


def _settle_hard_state(stored: HardState | None, scan: LogScan, reasons: list[str]) -> HardState:
    if stored is None:
        reasons.append(
            f"hard state lost: term set to {scan.max_term} (highest seen in log and snapshot), vote unknown"
        )
        return HardState(
            current_term=scan.max_term,
            vote_fence_term=scan.max_term,  # whether (and whom) it voted for there is unknown
            acked_watermark=scan.last_index,
            repairing=True,
        )
    if scan.max_term > stored.current_term:
        # Entries of a later term reached the log but the hard state saying so did not: the term is at
        # least that, and whether this replica voted in it is unknown.
        reasons.append(f"term raised from {stored.current_term} to {scan.max_term} (seen in the log)")
        return attrs.evolve(stored, current_term=scan.max_term, voted_for=None,
                            vote_fence_term=max(stored.vote_fence_term, scan.max_term))
    return stored


def _vouch_and_persist(disk: Disk, witness: _Witness, hs: HardState,
                       found: tuple[HardStateRecord | None, HardStateRecord | None], scan: LogScan,
                       meta: SnapshotMeta | None, must_persist: bool, sequence: int,
                       reasons: list[str]) -> tuple[HardStateFile, int, int, bool]:
    """Decision 8, and how 7 persists: R7 (`vouch`) on the newest hard state and the newest log record
    (`found`). Returns the file, the highest sequence written, the anchor, and whether `Wal` must persist
    `hs` (`Opened.restate`); only a lost hard state, and a cut that may remove the newest record, write
    the witness here."""
    best, log_best = found
    hs_file = witness.hs_file
    anchor = log_best.sequence if log_best is not None else 0
    if best is not None and not anchored(best, log_best):
        anchor = ANCHOR_NONE  # no record in the log vouches for what follows: `Wal` writes one
    stale = None if best is None else stale_tail(best, log_best, scan, meta.index if meta else 0,
                                                 lambda index: _term_at(scan, meta, index))
    watermark_term = _term_at(scan, meta, hs.acked_watermark)
    if hs_file is None or witness.newest is None:
        # Hard state lost (damage): a new file, or both slots rewritten; the log has nothing newer to lose.
        log_end = LogEnd(scan.last_index, _term_at(scan, meta, scan.last_index), anchor)
        hs_file, sequence = _persist(disk, hs_file, hs, watermark_term, log_end, sequence + 1)
    if stale is not None:
        keep, why = stale
        anchor = ANCHOR_NONE
        if best is not None and witness.newest is not None and best.sequence > witness.newest.sequence:
            # The newest hard state is a log record the cut may take: the witness holds it first (torn, the
            # record, not yet cut, covers it). Else the witness already holds it, and a crash before `Wal`
            # persists again leads the next open to the same cut.
            log_end = LogEnd(keep, _term_at(scan, meta, keep), anchor)
            hs_file, sequence = _persist(disk, hs_file, hs, watermark_term, log_end, sequence + 1)
        reasons.append(f"{STALE_TAIL_REASON}: {cut_log(disk, scan, keep)} bytes, {why}")
    restate = stale is not None or must_persist or not hs_file.intact or anchor == ANCHOR_NONE
    return hs_file, sequence, anchor, restate


def recover(disk: Disk) -> tuple[Opened, Recovered]:
    """Open (or create) the WAL under `disk`; see the module docstring for the order of decisions."""
    reasons: list[str] = []
    fresh = not disk.exists(HARD_STATE_FILE) and not list_segments(disk) and not list_snapshots(disk)
    disk.makedirs(WAL_DIR)  # `snapshots/` waits for the first snapshot (`snapshots` invariant 5)
    if fresh:
        HardStateFile.create(disk, HardState())
    witness = _load_witness(disk)
    snap = load_newest(disk)
    reasons.extend(snap.problems)
    meta = snap.snapshot[0] if snap.snapshot is not None else None
    snap_index, snap_term = (meta.index, meta.term) if meta is not None else (0, 0)
    files, covered, covered_best = _read_segments(disk, snap_index)
    before_scan = _newest(witness.newest, covered_best) if witness.newest is not None else None
    scan = scan_log(
        files,
        snap_index=snap_index,
        snap_term=snap_term,
        watermark=WATERMARK_UNKNOWN if before_scan is None else before_scan.hard_state.acked_watermark,
        hs_sequence=1 << 64 if before_scan is None else before_scan.sequence,
        allow_torn=True,
    )
    cut = _apply_cut(disk, scan, reasons)
    covered += _drop_covered(scan, snap_index)
    log_best = _newest(covered_best, scan.hard_state)
    lost, evidence = _witness_findings(witness, log_best, reasons)
    best = None if lost else _newest(witness.newest, log_best)
    stored = best.hard_state if best is not None else None
    reasons.extend(scan.reasons)
    hs = _settle_hard_state(stored, scan, reasons)
    problem = _watermark_problem(best, scan, meta)
    reasons.extend([problem] if problem else [])
    hs = attrs.evolve(hs, repairing=hs.repairing or scan.corrupt or bool(snap.problems) or bool(problem))
    sequence = max((found.sequence for found in (witness.newest, log_best) if found is not None), default=1)
    if evidence and not lost and witness.hs_file is not None:
        witness.hs_file.keep_evidence(hs)  # the bad slot the log does not cover (`hardstate` invariant 5)
    hs_file, sequence, anchor, restate = _vouch_and_persist(disk, witness, hs, (best, log_best), scan, meta,
                                                            hs != stored or bool(covered), sequence, reasons)
    recovered = Recovered(
        hard_state=hs,
        snapshot=snap.snapshot,
        entries=scan.entries,
        faulty=frozenset(scan.faulty),
        repairing=hs.repairing,
        reasons=reasons,
        torn_tail_bytes_cut=cut,
    )
    return Opened(hs_file=hs_file, hard_state=hs, snapshot=meta, scan=scan, hs_sequence=sequence,
                  anchor=anchor, restate=restate, covered=covered), recovered
