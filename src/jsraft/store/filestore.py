"""`FileStore`: a stream's messages in block files, every record CRC-checked (layer L2).

Owns: the public API, reads, and the in-memory accounting (digest, counts, subject index). The rest is split
by role: `fs_append` (the append hot path), `fs_remove` (deletes, head cuts, limits), `fs_ops` (filtered reads,
purge, truncate, repair), `fs_deleted` (interior deletes), `fs_compress`, `recovery` and `fs_index` (opening a
store), `blockfiles` (the files), `blocks` (the block format), `fs_unreadable` (`detach`, and what a record
that no longer reads back counted for).

Invariants (beyond the `StreamStore` ones):
  1. Only the newest block is appended to. Deletes go there as `TOMBSTONE` records; a head that is cut
     away (limits, compact, purge, expiry) is recorded as a `FIRST_SEQ` marker before any block file is
     removed, so a lost first block can be told from a purged one.
  2. `sync()` writes a `STORE_SYNC` record and then fsyncs: a damaged record *before* a valid
     `STORE_SYNC` is corruption (reported), never a torn tail (cut).
  3. Message bodies are not kept in memory: per sequence only offset, length and CRC (12 bytes), plus
     a bounded cache of whole blocks for scans.
  4. A read verifies the record's CRC; a record that fails is recorded as a fault and never served.
     Every read a decision or the accounting rests on is verified too (`checked_record`: read again past
     the cache before the record counts as unreadable), so a read error never becomes a wrong subject,
     size or timestamp.
  5. All I/O goes through the `Disk` given to `open()`.
  6. The durable state is always a prefix of the store's history: the one overwrite of an existing record (`erase`)
     comes after a `sync()`, so no crash keeps it while losing an earlier append or removal.
  7. With a `background` runner a block roll's fsyncs run there (`fs_append` invariant 3); `sync()` waits
     for them first: what it vouches for (a snapshot, DESIGN §2) is durable with all before it.

Imports: L0, L1 (codec, subjects, disk protocol). Reference: DESIGN.md §3, §6; nats-server
`server/filestore.go` (ideas only).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from jsraft import subjects as subjectlib
from jsraft.codec.records import HEADER_BYTES, Kind, decode_message_body, encode_record
from jsraft.disk.base import Disk
from jsraft.errors import BadRequest, DamagedSequence, InvalidConfig, NoMessageFound, StoreClosed, invariant
from jsraft.store import (
    fs_append, fs_deleted, fs_index, fs_ops, fs_remove, fs_run, fs_truncate, fs_unreadable, recovery,
)
from jsraft.store.base import DIGEST_RANGE_SEQS, Background, Fault, StoreConfig, StoredMsg, StoreState
from jsraft.store.blockfiles import BlockFiles
from jsraft.store.blocks import Block, message_body, message_record_verifies
from jsraft.store.faultmap import FaultMap
from jsraft.store.fs_accounting import Accounting
from jsraft.store.limits_check import check_batch

_U64 = (1 << 64) - 1
_LEN = struct.Struct("<I")
_RANGE_SHIFT = DIGEST_RANGE_SEQS.bit_length() - 1


class FileStore(Accounting):
    """Use `FileStore.open(disk, config)`; the constructor alone does not recover."""
    copies_payloads = True  # append_batch and repair copy a payload they keep: it may be a view (machine.apply)

    def __init__(self, disk: Disk, config: StoreConfig, background: Background | None = None) -> None:
        self.config = config.validate()
        self.background = background  # None: every roll syncs inline (invariant 7)
        self.disk = disk
        self._closed = False
        self.read_only = False
        self.files = BlockFiles(disk)
        self.head = 1  # every sequence below `head` was removed on purpose
        self.touched = False  # anything happened (append, skip, compact, purge): state leaves 0/0
        self.lowest_block = 1  # the lowest block number that should exist
        self.last_seq = 0
        self.msgs = 0
        self.bytes = 0
        self.digest = 0
        self.ranges: dict[int, int] = {}
        self.range_counts: dict[int, int] = {}
        self.psim: dict[str, list[int]] = {}  # subject -> [count, first seq or 0, last seq or 0]
        self.moved: dict[int, tuple[int, int, int, int]] = {}  # seq -> (block, offset, length, crc)
        # Repair records' group (`fs_unreadable`): their bytes and per-subject counts, as a block keeps its own.
        self.moved_bytes = 0
        self.moved_subjects: dict[str, int] = {}
        self.changes = 0  # base invariant 7: bumped by every public call below that may remove or restore
        # Group (block number, or `fs_unreadable.MOVED`) -> sequences detached because their record stopped
        # reading back, whose bytes and subject count the group still holds until it is settled.
        self.unaccounted: dict[int, list[int]] = {}
        self.fault_map = FaultMap()
        self._first_live_hint = 0
        self._dirty = False
        self._sealed_since_index = 0  # bytes of blocks sealed since the index was written (`fs_append.roll`)
        self.recovery_report: dict[str, object] = {}
        self.unverified: dict[int, int] = {}  # block -> its bytes the index vouched for, not yet read (fs_verify)

    # --- Opening and closing ------------------------------------------------------------------

    @classmethod
    def open(cls, disk: Disk, config: StoreConfig | None = None, *, read_only: bool = False, use_index: bool = True,
             background: Background | None = None) -> "FileStore":
        """Recover the store in `disk`. `read_only` changes nothing on disk (no torn tail is cut, no file
        removed or created): for offline verification. `use_index=False` scans and verifies every record."""
        store = cls(disk, config or StoreConfig(), None if read_only else background)
        store.read_only = read_only
        try:
            recovery.recover(store, use_index=use_index)
        except BaseException:  # out of descriptors at its third block, say: the two opened are closed
            store.files.close()
            raise
        # Opening does not apply `config`'s limits. A crash can keep appended messages and lose the unsynced
        # tombstones that enforced limits on them, but the limits in force when they were written are the
        # log's knowledge, not the store's: `config` may be an earlier one (a snapshot's) or a later one, and
        # enforcing it here removed messages the group keeps. The stream's replay applies each entry's limits
        # at its position (stream/machine.py invariant 2); without a log, `update_config(config)` does.
        return store

    def close(self) -> None:
        if self._closed:
            return
        if not self.read_only:
            self.sync()
            fs_index.write_index_at_close(self)  # fs_index invariant 4
        self._closed = True
        self.files.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed()

    @property
    def blocks(self) -> list[Block]:
        return self.files.blocks

    def newest(self) -> Block:
        return self.files.newest()

    def new_block(self) -> Block:
        """Start the next block file; the previous newest must already be sealed."""
        number = self.files.newest().number + 1 if self.files.blocks else self.lowest_block
        return self.files.create(number, self.last_seq + 1)

    def write_records(self, data: bytes | list, length: int = 0) -> int:
        """Append framed records (bytes, or pieces: their join, `length` bytes) to the newest block; return where."""
        invariant(not self.read_only, "a read-only store never writes")
        self._dirty = True
        return self.files.append(data, length)

    def read_record(self, block: Block, offset: int, length: int) -> bytes:
        return self.files.read(block, offset, length)

    def locate(self, seq: int) -> tuple[Block, int, int, int] | None:
        """`(block, offset, length, crc)` of the live record for `seq`, or None."""
        if seq < self.head or seq > self.last_seq:
            return None
        block = self.files.block_for(seq)
        if block is not None:
            index = seq - block.first_seq
            offset = block.offsets[index]
            if offset:
                return block, offset, block.lengths[index], block.crcs[index]
        moved = self.moved.get(seq)
        if moved is not None:
            number, offset, length, crc = moved
            return self.files.by_number[number], offset, length, crc
        return None

    # --- Reads ----------------------------------------------------------------------------------

    def _verified(self, seq: int, where: tuple[Block, int, int, int]) -> tuple[bytes, int]:
        record = self.read_record(where[0], where[1], where[2])
        if not message_record_verifies(record, where[2], seq):
            self._damaged_on_read(seq, where)
        return record, record[8]

    def checked_record(self, seq: int, where: tuple[Block, int, int, int]) -> bytes | None:
        """The record of `seq` at `where`, verified (length, CRC, seq), or None when no read verifies.

        A read that does not verify is read again from the file, past the cache: a read error (a flipped
        bit on the way) must not be taken for the record's content — invariant 4 for every read a
        decision or the accounting rests on, not only for what is served."""
        block, offset, length, _ = where
        record = self.read_record(block, offset, length)
        for _ in range(fs_ops.REREADS_MAX):
            if message_record_verifies(record, length, seq):
                return record
            self.files.drop_cached(block.number)
            record = self.files.handle(block.number).pread(offset, length)
        return record if message_record_verifies(record, length, seq) else None

    def _damaged_on_read(self, seq: int, where: tuple[Block, int, int, int]) -> None:
        """A record that verified at recovery no longer reads back: stop serving it, report it (a fault,
        repaired from a peer). `detach` settles its accounting from a copy read again, if one verifies."""
        from jsraft.store.base import FaultKind

        self.detach(seq, where)
        self.fault_map.add(seq, seq, FaultKind.corrupt)
        raise DamagedSequence(seq, "corrupt")

    def detach(self, seq: int, where: tuple[Block, int, int, int], *, readable: bool = True) -> None:
        """Drop `seq` from the in-memory maps (not from disk), reading its record (verified) for the
        accounting; `readable=False`, or no read verifying, leaves its bytes and subject count owed by its
        group until that is settled (`fs_unreadable`)."""
        self.changes += 1
        fs_unreadable.detach(self, seq, where, readable)

    def load(self, seq: int) -> StoredMsg:
        self._check_open()
        kind = self.fault_map.kind_of(seq)
        if kind is not None:
            raise DamagedSequence(seq, str(kind))
        where = self.locate(seq)
        if where is None:
            raise NoMessageFound(f"no message found at sequence {seq}")
        record, kind_byte = self._verified(seq, where)
        body, _ = message_body(record, kind_byte)
        subject, headers, payload = decode_message_body(body)
        timestamp_ns = struct.unpack_from("<Q", record, 17)[0]
        return StoredMsg(subject=subject.decode(), seq=seq, headers=headers, payload=payload,
                         timestamp_ns=timestamp_ns)

    def load_run(self, start_seq: int, count_max: int, filters: str | Sequence[str] | None = None) -> list[StoredMsg]:
        """Consecutive live messages from `start_seq` in one read, up to what `load` must settle (`fs_run`)."""
        self._check_open()
        return fs_run.load_run(self, start_seq, count_max, filters)

    def held_run(self, first_seq: int, msgs: Sequence[Sequence], start: int = 0) -> int:
        """Where `msgs[start:]` stop being held byte for byte from `first_seq` on (`fs_run.held_run`)."""
        return fs_run.held_run(self, first_seq, msgs, start)

    # `deleted_ranges(first, last)`: the runs with no live message, from the block summaries (no read).
    deleted_ranges = fs_deleted.deleted_ranges
    count_live = fs_deleted.count_live  # live messages in `[first, last]`, from the block summaries (no read)
    verify_run = fs_run.verify_run  # `load_run`'s last sequence (0: none), its records checked, not decoded
    run_pays = fs_run.run_pays  # most of the block holding a sequence matches the filters (a run's hint)

    def subject_first(self, subject: str) -> int:  # (`fs_remove` reaches `fs_ops` through this)
        return fs_ops.subject_first(self, subject)

    def subject_sizes(self, subject: str) -> Iterator[int]:
        """Sizes of `subject`'s live messages, oldest first (for the `discard: new` dry run)."""
        return fs_ops.subject_sizes(self, subject)

    def subject_count(self, subject: str) -> int:
        return self.psim.get(subject, (0,))[0]

    def append(self, seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> None:
        self.append_batch(((seq, subject, headers, payload, timestamp_ns),))

    def append_batch(self, msgs: Sequence[tuple[int, str, bytes, bytes, int]]) -> None:
        self._check_open()
        if not msgs:
            return
        check_batch(self, msgs)
        self.touched = True
        expected = self.msgs + len(msgs)  # fewer after the limits: they removed some (base invariant 7)
        # Limits apply per message; one pass after the batch removes the same, unless they interleave.
        for run in ([msgs[i:i + 1] for i in range(len(msgs))] if fs_remove.limits_interleave(self, msgs) else [msgs]):
            fs_append.append_all(self, run)
            fs_remove.enforce_limits(self, {m[1] for m in run})
        self.changes += self.msgs != expected

    def skip(self, seq: int, count: int = 1) -> None:
        self._check_open()
        fs_append.skip(self, seq, count)

    def roll(self) -> Block:
        return fs_append.roll(self)  # seal the newest block (synced, compressed if configured), start one

    def delete(self, seq: int) -> bool:
        self._check_open()
        self.changes += 1
        return fs_remove.delete_many(self, [seq]) == 1

    def erase(self, seq: int) -> bool:
        """Delete, then overwrite the record in place with an `ERASED` record of the same length."""
        self._check_open()
        self.changes += 1
        where = self.locate(seq)
        if where is None:
            return False
        block, offset, length, _ = where
        fs_remove.delete_many(self, [seq])
        if block not in self.files.blocks:  # its block emptied and was removed, the record with its file
            self.sync()
            return True
        # The overwrite changes an older record in place, out of append order: make everything before it
        # durable first (the tombstone just written, any earlier removal), or a crash could keep the erase
        # and lose what came before it: a durable state no prefix of the history, beyond any repair.
        self.sync()
        filler = encode_record(Kind.ERASED, seq, 0, bytes(length - HEADER_BYTES))
        handle = self.files.handle(block.number)
        handle.pwrite(offset, filler)
        handle.sync()
        self.files.forget(block.number)
        return True

    def purge(self, subject: str | None = None, seq: int | None = None, keep: int | None = None) -> int:
        self._check_open()
        self.changes += 1
        return fs_ops.purge(self, subject, seq, keep)

    def compact(self, seq: int) -> int:
        """Remove every message below `seq`. Past `last_seq + 1`, `last_seq` moves to `seq - 1`."""
        self._check_open()
        if not isinstance(seq, int) or seq < 1:
            raise BadRequest(f"compact needs a sequence of at least 1, not {seq!r}")
        self.changes += 1
        return fs_remove.compact(self, seq)

    def truncate(self, seq: int) -> None:
        self._check_open()
        self.changes += 1
        fs_truncate.truncate(self, seq)

    def expire(self, cutoff_ns: int) -> int:
        self._check_open()
        stop = fs_ops.first_not_expired(self, cutoff_ns)
        self.changes += bool(stop)
        return fs_remove.cut_head(self, stop) if stop else 0

    # --- Queries --------------------------------------------------------------------------------

    def load_last(self, subject_filter: str = ">") -> StoredMsg:
        seq = self.last_matching_seq(subject_filter)
        if not seq:
            raise NoMessageFound(f"no message found for subject {subject_filter!r}")
        return self.load(seq)

    def last_matching_seq(self, subject_filter: str = ">") -> int:
        self._check_open()
        return fs_ops.last_matching(self, subject_filter)  # the subject index's: no record is read

    def load_next(self, filters: str | Sequence[str] | None, start_seq: int) -> StoredMsg:
        self._check_open()
        seq = fs_ops.next_matching(self, filters, start_seq)
        if not seq:
            raise NoMessageFound(f"no message found at or after sequence {start_seq}")
        return self.load(seq)

    def subject_counts(self, subject_filter: str = ">") -> dict[str, int]:
        self._check_open()
        subjectlib.validate(subject_filter, wildcards=True)
        if subjectlib.is_literal(subject_filter):  # one lookup, not a match against every subject
            return {subject_filter: self.psim[subject_filter][0]} if subject_filter in self.psim else {}
        return {s: e[0] for s, e in self.psim.items() if subjectlib.matches(subject_filter, s)}

    def state(self) -> StoreState:
        self._check_open()
        first = fs_remove.first_live(self)
        if not first:
            first = self.last_seq + 1 if (self.touched or self.last_seq or self.head > 1) else 0
        span = self.last_seq - first + 1 if self.msgs else 0
        first_ts = last_ts = 0
        if self.msgs:
            first_ts = fs_ops.timestamp_of(self, first)
            last_ts = fs_ops.timestamp_of(self, fs_remove.last_live(self))  # not one lookup per subject
        return StoreState(
            first_seq=first, last_seq=self.last_seq, msgs=self.msgs, bytes=self.bytes,
            num_deleted=span - self.msgs if self.msgs else 0, num_subjects=len(self.psim),
            digest=self.digest, first_timestamp_ns=first_ts, last_timestamp_ns=last_ts,
        )

    def digest_ranges(self) -> dict[int, int]:
        self._check_open()
        return dict(self.ranges)

    def faults(self) -> list[Fault]:
        self._check_open()
        return self.fault_map.faults()

    def scan(self) -> list[Fault]:
        self._check_open()
        self.changes += 1
        recovery.scan_live(self)
        return self.faults()

    def repair(self, seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> None:
        self._check_open()
        self.changes += 1
        fs_ops.repair(self, seq, subject, headers, payload, timestamp_ns)

    def repair_deleted(self, first: int, last: int) -> None:
        self._check_open()
        self.changes += 1
        fs_ops.repair_deleted(self, first, last)

    def update_config(self, config: StoreConfig, *, enforce_limits: bool = True) -> None:
        self._check_open()
        config.validate()
        if config.name != self.config.name:
            raise InvalidConfig(f"a store's name cannot change ({self.config.name!r} -> {config.name!r})")
        self.config = config
        if enforce_limits:
            self.changes += 1
            fs_remove.enforce_limits(self, set(self.psim))

    def sync(self) -> None:
        self._check_open()
        self.files.settle()  # a deferred roll's syncs come first: what this sync vouches for lies above them
        if not self.files.blocks or not self._dirty:
            return
        self.write_records(encode_record(Kind.STORE_SYNC, self.last_seq, self.head))
        self.files.handle(self.newest().number).sync()
        self._dirty = False
