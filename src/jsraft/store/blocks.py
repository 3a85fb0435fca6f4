"""FileStore blocks: one file of records each, and the in-memory summary of what it holds.

Owns: block file naming, the block file preamble, the `Block` summary (offsets and lengths of live
records, per-subject counts), and per-record compression of sealed blocks.

A block file is `FILE_HEADER` (magic, version, file type 1) then a `BLOCK_HEADER` record (block number,
the first sequence it was opened for) then records in write order: `MSG`/`MSG_ZSTD` (one per sequence,
in increasing order), `SKIP`, `TOMBSTONE`, `FIRST_SEQ`, `STORE_SYNC`, and `MSG` records that repair an
older sequence (recognised because their sequence is not above everything already seen).

Invariants:
  1. `offsets[i]` is 0 exactly when sequence `first_seq + i` holds no live message in this block;
     otherwise it is the offset of the record, and `lengths[i]` its length.
  2. Offset 0 is never a record (the file header is there), so 0 can mean "none".
  3. Compression is per record: a damaged compressed record loses only its own sequence.

Imports: L0, L1, zstandard.
"""

from __future__ import annotations

import struct
from array import array

import zstandard
from crc32c import crc32c

from jsraft.codec.records import (
    FILE_HEADER,
    FILE_HEADER_BYTES,
    FILE_MAGIC,
    HEADER_BYTES,
    Kind,
    encode_record,
)
from jsraft.errors import BadFileFormat, CorruptRecord

BLOCK_FILE_TYPE = 1
INDEX_FILE_TYPE = 2
FORMAT_VERSION = 1
BLOCK_SUFFIX = ".blk"
_U32 = struct.Struct("<I")
_MSG_PREFIX = struct.Struct("<HI")

# Compression at seal time only pays above a few dozen bytes; below that zstd's frame costs more.
_COMPRESS_BODY_BYTES_MIN = 64
_compressor = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=False)
_decompressor = zstandard.ZstdDecompressor()


def block_name(number: int) -> str:
    return f"{number:08d}{BLOCK_SUFFIX}"


def parse_block_name(name: str) -> int | None:
    if not name.endswith(BLOCK_SUFFIX):
        return None
    stem = name[: -len(BLOCK_SUFFIX)]
    return int(stem) if stem.isdigit() and len(stem) == 8 else None


def block_preamble(number: int, first_seq: int) -> bytes:
    return FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, BLOCK_FILE_TYPE) + encode_record(
        Kind.BLOCK_HEADER, number, first_seq
    )


def check_file_header(buffer: bytes, file_type: int) -> None:
    if len(buffer) < FILE_HEADER_BYTES:
        raise BadFileFormat("file shorter than its header")
    magic, version, kind = FILE_HEADER.unpack_from(buffer, 0)
    if magic != FILE_MAGIC or kind != file_type:
        raise BadFileFormat(f"bad magic or file type ({magic!r}, {kind})")
    if version != FORMAT_VERSION:
        raise BadFileFormat(f"unsupported format version {version}")


class Block:
    """What one block file holds, in memory. Bodies stay on disk."""

    __slots__ = (
        "number", "first_seq", "last_seq", "offsets", "lengths", "crcs", "msgs", "bytes", "size",
        "subjects", "sealed",
    )

    def __init__(self, number: int, first_seq: int) -> None:
        self.number = number
        self.first_seq = first_seq  # first sequence this block covers (natural records)
        self.last_seq = first_seq - 1  # last sequence it covers; < first_seq when it covers none
        self.offsets = array("I")
        self.lengths = array("I")
        self.crcs = array("I")  # content CRC per sequence (for the digest when a message is removed)
        self.msgs = 0
        self.bytes = 0  # nats-server bytes of its live natural records and of those it owes (fs_unreadable)
        self.size = 0  # file length in bytes
        self.subjects: dict[str, int] = {}
        self.sealed = False

    def covers(self, seq: int) -> bool:
        return self.first_seq <= seq <= self.last_seq

    def slot(self, seq: int) -> int:
        """Offset of `seq`'s live record, or 0."""
        if self.first_seq <= seq <= self.last_seq:
            return self.offsets[seq - self.first_seq]
        return 0

    def extend_to(self, seq: int) -> None:
        """Cover sequences up to `seq` (holding nothing until set)."""
        grow = seq - self.last_seq
        if grow > 0:
            zeros = bytes(4 * grow)
            self.offsets.frombytes(zeros)
            self.lengths.frombytes(zeros)
            self.crcs.frombytes(zeros)
            self.last_seq = seq

    def add_subject(self, subject: str) -> None:
        self.subjects[subject] = self.subjects.get(subject, 0) + 1

    def drop_subject(self, subject: str) -> None:
        left = self.subjects.get(subject, 0) - 1
        if left > 0:
            self.subjects[subject] = left
        else:
            self.subjects.pop(subject, None)


