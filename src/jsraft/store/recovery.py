"""FileStore recovery: rebuild the in-memory state from block files, classify every problem.

Owns: opening a store directory (`recover`), the fast-recovery index (`write_index`), and the
verification of a running store (`scan_live`).

Recovery walks every block in number order (or loads the index and walks only what was written after
it). Each block is scanned with `codec.scan_records`:
  - a bad tail of the *newest* block with nothing valid after it is a torn write and is cut; because
    `sync()` writes a `STORE_SYNC` record before each fsync, such a tail is never synced data;
  - anything else that does not verify is damage: scanning resumes at the next valid record, and the
    sequences the damage hid are found as a gap in the natural sequence order (`corrupt`);
  - a gap with no damage beside it (a lost block, a lost head) is `missing`;
  - a damaged region that hides no sequence may have been a `TOMBSTONE`: the delete state of
    everything before it is then unknown, and is reported as a `tombstone` fault.

Invariants:
  1. Recovery never cuts a record that is followed by a valid record.
  2. Every sequence in `[head, last_seq]` is live, deleted by a record, or listed as a fault.
  3. The index is trusted only when every block it lists exists with the same size and tail bytes and
     its totals are the sums of its parts; otherwise it is ignored and every block is scanned
     (`fs_index`). What it vouches for is read and CRC-checked later, in the background (`fs_verify`).
  4. A block read that shows damage or a torn tail is read again before either is believed: a read
     error is not the file's content (FileStore invariant 4).
  5. A newest block file that is empty or a strict prefix of its preamble is a creation a crash
     interrupted (`BlockFiles.create` syncs the preamble before the block takes a message): its preamble
     is written again, nothing is reported; any other bad header is damage.
  6. After recovery the newest block ends at `last_seq`, across a trailing gap (the newest synced records
     damaged or lost, or a compact past the end): appends extend the newest block from its `last_seq`,
     so a block that ended below the store's last sequence took the next message one slot early and
     covered one sequence more than its offsets hold (the simulator's `IndexError`, stream seed 746).
     A newest block holding no slot starts after the gap instead of holding one per gap sequence.
  7. A natural record always lies above every `STORE_SYNC` before it (a sync records `last_seq`, appends
     go above it), so a message record at or below one is a repair's: it first makes the sequences the
     sync covered a gap, then fills its own (`claim_synced`). Without this, the newest message damaged and
     repaired before any append read as damage that hid no sequence — the delete state of everything
     before it "unknown" at the next full scan (a false `tombstone` fault a peer had to settle).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from jsraft.codec.records import (
    FILE_HEADER_BYTES,
    HEADER_BYTES,
    Kind,
    RecordView,
    ScanResult,
    scan_records,
)
from jsraft.errors import BadFileFormat
from jsraft.store.base import FaultKind, msg_size
from jsraft.store.blocks import (
    Block,
    block_preamble,
    check_file_header,
    content_crc,
    message_subject,
    parse_block_name,
)
from jsraft.store import fs_index, fs_ops, fs_remove, fs_unreadable, fs_verify

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore

_RANGE = struct.Struct("<QQ")
_U32 = struct.Struct("<I")
_MESSAGE_KINDS = (Kind.MSG, Kind.MSG_ZSTD, Kind.ERASED)


class _Rebuild:
    """What the walk over the records has established so far."""

    def __init__(self, store: "FileStore") -> None:
        self.store = store
        self.covered = 0  # highest sequence covered by a natural record
        self.damage_pending = 0  # bytes of damage seen since the last natural record
        self.gaps: list[tuple[int, int, FaultKind]] = []
        self.early_deletes: set[int] = set()  # tombstoned before their (damaged) record was placed
        self.max_sync = 0
        self.torn_bytes_cut = 0
        self.damaged_bytes = 0
        self.tombstone_damage_before = 0

    # Natural records (messages and skips in increasing order) --------------------------------

    def place(self, block: Block, seq: int) -> None:
        """Make `block` cover up to `seq - 1`, recording any gap before `seq` as a fault."""
        if seq > self.covered + 1:
            kind = FaultKind.corrupt if self.damage_pending else FaultKind.missing
            self.gaps.append((self.covered + 1, seq - 1, kind))
        elif self.damage_pending and self.damage_pending != HEADER_BYTES:
            # Damage that hid no sequence was some other record, possibly a TOMBSTONE: the delete
            # state of everything before it is unknown. A damaged record of exactly a header's size
            # has no body, so it was a SYNC, FIRST_SEQ or BLOCK_HEADER record, all of which later
            # records repeat (every STORE_SYNC carries the head), and it is harmless.
            self.tombstone_damage_before = max(self.tombstone_damage_before, self.covered)
        if block.last_seq < block.first_seq:
            block.first_seq = seq
            block.last_seq = seq - 1
        else:
            block.extend_to(seq - 1)
        self.damage_pending = 0

    def message(self, block: Block, view: RecordView, buffer: bytes) -> None:
        seq = view.ident_a
        if self.covered < seq <= self.max_sync:
            self.claim_synced(block)
        if seq <= self.covered:
            self.repair_record(block, view, buffer)
            return
        self.place(block, seq)
        block.extend_to(seq)
        self.covered = seq
        self.store.last_seq = max(self.store.last_seq, seq)  # lets later tombstones find it
        if view.kind == Kind.ERASED:
            return
        index = seq - block.first_seq
        record = buffer[view.offset : view.offset + view.length]
        subject, headers_len, payload_len = message_subject(record, view.kind)
        crc = content_crc(record, view.kind)
        block.offsets[index] = view.offset
        block.lengths[index] = view.length
        block.crcs[index] = crc
        size = msg_size(len(subject.encode()), headers_len, payload_len)
        block.msgs += 1
        block.bytes += size
        block.subjects[subject] = block.subjects.get(subject, 0) + 1
        self.store.account_add(seq, subject, size, crc)

    def repair_record(self, block: Block, view: RecordView, buffer: bytes) -> None:
        """A message record for a sequence already passed: written by `repair()`."""
        store, seq = self.store, view.ident_a
        if view.kind == Kind.ERASED:
            where = store.locate(seq)
            if where is not None and where[0] is block and where[1] == view.offset:
                store.detach(seq, where)
            return
        if store.fault_map.kind_of(seq) is None and not self._in_gap(seq):
            return  # the sequence is intact elsewhere or deleted: the older state stands
        record = buffer[view.offset : view.offset + view.length]
        subject, headers_len, payload_len = message_subject(record, view.kind)
        crc = content_crc(record, view.kind)
        store.fault_map.remove(seq, seq)
        self.gaps = _remove_from_gaps(self.gaps, seq)
        store.moved[seq] = (block.number, view.offset, view.length, crc)
        size = msg_size(len(subject.encode()), headers_len, payload_len)
        store.account_add(seq, subject, size, crc)
        fs_unreadable.count_moved(store, subject, size)

    def claim_synced(self, block: Block) -> None:
        """A message record at or below what an earlier `STORE_SYNC` reached is a repair record (invariant 7):
        the sequences that sync covered and no natural record placed were hidden by the damage before it
        (or lost), a gap like any other — not a damaged region that hid nothing, a possible lost TOMBSTONE."""
        self.place(block, self.max_sync + 1)
        self.covered = self.max_sync
        self.store.last_seq = max(self.store.last_seq, self.covered)

    def _in_gap(self, seq: int) -> bool:
        return any(lo <= seq <= hi for lo, hi, _ in self.gaps)

    def skip(self, block: Block, view: RecordView) -> None:
        first, count = view.ident_a, view.ident_b
        if first <= self.covered:
            return
        self.place(block, first)
        block.extend_to(first + count - 1)
        self.covered = first + count - 1
        self.store.last_seq = max(self.store.last_seq, self.covered)

    # Other records ------------------------------------------------------------------------------

    def tombstone(self, view: RecordView, buffer: bytes) -> None:
        body = buffer[view.offset + HEADER_BYTES : view.offset + view.length]
        for position in range(0, len(body) - len(body) % _RANGE.size, _RANGE.size):
            lo, hi = _RANGE.unpack_from(body, position)
            for seq in range(lo, hi + 1):
                if seq > self.covered:
                    self.early_deletes.add(seq)
                    continue
                fs_remove.remove(self.store, seq)
                self.store.fault_map.remove(seq, seq)
                self.gaps = _remove_from_gaps(self.gaps, seq)

    def first_seq_marker(self, view: RecordView) -> None:
        store = self.store
        store.touched = True
        new_head, lowest_block = view.ident_a, view.ident_b
        for seq in fs_remove.live_seqs_between(store, store.head, min(new_head - 1, self.covered)):
            fs_remove.remove(store, seq)
        store.head = max(store.head, new_head)
        store.lowest_block = max(store.lowest_block, lowest_block)
        # Written only when the store reached `new_head - 1` (a compact past the end writes nothing else
        # that says so: `fs_remove.jump`).
        self.max_sync = max(self.max_sync, new_head - 1)
        for seq in [s for s in store.moved if s < new_head]:
            del store.moved[seq]

    def finish(self) -> None:
        store = self.store
        last = max(self.covered, self.max_sync, store.last_seq)
        if last > self.covered:
            kind = FaultKind.corrupt if self.damage_pending else FaultKind.missing
            self.gaps.append((self.covered + 1, last, kind))
            if store.blocks:
                _end_newest_at(store.newest(), last)
        store.last_seq = last
        for lo, hi, kind in self.gaps:
            lo = max(lo, store.head)
            for seq in range(lo, hi + 1):
                if seq not in self.early_deletes:
                    store.fault_map.add(seq, seq, kind)
        if self.tombstone_damage_before >= store.head:
            store.fault_map.add(store.head, self.tombstone_damage_before, FaultKind.tombstone)
        store.recovery_report.update(
            torn_bytes_cut=self.torn_bytes_cut, damaged_bytes=self.damaged_bytes,
            faults=[(f.first, f.last, str(f.kind)) for f in store.fault_map.faults()],
        )


def _end_newest_at(newest: Block, last: int) -> None:
    """Make the newest block end at `last` (invariant 6): one that holds no slot yet starts after it (a
    jump, or a block created after the gap), any other covers the gap with empty slots."""
    if newest.last_seq < newest.first_seq:
        newest.first_seq, newest.last_seq = last + 1, last
    else:
        newest.extend_to(last)


def _remove_from_gaps(gaps: list[tuple[int, int, FaultKind]], seq: int) -> list[tuple[int, int, FaultKind]]:
    out: list[tuple[int, int, FaultKind]] = []
    for lo, hi, kind in gaps:
        if not lo <= seq <= hi:
            out.append((lo, hi, kind))
            continue
        if lo < seq:
            out.append((lo, seq - 1, kind))
        if seq < hi:
            out.append((seq + 1, hi, kind))
    return out


# --- Walking one block ------------------------------------------------------------------------


def _walk_block(rebuild: _Rebuild, block: Block, buffer: bytes, result: ScanResult, newest: bool) -> None:
    store = rebuild.store
    events: list[tuple[int, object]] = [(view.offset, view) for view in result.records]
    events += [(lo, (lo, hi)) for lo, hi in result.damaged]
    events.sort(key=lambda event: event[0])
    for _, event in events:
        if isinstance(event, RecordView):
            _apply(rebuild, block, event, buffer)
        else:
            rebuild.damage_pending += event[1] - event[0]
            rebuild.damaged_bytes += event[1] - event[0]
    block.size = len(buffer)
    if result.torn_tail is not None:
        if newest and store.read_only:
            rebuild.torn_bytes_cut += len(buffer) - result.torn_tail  # reported, not cut
        elif newest:
            # Torn write: at the physical end of the newest block, nothing valid after it, and after
            # the last STORE_SYNC (a synced record is always followed by one). The only cut allowed.
            handle = store.files.handle(block.number)
            handle.truncate(result.torn_tail)
            handle.sync()
            rebuild.torn_bytes_cut += len(buffer) - result.torn_tail
            block.size = result.torn_tail
        else:
            rebuild.damage_pending += len(buffer) - result.torn_tail
            rebuild.damaged_bytes += len(buffer) - result.torn_tail


def _apply(rebuild: _Rebuild, block: Block, view: RecordView, buffer: bytes) -> None:
    kind = view.kind
    if kind in _MESSAGE_KINDS:
        rebuild.message(block, view, buffer)
    elif kind == Kind.SKIP:
        rebuild.skip(block, view)
    elif kind == Kind.TOMBSTONE:
        rebuild.tombstone(view, buffer)
    elif kind == Kind.FIRST_SEQ:
        rebuild.first_seq_marker(view)
    elif kind == Kind.STORE_SYNC:
        rebuild.max_sync = max(rebuild.max_sync, view.ident_a)
        if view.ident_b > rebuild.store.head:
            rebuild.first_seq_marker(RecordView(view.offset, view.length, view.crc, Kind.FIRST_SEQ,
                                                view.ident_b, 0))
    elif kind != Kind.BLOCK_HEADER:
        rebuild.damage_pending += view.length  # a record kind that has no business in a block


def _read_block(store: "FileStore", number: int) -> bytes:
    handle = store.files.handle(number)
    return handle.pread(0, handle.size())


def _read_clean(store: "FileStore", number: int, start: int) -> tuple[bytes, ScanResult | None]:
    """The block's file and its scan from `start` (None: its file header is bad), read again while the
    read shows damage or a torn tail: a read error is neither cut as a torn write nor reported as damage
    (invariant 4); what every read shows is the file's."""
    for _ in range(fs_ops.REREADS_MAX + 1):
        buffer = _read_block(store, number)
        try:
            if start == FILE_HEADER_BYTES:
                check_file_header(buffer, 1)
        except BadFileFormat:
            result = None
        else:
            result = scan_records(buffer, start)
            if not result.damaged and result.torn_tail is None:
                break
    return buffer, result


