"""Binary record framing shared by every durable file (layer L1).

Owns: the record frame, the message body encoding, the per-message digest term, and the scanner that
walks a buffer of records and classifies every problem as a *torn tail* or *corruption*.

A record is::

    length  u32   total bytes of the record, header included
    crc     u32   CRC32C over length, kind, ident_a, ident_b and body (everything but itself)
    kind    u8    what the record is (`Kind`)
    ident_a u64   identity, part 1: a message's seq, a WAL entry's index
    ident_b u64   identity, part 2: a message's timestamp (ns), a WAL entry's term
    body    bytes

Invariants:
  1. A record whose CRC verifies is exactly the record that was written (up to CRC32C collisions).
  2. The scanner cuts bytes as a torn tail only when they are at the physical end of the buffer and no
     valid record starts anywhere after the first bad byte. Everything else is reported as a damaged
     region, and scanning resumes at the next valid record: a bad record never hides a good one.
  3. `message_digest` depends only on `(seq, crc)`, so replicas holding the same record bytes at the
     same sequence compute the same digest, whatever store or compression they use.

Imports: L0, crc32c. Reference: DESIGN.md §3 (formats) and §6 (digest).
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from crc32c import crc32c

from jsraft import limits
from jsraft.errors import CorruptRecord, invariant

_HEADER = struct.Struct("<IIBQQ")
HEADER_BYTES = _HEADER.size  # 25
_LENGTH = struct.Struct("<I")
_MSG_PREFIX = struct.Struct("<HI")  # subject length, headers length
_U64_MASK = (1 << 64) - 1

FILE_MAGIC = b"JSRF"
FILE_HEADER = struct.Struct("<4sBB2x")  # magic, format version, file type
FILE_HEADER_BYTES = FILE_HEADER.size


class Kind(enum.IntEnum):
    """Record kinds. Numbers are durable: never reuse or renumber one."""

    # Message store (`store`).
    BLOCK_HEADER = 1  # a=block number, b=first seq the block was opened for
    MSG = 2  # a=seq, b=timestamp ns; body = message body
    MSG_ZSTD = 3  # a=seq, b=timestamp ns; body = u32 content crc + zstd(message body)
    TOMBSTONE = 4  # a=first seq, b=range count; body = ranges (u64 first, u64 last)
    ERASED = 5  # a=seq, b=0; a securely erased message, its bytes overwritten
    SKIP = 6  # a=first seq, b=count; sequences consumed with no message
    FIRST_SEQ = 7  # a=new first seq, b=0; everything below was removed on purpose
    STORE_INDEX = 8  # a=index version, b=0; the fast-recovery index
    STORE_SYNC = 9  # a=last seq, b=0; written just before a store fsync: the records before it are durable
    # Raft log (`wal`).
    WAL_ENTRY = 16  # a=index, b=term; body = entry type + data
    WAL_SEGMENT_HEADER = 17  # a=first index of the segment, b=0
    HARD_STATE = 18  # a=sequence number of the slot write, b=0
    SNAPSHOT = 19  # a=last included index, b=last included term
    WAL_HARD_STATE = 20  # a=hard-state sequence, b=current term; a WAL segment's hard-state record (format v2)
    # Node (`runtime.group_record`).
    GROUP_RECORD = 24  # a=generation, b=0 (the whole record) or 1 (one change); body = JSON (started groups)
    GROUP_RECORD_MARK = 25  # a=mark sequence, b=end offset of the record's journal it vouches for; no body


_KNOWN_KINDS = frozenset(int(k) for k in Kind)


class RecordView(NamedTuple):
    """One verified record inside a buffer: its position, header fields and CRC."""

    offset: int
    length: int
    crc: int
    kind: int
    ident_a: int
    ident_b: int


class ScanResult(NamedTuple):
    """What a scan of one buffer found.

    `records`: every record whose frame and CRC verified, in order.
    `damaged`: byte ranges `(start, end)` that are not valid records but are followed by one.
    `torn_tail`: offset where a provably torn tail starts (nothing valid after it), or None.
    """

    records: list[RecordView]
    damaged: list[tuple[int, int]]
    torn_tail: int | None


def record_crc(buffer: bytes | memoryview, offset: int, length: int) -> int:
    """CRC32C of a framed record, skipping its own crc field."""
    head = crc32c(buffer[offset : offset + 4])
    return crc32c(buffer[offset + 8 : offset + length], head)


def encode_record(kind: int, ident_a: int, ident_b: int, body: bytes = b"") -> bytes:
    """Frame `body` as a record. The CRC covers everything but the crc field itself."""
    length = HEADER_BYTES + len(body)
    invariant(length <= 0xFFFFFFFF, "record length must fit in u32")
    length_bytes = _LENGTH.pack(length)
    rest = struct.pack("<BQQ", kind, ident_a, ident_b) + body
    crc = crc32c(rest, crc32c(length_bytes))
    return length_bytes + _LENGTH.pack(crc) + rest


def encode_message(
    seq: int, timestamp_ns: int, subject: bytes, headers: bytes, payload: bytes
) -> tuple[bytes, int]:
    """Encode a message as a `MSG` record; return the record and its CRC (the content CRC)."""
    body = b"".join((_MSG_PREFIX.pack(len(subject), len(headers)), subject, headers, payload))
    record = encode_record(Kind.MSG, seq, timestamp_ns, body)
    crc = _LENGTH.unpack_from(record, 4)[0]
    return record, crc


def decode_message_body(body: bytes | memoryview) -> tuple[bytes, bytes, bytes]:
    """Split a message body into `(subject, headers, payload)`; raise `CorruptRecord` if malformed."""
    if len(body) < _MSG_PREFIX.size:
        raise CorruptRecord("message body shorter than its prefix")
    subject_len, headers_len = _MSG_PREFIX.unpack_from(body, 0)
    start = _MSG_PREFIX.size
    if start + subject_len + headers_len > len(body):
        raise CorruptRecord("message body shorter than its declared subject and headers")
    subject = bytes(body[start : start + subject_len])
    headers = bytes(body[start + subject_len : start + subject_len + headers_len])
    payload = bytes(body[start + subject_len + headers_len :])
    return subject, headers, payload


def message_digest(seq: int, crc: int) -> int:
    """The 64-bit digest term of one live message: a SplitMix64 mix of its seq and record CRC.

    The stream digest is the sum of these terms mod 2^64, so it is order-independent and can be
    updated in O(1) when a message is added (add the term) or removed (subtract it).
    """
    z = (seq * 0x9E3779B97F4A7C15 + crc * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & _U64_MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64_MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64_MASK
    return z ^ (z >> 31)


def _valid_at(buffer: bytes | memoryview, offset: int, end: int, kinds: frozenset[int]) -> int:
    """Length of the valid record at `offset`, or 0 if there is none."""
    if offset + HEADER_BYTES > end:
        return 0
    length, crc, kind, _, _ = _HEADER.unpack_from(buffer, offset)
    if kind not in kinds or length < HEADER_BYTES or offset + length > end:
        return 0
    if length > limits.resync_candidate_bytes_max:
        return 0
    return length if record_crc(buffer, offset, length) == crc else 0


def _next_valid(buffer: bytes | memoryview, start: int, end: int, kinds: frozenset[int]) -> int | None:
    """Offset of the first valid record at or after `start`, searching byte by byte."""
    for candidate in range(start, end - HEADER_BYTES + 1):
        if buffer[candidate + 8] in kinds and _valid_at(buffer, candidate, end, kinds):
            return candidate
    return None


def read_record(buffer: bytes | memoryview, offset: int, end: int | None = None) -> RecordView:
    """Verify and return the record at `offset`; raise `CorruptRecord` if it does not verify."""
    end = len(buffer) if end is None else end
    length = _valid_at(buffer, offset, end, _KNOWN_KINDS)
    if not length:
        raise CorruptRecord(f"no valid record at offset {offset}")
    _, crc, kind, ident_a, ident_b = _HEADER.unpack_from(buffer, offset)
    return RecordView(offset, length, crc, kind, ident_a, ident_b)


def scan_records(
    buffer: bytes | memoryview, start: int = 0, kinds: frozenset[int] = _KNOWN_KINDS
) -> ScanResult:
    """Walk every record from `start` to the end of `buffer`, verifying each CRC.

    A bad record (bad CRC, impossible length, unknown kind) is corruption when any valid record
    follows it: the bytes up to that record are reported in `damaged` and the walk resumes there.
    Only when nothing valid follows the first bad byte is it a torn tail (`torn_tail`).
    """
    records: list[RecordView] = []
    damaged: list[tuple[int, int]] = []
    end = len(buffer)
    offset = start
    unpack = _HEADER.unpack_from
    while offset < end:
        if offset + HEADER_BYTES <= end:
            length, crc, kind, ident_a, ident_b = unpack(buffer, offset)
            if (
                kind in kinds
                and HEADER_BYTES <= length <= end - offset
                and record_crc(buffer, offset, length) == crc
            ):
                records.append(RecordView(offset, length, crc, kind, ident_a, ident_b))
                offset += length
                continue
        # The record failed its CRC, so its length field is as suspect as the rest of it: a flipped
        # length bit can point exactly at a later record boundary, and jumping there would hide the
        # good records in between. Search byte by byte from the next offset instead; for a damaged
        # body under an intact length the search ends at `offset + length` anyway.
        resume = _next_valid(buffer, offset + 1, end, kinds)
        if resume is None:
            return ScanResult(records, damaged, offset)
        damaged.append((offset, resume))
        offset = resume
    return ScanResult(records, damaged, None)
