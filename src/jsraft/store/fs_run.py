"""`load_run`: a run of consecutive live messages of a `FileStore` in one read, and `verify_run`, the
same run checked without being decoded (layer L2).

Owns: the batched read a consumer's delivery pass makes (`FileStore.load_run`): the records of the
live sequences from `start_seq` on, read from their block with one `read` (the cached block buffer when
there is one, else one `pread` of the span), each checked as `load` checks it (length, CRC, sequence,
kind) and decoded. It is a fast way for the clean case only: whatever `load` / `load_next` would treat
specially ends the run, and the caller asks those for the next message, so the outcome is theirs.

Invariants:
  1. The run is what calling `load_next(filters, seq)` over and over would return, each call starting
     after the previous message, cut short anywhere: the messages are live, in order, with no live
     matching message between two of them (deleted sequences are passed over, non-matching subjects
     too when `filters` is given).
  2. It stops *before* a sequence the fault map holds, a record that does not verify, a sequence whose
     live record was moved to another block (a repair), the end of the block and the end of the store.
     It records nothing itself: the caller's `load` of that sequence reads it again and settles it (a
     record that fails there is detached and reported, `FileStore` invariant 4), so a damaged record
     is never served and never skipped silently.
  3. Bounded: at most `count_max` messages, and a span of at most `RUN_BYTES_MAX` bytes read (one record
     beyond the bound is still read when it is the first, so a large message does not stop the run).
  4. `verify_run(store, seq, n)` is the last sequence of `load_run(store, seq, n)` (0 for an empty run):
     it reads the same span and runs the same checks on every record, only builds no message (a
     snapshot's read-back, `stream.apply_ops.read_back`, needs the verdict, not the messages).

  5. `run_pays(store, filters, seq)` is a hint, never a verdict: it says a filtered run from `seq` would
     read at most twice the messages it returns (at least half of that block's live messages match, by the
     block's subject counts; of a block with more than `DENSITY_SUBJECTS_MAX` subjects, a KV bucket's, only
     that many of its subjects are counted, the first it holds: a KV `keys()` filtered on the whole bucket
     then reads runs, a watch of one key still goes message by message).
     A run checks each message's subject against the filters whatever it says (invariant 1), so a count
     that lagged a change could only cost a read, never serve a message the filters do not match.

Imports: stdlib, crc32c, L0, L1 (`codec`, `subjects`), store siblings (`base`, `blocks`). Reference: nats-server
`server/filestore.go` (`cacheLookup`: a block's records served from one buffer).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from crc32c import crc32c

from jsraft import subjects as subjectlib
from jsraft.codec.records import HEADER_BYTES, Kind, decode_message_body, encode_message
from jsraft.errors import CorruptRecord
from jsraft.store.base import StoredMsg
from jsraft.store.blocks import Block, message_body, message_record_verifies

if TYPE_CHECKING:
    from jsraft.store.filestore import FileStore

DENSITY_SUBJECTS_MAX = 64  # `run_pays` counts at most this many of a block's subjects (a KV block has thousands)
RUN_BYTES_MAX = 1 << 18  # one read's span: a run of small messages in one syscall, a bounded buffer
_TIMESTAMP = struct.Struct("<Q")
_MSG_PREFIX = struct.Struct("<HI")  # a message body's subject and headers lengths
_PLAIN_BYTES_MIN = HEADER_BYTES + _MSG_PREFIX.size
_HEADER_AND_PREFIX = struct.Struct("<IIBQQHI")  # a record header (length, CRC, kind, seq, timestamp), then `_MSG_PREFIX`
_KIND_MSG = int(Kind.MSG)  # compared per record: a plain int, not an enum member looked up each time


def load_run(store: "FileStore", start_seq: int, count_max: int,
             filters: str | Sequence[str] | None = None) -> list[StoredMsg]:
    """Live messages from `start_seq` on, in one read of their block (module invariants)."""
    read = _read(store, start_seq, count_max)
    if read is None:
        return []
    spans, first_offset, data = read
    names = [filters] if isinstance(filters, str) else list(filters) if filters is not None else []
    match = None if not names or ">" in names else subjectlib.FilterSet(names).matches
    run: list[StoredMsg] = []
    view = memoryview(data)
    for seq, offset, length in spans:
        at = offset - first_offset
        msg = _plain(data, view, at, length, seq) if length >= _PLAIN_BYTES_MIN else None
        if msg is None:
            msg = _decoded(seq, view[at : at + length])
            if msg is None:
                break  # invariant 2: the caller's `load` reads it again and settles it
        if match is None or match(msg.subject):
            run.append(msg)
    return run


def run_pays(store: "FileStore", filters: str | Sequence[str], seq: int) -> bool:
    """Invariant 5: at least half of the live messages of the block holding `seq` (or the next live one)
    match `filters`. `FileStore.run_pays` is this function."""
    block = store.files.block_for(max(seq, store.head, 1))
    names = [filters] if isinstance(filters, str) else list(filters)
    if block is None or not block.subjects:
        return False
    if ">" in names:
        return True
    match = subjectlib.FilterSet(names).matches
    counts = block.subjects.items()
    if len(block.subjects) > DENSITY_SUBJECTS_MAX:
        counts = list(itertools.islice(counts, DENSITY_SUBJECTS_MAX))  # a sample: a hint (invariant 5)
    return 2 * sum(count for subject, count in counts if match(subject)) >= sum(count for _, count in counts)


def verify_run(store: "FileStore", start_seq: int, count_max: int) -> int:
    """The last sequence `load_run(store, start_seq, count_max)` would return, 0 if none (invariant 4).
    `FileStore.verify_run` is this function."""
    store._check_open()
    read = _read(store, start_seq, count_max)
    if read is None:
        return 0
    spans, first_offset, data = read
    last = 0
    view, unpack = memoryview(data), _HEADER_AND_PREFIX.unpack_from
    for seq, offset, length in spans:
        at = offset - first_offset
        # `_plain`'s checks, inline and in a cheaper order (all must hold), without building the message.
        if length >= _PLAIN_BYTES_MIN:
            size, crc, kind, record_seq, _, subject_len, headers_len = unpack(data, at)
            if size == length and record_seq == seq and kind == _KIND_MSG and \
                    _PLAIN_BYTES_MIN + subject_len + headers_len <= length and \
                    crc32c(view[at + 8 : at + length], crc32c(view[at : at + 4])) == crc:
                last = seq
                continue
        if _decoded(seq, view[at : at + length]) is None:
            break  # as `load_run` stops (invariant 2)
        last = seq
    return last


def _read(store: "FileStore", start_seq: int, count_max: int) -> tuple[list[tuple[int, int, int]], int, bytes] | None:
    """The spans of a run from `start_seq` (`_spans`), the offset of the first and their bytes in one
    read; None when there is nothing to read."""
    if count_max <= 0 or start_seq > store.last_seq:
        return None
    seq = max(start_seq, store.head, 1)
    block = store.files.block_for(seq)
    if block is None:
        return None
    spans = _spans(store, block, seq, count_max)
    if not spans:
        return None
    first_offset = spans[0][1]
    _, last_offset, last_length = spans[-1]
    return spans, first_offset, store.read_record(block, first_offset, last_offset + last_length - first_offset)


def _spans(store: "FileStore", block, seq: int, count_max: int) -> list[tuple[int, int, int]]:
    """`(seq, offset, length)` of the natural live records to read, from `seq` to where invariants 2
    and 3 stop the run."""
    offsets, lengths, base = block.offsets, block.lengths, block.first_seq
    faults, moved = store.fault_map, store.moved
    faulty = bool(faults)  # once per run, not per sequence: nothing changes the map while this runs
    spans: list[tuple[int, int, int]] = []
    first_offset = 0
    end = min(block.last_seq, store.last_seq)
    while seq <= end and len(spans) < count_max:
        if faulty and faults.kind_of(seq) is not None:
            break
        index = seq - base
        offset = offsets[index]
        if not offset:
            if seq in moved:
                break  # a repaired record lives elsewhere: `load` finds it
            seq += 1  # deleted
            continue
        length = lengths[index]
        if not spans:
            first_offset = offset
        elif offset + length - first_offset > RUN_BYTES_MAX or offset < first_offset:
            break
        spans.append((seq, offset, length))
        seq += 1
    return spans


def _plain(data: bytes, view: memoryview, at: int, length: int, seq: int) -> StoredMsg | None:
    """The hot case, inline: a verified plain `MSG` record at `at` (the checks of
    `message_record_verifies`, and a body `decode_message_body` accepts), or None for anything else.
    The caller saw `length >= _PLAIN_BYTES_MIN`, so the header and the body's prefix are read at once."""
    size, crc, kind, record_seq, timestamp_ns, subject_len, headers_len = _HEADER_AND_PREFIX.unpack_from(data, at)
    end = at + length
    if size != length or record_seq != seq or kind != _KIND_MSG or \
            crc32c(view[at + 8 : end], crc32c(view[at : at + 4])) != crc:
        return None
    start = at + _PLAIN_BYTES_MIN
    headers_at = start + subject_len
    payload_at = headers_at + headers_len
    if payload_at > end:
        return None
    return StoredMsg(data[start:headers_at].decode(), seq, data[headers_at:payload_at], data[payload_at:end],
                     timestamp_ns)  # positional: subject, seq, headers, payload, timestamp_ns