def _interrupted_create(buffer: bytes, block: Block) -> bool:
    """Whether the newest block file is one whose creation was interrupted (invariant 5): empty, or a
    strict prefix of the preamble `BlockFiles.create` writes before the file is synced and used. It holds
    no message; anything else with a bad header is damage."""
    preamble = block_preamble(block.number, block.first_seq)
    return len(buffer) < len(preamble) and preamble.startswith(buffer)


def _finish_create(store: "FileStore", block: Block) -> None:
    """Write the interrupted block's preamble again, so appends after recovery land after a header (they
    used to start at offset 0 of the empty file, and the next full scan read the block as damage)."""
    block.size = 0
    if store.read_only:
        return
    handle = store.files.handle(block.number)
    handle.truncate(0)
    handle.append(block_preamble(block.number, block.first_seq))
    handle.sync()
    block.size = handle.size()


def recover(store: "FileStore", *, use_index: bool = True) -> None:
    disk = store.disk
    names = disk.listdir("")
    for name in names:
        if name.endswith(".tmp") and not store.read_only:
            disk.remove(name)  # an interrupted atomic write or block rewrite: the original stands
    numbers = sorted(n for n in (parse_block_name(name) for name in names) if n is not None)
    rebuild = _Rebuild(store)
    resume = fs_index.load_index(store, numbers, rebuild) if use_index else None
    for number in numbers:
        if resume is not None and number < resume[0]:
            continue
        block = store.files.by_number.get(number)
        if block is None:
            block = Block(number, rebuild.covered + 1)
            store.files.add(block)
        start = resume[1] if resume is not None and number == resume[0] else FILE_HEADER_BYTES
        buffer, result = _read_clean(store, number, start)
        if number == numbers[-1] and _interrupted_create(buffer, block):
            _finish_create(store, block)
            continue
        if result is None:  # a bad file header: the whole file is damage
            rebuild.damage_pending += len(buffer)
            rebuild.damaged_bytes += len(buffer)
            block.size = len(buffer)
            continue
        _walk_block(rebuild, block, buffer, result, newest=number == numbers[-1])
    rebuild.finish()
    if store.read_only:
        return
    if not store.blocks:
        store.new_block()
    fs_remove.drop_dead_head(store)


# --- Verifying a running store ------------------------------------------------------------------


def scan_live(store: "FileStore") -> None:
    """Re-read every block and check each live record's CRC; damaged ones become faults (`fs_verify`).
    Everything is then verified: nothing is left for the background verifier."""
    for block in list(store.blocks):
        try:
            buffer = _read_block(store, block.number)
        except OSError:
            buffer = b""
        region = fs_verify.region_of(buffer) if buffer else None
        for seq in fs_remove.live_seqs_between(store, block.first_seq, block.last_seq):
            where = store.locate(seq)
            if where is not None and where[0] is block:
                fs_verify.check_live(store, seq, where, region)
    for seq, (number, offset, length, crc) in list(store.moved.items()):
        block = store.files.by_number.get(number)
        if block is not None:
            fs_verify.check_live(store, seq, (block, offset, length, crc), None)
        else:
            store.detach(seq, (block, offset, length, crc), readable=False)
            store.fault_map.add(seq, seq, FaultKind.corrupt)
    store.unverified.clear()
    fs_unreadable.settle_all(store)