def message_body(record: bytes | memoryview, kind: int) -> tuple[bytes, int]:
    """The canonical (uncompressed) body of a message record, and its content CRC.

    The content CRC is the CRC the record had as a plain `MSG`, so digests agree across compressed and
    uncompressed replicas.
    """
    if kind == Kind.MSG:
        return bytes(record[HEADER_BYTES:]), _U32.unpack_from(record, 4)[0]
    if kind == Kind.MSG_ZSTD:
        content_crc = _U32.unpack_from(record, HEADER_BYTES)[0]
        try:
            body = _decompressor.decompress(bytes(record[HEADER_BYTES + 4 :]))
        except zstandard.ZstdError as error:
            raise CorruptRecord(f"compressed message does not decompress: {error}") from None
        plain = encode_record(Kind.MSG, *struct.unpack_from("<QQ", record, 9), body)
        if _U32.unpack_from(plain, 4)[0] != content_crc:
            raise CorruptRecord("decompressed message does not match its content CRC")
        return body, content_crc
    raise CorruptRecord(f"record kind {kind} is not a message")


def content_crc(record: bytes | memoryview, kind: int) -> int:
    """The content CRC of a message record without decompressing it."""
    if kind == Kind.MSG_ZSTD:
        return _U32.unpack_from(record, HEADER_BYTES)[0]
    return _U32.unpack_from(record, 4)[0]


def compress_record(record: bytes) -> bytes:
    """A `MSG` record as `MSG_ZSTD` when that is smaller; any other record unchanged."""
    if record[8] != Kind.MSG or len(record) - HEADER_BYTES < _COMPRESS_BODY_BYTES_MIN:
        return record
    seq, timestamp_ns = struct.unpack_from("<QQ", record, 9)
    squeezed = _compressor.compress(record[HEADER_BYTES:])
    if len(squeezed) + 4 >= len(record) - HEADER_BYTES:
        return record
    crc = _U32.unpack_from(record, 4)[0]
    return encode_record(Kind.MSG_ZSTD, seq, timestamp_ns, _U32.pack(crc) + squeezed)


def message_subject(record: bytes | memoryview, kind: int) -> tuple[str, int, int]:
    """`(subject, headers_len, payload_len)` of a message record (decompressing if needed)."""
    body, _ = message_body(record, kind) if kind == Kind.MSG_ZSTD else (record[HEADER_BYTES:], 0)
    subject_len, headers_len = _MSG_PREFIX.unpack_from(body, 0)
    start = _MSG_PREFIX.size
    subject = bytes(body[start : start + subject_len]).decode()
    payload_len = len(body) - start - subject_len - headers_len
    return subject, headers_len, payload_len


def message_record_verifies(record: bytes | memoryview, length: int, seq: int) -> bool:
    """`record` is a whole message record for `seq`: its length, its CRC, its identity and kind."""
    if len(record) != length or length < HEADER_BYTES or _U32.unpack_from(record, 0)[0] != length:
        return False
    if crc32c(record[8:], crc32c(record[:4])) != _U32.unpack_from(record, 4)[0]:
        return False
    return struct.unpack_from("<Q", record, 9)[0] == seq and record[8] in (Kind.MSG, Kind.MSG_ZSTD)


def verify_crc(record: bytes | memoryview) -> bool:
    length, crc = struct.unpack_from("<II", record, 0)
    if length != len(record):
        return False
    return crc32c(record[8:], crc32c(record[:4])) == crc