def _decoded(seq: int, record: memoryview) -> StoredMsg | None:
    """Any other record, the way `FileStore.load` reads it; None where `load` would raise."""
    if not message_record_verifies(record, len(record), seq):
        return None
    try:
        body, _ = message_body(record, record[8])
        subject, headers, payload = decode_message_body(body)
    except CorruptRecord:
        return None
    return StoredMsg(subject=subject.decode(), seq=seq, headers=headers, payload=payload,
                     timestamp_ns=_TIMESTAMP.unpack_from(record, 17)[0])


def held_run(store: "FileStore", first_seq: int, msgs: Sequence[Sequence], start: int) -> int:
    """The index of the first of `msgs[start:]` (message `i` is seq `first_seq + i`, its first four items
    subject, headers, payload, timestamp) that is not live with a record that is, byte for byte, its `MSG`
    record; `len(msgs)` when all are. A record equal to the encoded one verifies too (its CRC is the
    encoded one). Each block is read once, through the cache. Stopping says nothing: the caller loads
    that message and compares (a deleted, moved, compressed, faulted or damaged one all stop the run)."""
    faults = bool(store.fault_map)
    block: Block | None = None
    buffer = b""
    for index in range(start, len(msgs)):
        seq = first_seq + index
        if seq < store.head or seq > store.last_seq or (faults and store.fault_map.kind_of(seq) is not None):
            return index
        if block is None or not block.first_seq <= seq <= block.last_seq:
            block = store.files.block_for(seq)
            if block is None:
                return index
            buffer = store.files.buffer(block)
        slot = seq - block.first_seq
        offset = block.offsets[slot]
        msg = msgs[index]
        record = encode_message(seq, msg[3], msg[0].encode(), msg[1], msg[2])[0]
        if not offset or block.lengths[slot] != len(record) or buffer[offset : offset + len(record)] != record:
            return index
    return len(msgs)
