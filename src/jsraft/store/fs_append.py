"""The FileStore append hot path (DESIGN §12: work per batch, not per message).

Owns: turning a validated batch into records in the newest block. Per message only: encode, one CRC,
the digest term and the counters. Arrays are extended and the file written once per run; a run ends
where the block is full, and the block is then sealed and a new one started.

Invariants:
  1. The records written, the block arrays and the totals change together, after validation
     (`limits_check.check_batch`) has accepted the whole batch.
  2. An append continues the newest block from its `last_seq`, which is the store's `last_seq`
     (recovery invariant 6); a store where they differ fails loudly instead of misplacing slots.
  3. A deferred roll (the store has a `background` runner: the running node's, so the event loop does not
     wait for 4-5 fsyncs every block) keeps the inline roll's order on disk, only later: the sealed block
     ends with a `STORE_SYNC` and is fsynced, then the new block (created under its pending name) is
     fsynced, renamed to its block name and the directory fsynced, then the index is written. So the new
     block's name is durable only after everything before it is, and the index only after both: a crash
     at any point opens as a crash before the roll (the sealed block the newest, its unsynced tail torn)
     or after one of its steps. Nothing vouches for the sealed block meanwhile: `sync()` (a snapshot, an
     erase, a removal) and the next roll first wait for the job (`BlockFiles.settle`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from crc32c import crc32c

from jsraft.codec.records import HEADER_BYTES, message_digest
from jsraft.store.base import DIGEST_RANGE_SEQS
from jsraft.codec.records import Kind, encode_record
from jsraft.errors import BadRequest, InvariantViolation
from jsraft.store import fs_compress, fs_index
from jsraft.store.base import Compression
from jsraft.store.blockfiles import pending_name
from jsraft.store.blocks import Block, block_name
from jsraft.store.limits_check import check_append_seq

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore

_U64 = (1 << 64) - 1
_LEN = struct.Struct("<I")
_KSEQ_PREFIX = struct.Struct("<BQQHI")  # kind, seq, timestamp; then the MSG body's subject and headers lengths
_MSG_FIXED_BYTES = HEADER_BYTES + 6  # a MSG record without its subject, headers and payload
# From this size on, a payload is not concatenated into its record before the run's join: one copy less
# of it, for a few more CRC calls (a loss on small payloads, where the copies cost less than the calls).
_PIECEWISE_PAYLOAD_BYTES = 2048
_RANGE_SHIFT = DIGEST_RANGE_SEQS.bit_length() - 1


def append_all(store: "FileStore", msgs: Sequence[tuple[int, str, bytes, bytes, int]]) -> None:
    """Append a validated batch, one run per block it fills."""
    start = 0
    while start < len(msgs):
        start = append_run(store, msgs, start)


def append_run(store: "FileStore", msgs: Sequence[tuple[int, str, bytes, bytes, int]], start: int) -> int:
    """Append `msgs[start:]` to the newest block until it is full; return where it stopped.

    The hot path: per message only encoding, one CRC, the digest term and two small updates; digest
    ranges, subject counts, arrays and the file are updated once per run (DESIGN §12).
    """
    block = store.newest()
    if block.last_seq != store.last_seq:  # the run extends the block's slots from its last_seq
        raise InvariantViolation(f"newest block {block.number} ends at {block.last_seq}, "
                                 f"the store at {store.last_seq}: an append would misplace its slots")
    position, limit = block.size, store.config.block_size
    parts: list[bytes] = []
    offsets, lengths, crcs = [], [], []  # the block's new slots
    by_subject: dict[str, list[int]] = {}  # subject -> [count, first seq, last seq] in this run
    range_sums: list[list[int]] = []  # [range key, count, digest sum]: sequences are contiguous
    digest, total_bytes, index = store.digest, 0, start
    subject, subject_bytes, run = None, b"", None  # the previous message's: a run mostly repeats one subject
    for index in range(start, len(msgs)):
        seq, next_subject, headers, payload, timestamp_ns = msgs[index]
        if next_subject != subject:
            subject, subject_bytes = next_subject, next_subject.encode()
            run = None
        length = _MSG_FIXED_BYTES + len(subject_bytes) + len(headers) + len(payload)
        if position + length > limit and (offsets or block.last_seq >= block.first_seq):
            break
        length_bytes = _LEN.pack(length)
        head = _KSEQ_PREFIX.pack(2, seq, timestamp_ns, len(subject_bytes), len(headers))  # 2 = Kind.MSG
        if len(payload) < _PIECEWISE_PAYLOAD_BYTES:
            rest = b"".join((head, subject_bytes, headers, payload))
            parts += (length_bytes, _LEN.pack(crc := crc32c(rest, crc32c(length_bytes))), rest)
        else:  # a large payload is copied once, by the run's final join: the CRC runs over the pieces
            crc = crc32c(payload, crc32c(headers, crc32c(subject_bytes, crc32c(head, crc32c(length_bytes)))))
            parts += (length_bytes, _LEN.pack(crc), head, subject_bytes, headers, payload)
        offsets.append(position)
        lengths.append(length)
        crcs.append(crc)
        position += length
        total_bytes += (30 + len(subject_bytes) + len(payload)) if not headers else (
            34 + len(subject_bytes) + len(headers) + len(payload))
        term = message_digest(seq, crc)
        digest += term
        key = (seq - 1) >> _RANGE_SHIFT
        if not range_sums or range_sums[-1][0] != key:
            range_sums.append([key, 0, 0])
        range_sums[-1][1] += 1
        range_sums[-1][2] += term
        if run is None:
            run = by_subject.get(subject)
            if run is None:
                run = by_subject[subject] = [0, seq, seq]
        run[0] += 1
        run[2] = seq
    else:
        index = len(msgs)
    if offsets:
        _commit_run(store, block, msgs[index - 1][0], parts, (offsets, lengths, crcs), total_bytes, digest)
        _commit_indexes(store, block, by_subject, range_sums)
    if index < len(msgs):
        store.roll()
    return index


def _commit_run(store: "FileStore", block: Block, last_seq: int, parts: list[bytes],
                columns: tuple[list[int], list[int], list[int]], total_bytes: int, digest: int) -> None:
    """Publish one run: extend the block's arrays once, update totals, write the records once."""
    offsets, lengths, crcs = columns
    block.offsets.extend(offsets)
    block.lengths.extend(lengths)
    block.crcs.extend(crcs)
    block.last_seq = last_seq
    block.msgs += len(offsets)
    block.bytes += total_bytes
    store.msgs += len(offsets)
    store.bytes += total_bytes
    store.digest = digest & _U64
    store.last_seq = last_seq
    store.write_records(parts, sum(lengths))  # a large run's pieces are written unjoined (`disk.base.append_pieces`)


