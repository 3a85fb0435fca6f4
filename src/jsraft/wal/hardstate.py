"""The hard-state file: two CRC'd slots, written alternately, each write fsynced (layer L2).

Owns: `hardstate` under a WAL's disk. Since segment format 2 the hard state of every cycle travels in the
WAL's own records (`log`); this file is the *witness*, and the checkpoint written before the WAL removes or
rewrites bytes that may hold hard-state records (compaction, truncation, repair). A copy outside the
segments is what lets recovery see a vote, a repairing flag or acknowledged entries that damage at rest at
the end of the log took away (a lost last segment, a cut tail, a rolled-back last chunk): the log alone
cannot show such a loss, since what is lost is the record that would tell. It is therefore still written and
fsynced after the segment in every cycle that saved a hard state (`Wal.sync`); written only when term, vote
or repairing change, `tests/wal/test_wal_corruption.py` lost acknowledged entries silently in 11 of 300
seeds (`bench/README.md`, "fsyncs per sync publish"). A witness slot torn by a power cut, or rotted, is
covered by the segment record fsynced before it (`recovery`, decision 2): not damage (issue #14).

Why the witness is a second fsync and not part of the segment's (issue #18; `bench/README.md`, "fsyncs per
sync publish"; pinned by `tests/wal/test_wal_witness_order.py`): one fsync gives no order between the pages
it flushes, and a crash inside it (SimDisk's `torn` rule: a prefix by offset; a real disk: any subset of
pages) can keep any part of the cycle. So a hard-state copy damage at the tail cannot reach (e.g. slots in
the head pages of the active segment) either carries this cycle's watermark, and can be durable while the
cycle's entries are not — a false "log below the acked watermark" after a plain crash, the replica turns
repairing, and a coordinated power cut can halt the group (a scratch build: 58 of 60 seeds) — or carries
only an earlier cycle's, and then nothing outside the tail vouches for the last acknowledged cycle, whose
loss at rest (tail cut, lost segment, rolled-back chunk) looks exactly like a crash before its fsync (a
scratch build: 61 of 109 faults silent; 37 of the 300 seeds of `test_wal_corruption.py`). The bytes a torn
cycle leaves and the bytes that damage leaves can be identical, and they need opposite verdicts; only a copy
made durable *after* the entries tells them apart, and that order costs the second fsync.

Writing in place would leave nothing valid if the write tore, so each write goes to the *older* slot and
carries a sequence above every one written before (slots and WAL records share one counter); recovery takes
the valid hard state with the highest sequence.

One exception keeps damage visible (invariant 5). A bad slot the log does not cover is *evidence*: it may
have held a newer term or vote than anything left (a lost vote: `recovery` decision 2), and what the
replica does about it — turn repairing, fence its vote through the node record's ceiling — lives in the
Raft core's next hard state, not in the one recovered. Overwriting that slot with the recovered state (a
restate at open, a checkpoint before a cut) would erase the evidence before the response is durable: a
crash in between, and the next open finds two good slots, an older vote, and votes again in the lost term
(simulator, consumer app, seed 9 with commits announced lazily: `double-vote`). So while the file holds
such evidence, a save with the recovered term, vote, fence and repairing flag goes over the good slot, in
place (torn, it leaves no valid slot at all: a lost hard state, damage again, never a silent one); the first
save that changes one of them — the replica's answer — replaces the evidence, as the alternation would.

Invariants:
  1. Slot `i` only ever holds sequences `s` with `s % 2 == i`: writes alternate, and a write after a bad
     slot goes to the bad slot, so the last good state is never overwritten by the next write.
  2. `save()` returns only after the slot is fsynced.
  3. A slot is used only if its record verifies (CRC, kind, slot parity, body version, body); a damaged
     slot is never "repaired" from guesses, only overwritten by the next save.
  4. Each slot record names its body version (`format`), so a version 1 file whose header and one slot the
     first save of this build rewrote (one fsync, in no guaranteed order) still reads right.
  5. A slot marked as evidence (`keep_evidence`: damaged, and the log does not cover it) is not written
     while the state saved has the vote fields of the one recovered with it; the first state that changes
     them is written there, and ends the exception.

Imports: L0, L1, attrs. Reference: DESIGN.md §4 (term and vote durable before use; two slots).
"""

from __future__ import annotations

import attrs

from jsraft.codec.records import HEADER_BYTES, Kind, read_record
from jsraft.disk.base import Disk, DiskFile
from jsraft.errors import CorruptRecord, invariant
from jsraft.raft.types import HardState
from jsraft.wal.format import (
    HARD_STATE_FILE,
    HARD_STATE_FILE_BYTES,
    HARD_STATE_FILE_TYPE,
    HARD_STATE_FORMAT_VERSION,
    HARD_STATE_SLOT_BYTES,
    HARD_STATE_SLOT_OFFSETS,
    LogEnd,
    decode_hard_state,
    encode_hard_state,
    file_header,
    file_header_version,
    read_checked,
    slot_body_version,
)


@attrs.frozen(kw_only=True)
class SlotRead:
    """What one slot held: its state and sequence, or why it is unusable."""

    hard_state: HardState | None
    sequence: int = -1
    watermark_term: int = 0  # term of the entry at `acked_watermark` when it was saved; 0 if unknown
    problem: str = ""
    log_end: LogEnd | None = None  # where the log ended when it was saved (`format`); None before version 3


def _read_slot(buffer: bytes, slot: int) -> SlotRead:
    start = HARD_STATE_SLOT_OFFSETS[slot]
    region = buffer[start : start + HARD_STATE_SLOT_BYTES]
    if len(region) < HEADER_BYTES:
        return SlotRead(hard_state=None, problem="missing (file too short)")
    try:
        record = read_record(region, 0)
        body_version = slot_body_version(record.ident_b)
        if record.kind != Kind.HARD_STATE or record.ident_a % 2 != slot or body_version == 0:
            return SlotRead(hard_state=None, problem="holds a record that does not belong there")
        body = decode_hard_state(region[HEADER_BYTES : record.length], body_version)
        return SlotRead(hard_state=body.hard_state, sequence=record.ident_a, watermark_term=body.watermark_term,
                        log_end=body.log_end)
    except CorruptRecord as error:
        return SlotRead(hard_state=None, problem=f"unreadable ({error.description})")


def read_slots(disk: Disk) -> tuple[SlotRead, SlotRead, int]:
    """Both slots of an existing hard-state file, and its header's format version (0 if the header is
    damaged; below `HARD_STATE_FORMAT_VERSION` for an older build's file, rewritten by the next save)."""
    buffer = read_checked(disk.read_file, HARD_STATE_FILE, HARD_STATE_FILE_TYPE)
    return _read_slot(buffer, 0), _read_slot(buffer, 1), file_header_version(buffer, HARD_STATE_FILE_TYPE)


def _vote_fields(hs: HardState) -> tuple[object, ...]:
    """What a replica's answer to a lost vote changes (term, vote, fence, repairing): a save that changes
    none of them (a commit hint, a lowered watermark before a cut) is not that answer (invariant 5)."""
    return hs.current_term, hs.voted_for, hs.vote_fence_term, hs.repairing


class HardStateFile:
    """The open hard-state file and which slot holds the newest state."""

    def __init__(self, disk: Disk, slots: tuple[SlotRead, SlotRead],
                 header_version: int = HARD_STATE_FORMAT_VERSION) -> None:
        self._disk = disk
        self._file: DiskFile | None = None
        self._valid = [slot.hard_state is not None for slot in slots]
        # A damaged header, or an older build's (version 1), is rewritten with the next save.
        self._header_ok = header_version == HARD_STATE_FORMAT_VERSION
        # With no valid slot, pretend slot 1 holds sequence 1: the next write then goes to slot 0 with
        # sequence 2, above anything a damaged slot could have claimed to be before.
        best = max(
            (slot.sequence, index) for index, slot in enumerate(slots) if slot.hard_state is not None
        ) if any(self._valid) else (1, 1)
        self.sequence, self.newest_slot = best
        # Invariant 5: the damaged slot kept as evidence, and the recovered state it is kept from.
        self._evidence: tuple[int, HardState] | None = None

    def keep_evidence(self, recovered: HardState) -> None:
        """Invariant 5, for a file whose one bad slot the log does not cover (the caller's finding; a no-op
        with two good slots or none): keep that slot until a state whose vote fields (`_vote_fields`) differ
        from `recovered`'s is saved."""
        if self._valid.count(True) == 1:
            self._evidence = (self._valid.index(False), recovered)

    @staticmethod
    def create(disk: Disk, hs: HardState) -> "HardStateFile":
        """Write a new file atomically, both slots valid (sequences 0 and 1), so a fresh WAL never reports
        a damaged slot."""
        content = bytearray(HARD_STATE_FILE_BYTES)
        content[: len(file_header(HARD_STATE_FILE_TYPE))] = file_header(HARD_STATE_FILE_TYPE)
        for slot, offset in enumerate(HARD_STATE_SLOT_OFFSETS):
            record = encode_hard_state(hs, slot, 0, LogEnd(0, 0, 0))
            content[offset : offset + len(record)] = record
        disk.write_atomic(HARD_STATE_FILE, bytes(content))
        empty = LogEnd(0, 0, 0)
        return HardStateFile(disk, (SlotRead(hard_state=hs, sequence=0, log_end=empty),
                                    SlotRead(hard_state=hs, sequence=1, log_end=empty)))

    @property
    def intact(self) -> bool:
        """Both slots and the file header verify, the header of this build's version."""
        return all(self._valid) and self._header_ok

    def save(self, hs: HardState, watermark_term: int, log_end: LogEnd, at_least: int = 0) -> int:
        """Write `hs` (with its watermark term and log end, `format`) to the older (or damaged) slot and fsync
        it; returns the sequence it was written with: the lowest above both the newest slot's and
        `at_least - 1` that has the slot's parity."""
        slot = 1 - self.newest_slot
        if self._evidence is not None:
            evidence, recovered = self._evidence
            if _vote_fields(hs) == _vote_fields(recovered):
                slot = 1 - evidence  # in place, over the good slot (invariant 5)
            else:
                self._evidence = None  # the response is what this write makes durable
        sequence = max(self.sequence + 1, at_least)
        sequence += sequence % 2 != slot
        invariant(sequence % 2 == slot, "hard-state slot parity: slot i holds sequences s with s % 2 == i")
        record = encode_hard_state(hs, sequence, watermark_term, log_end)
        invariant(len(record) <= HARD_STATE_SLOT_BYTES, "a hard-state record must fit its slot")
        if self._file is None:
            self._file = self._disk.open(HARD_STATE_FILE)
            if self._file.size() < HARD_STATE_FILE_BYTES:
                self._file.truncate(HARD_STATE_FILE_BYTES)
        if not self._header_ok:
            self._file.pwrite(0, file_header(HARD_STATE_FILE_TYPE))  # synced with the slot below
            self._header_ok = True
        self._file.pwrite(HARD_STATE_SLOT_OFFSETS[slot], record)
        self._file.sync()
        self.sequence, self.newest_slot = sequence, slot
        self._valid[slot] = True
        return sequence

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