def _commit_indexes(store: "FileStore", block: Block, by_subject: dict[str, list[int]],
                    range_sums: list[list[int]]) -> None:
    """Merge one run's subject counts and digest-range sums into the block's and the store's."""
    for key, count, total in range_sums:
        store.ranges[key] = (store.ranges.get(key, 0) + total) & _U64
        store.range_counts[key] = store.range_counts.get(key, 0) + count
    subjects, psim = block.subjects, store.psim
    for subject, (count, first, last) in by_subject.items():
        subjects[subject] = subjects.get(subject, 0) + count
        entry = psim.get(subject)
        if entry is None:
            psim[subject] = [count, first, last]
        else:
            entry[0] += count
            if entry[2]:  # 0 means "recompute lazily"; a known last moves to this run's last
                entry[2] = last


def skip(store: "FileStore", seq: int, count: int = 1) -> None:
    check_append_seq(store, seq)
    if count < 1:
        raise BadRequest("skip count must be at least 1")
    block = store.newest()
    store.write_records(encode_record(Kind.SKIP, seq, count))
    block.extend_to(seq + count - 1)
    store.last_seq = seq + count - 1
    if store.msgs == 0:
        store.head = max(store.head, store.last_seq + 1)


def roll(store: "FileStore") -> Block:
    """Seal the newest block (sync it, compress it if configured), start a new one, and rewrite the index
    when it is due. With a `background` runner (and no compression) the syncs are deferred (invariant 3)."""
    if store.background is not None and store.config.compression is not Compression.zstd:
        return _roll_deferred(store)
    old = store.newest()
    store.sync()
    old.sealed = True
    if store.config.compression is Compression.zstd:
        fs_compress.compress_block(store, old)
    store._sealed_since_index += old.size
    block = store.new_block()
    # Everything is durable here (the sealed block synced, the new one created durable): a crash from now
    # on opens from this index and scans only what comes after it (`_index_due` says how often).
    if _index_due(store):
        fs_index.write_index(store)
        store._sealed_since_index = 0
    return block


def _index_due(store: "FileStore") -> bool:
    """Whether a roll rewrites the index: once the bytes sealed since the last one reach both its slot
    arrays' size (12 bytes a sequence: the index never costs more bytes written than the blocks) and a
    sixteenth of a block for every block it lists. The second term is its per-block work (a JSON entry and
    a read of the block's tail, ~8 us each): without it a store of large messages, whose slots are few,
    rebuilt the whole index at every roll, O(blocks) each time. With it that work costs a roll O(1)
    amortized, and an open scans at most about a sixteenth of the store past the index."""
    sealed = store._sealed_since_index
    return (sealed >= fs_index.SLOT_BYTES * (store.last_seq - store.blocks[0].first_seq + 1)
            and sealed >= len(store.blocks) * (store.config.block_size >> 4))


def _roll_deferred(store: "FileStore") -> Block:
    """The roll of invariant 3: the records and the new file are written here, every fsync in the job."""
    old = store.newest()
    store.files.settle()  # the previous roll's job is done: at most one outstanding (blockfiles invariant 4)
    if store._dirty:
        # The sealed block ends with a STORE_SYNC, as `sync()` leaves it: the job's fsync covers it, and a
        # crash before that fsync leaves this block the newest, its unsynced tail a torn write.
        store.write_records(encode_record(Kind.STORE_SYNC, store.last_seq, store.head))
    old.sealed = True
    store._sealed_since_index += old.size
    number = old.number + 1
    block = store.files.create_pending(number, store.last_seq + 1)
    store._dirty = False  # the new block holds only its preamble; the sealed block's fsync is the job's
    index = None
    if _index_due(store):  # built now (what it describes is this moment), written by the job after the rest
        index = fs_index.index_bytes(store)
        store._sealed_since_index = 0
    disk = store.disk

    def make_durable() -> None:
        for name in (block_name(old.number), pending_name(number)):
            handle = disk.open(name)  # its own descriptor: the store may close its handles meanwhile
            try:
                handle.sync()
            finally:
                handle.close()
        disk.rename(pending_name(number), block_name(number))
        disk.sync_dir("")
        if index is not None:
            disk.write_atomic(fs_index.INDEX_NAME, index)

    store.files.defer(store.background(make_durable))
    return block
