"""Byte formats of the WAL's three kinds of file: segments, the hard-state file, snapshots (layer L2).

Owns: file names, file-type numbers, and the bodies of the `WAL_ENTRY`, `WAL_SEGMENT_HEADER`,
`HARD_STATE` and `SNAPSHOT` records (the record frame itself is `codec.records`).

Formats::

    segment    wal/<first index, 20 digits>.log
               FILE_HEADER(type 16) | WAL_SEGMENT_HEADER(a=first index, b=0) | (WAL_ENTRY | WAL_HARD_STATE) ...
    WAL_ENTRY  a=index, b=term; body = type u8 | prev_term u64 | data
    WAL_HARD_STATE  a=hard-state sequence, b=current term; body = a HARD_STATE body below (version 1 in a
               format 2 segment, version 2 in a format 3 segment, version 3 in a format 4 segment)
    hardstate  FILE_HEADER(type 18) at 0; slot 0 at 4096; slot 1 at 8192; each slot one HARD_STATE record
               (a=write sequence, b=body version: 0 for version 1, else the version)
    HARD_STATE body, version 3: term u64 | commit u64 | watermark u64 | watermark term u64 | repairing u8 |
               vote fence term u64 | log end index u64 | log end term u64 | anchor u64 | vote length u16 |
               vote utf-8, a vote length of 0 meaning "no vote"; the log end and anchor are `LogEnd`
    HARD_STATE body, version 2 (read only): version 3 without the log end and anchor
    HARD_STATE body, version 1 (read only): the same without the vote fence term; the fence was stored as
               `voted_for` = "<fenced-through:F>", and a vote lost with the hard state as "<unknown>" (a
               fence through the record's term); both are read back as the fence, `voted_for` None

Versions: segment format 4 (this build writes it) holds `WAL_HARD_STATE` records with version 3 bodies,
each appended after the entries of the same cycle so that one fsync makes both durable (`log`); format 3
segments (before issue #14's log end) hold version 2 bodies, format 2 segments (before issue #14's vote
fence field) version 1 bodies, format 1 segments (before issue #18) entries only; all are still read;
appends go only into a segment of the current format (the next write starts a new segment), so a file's
version always says which records it may hold. The hard-state file is at version 3 (versions 1 and 2 are
read; the header is rewritten with the next slot write, and each slot record says its own body version in
`b`, so a file with slots of two versions reads right). An older build
refuses a newer file (`file_header_version`) rather than misread it. The hard-state sequence is one counter
shared by the slots and the segment records: the newest hard state is the valid one with the highest
sequence, wherever it is (`recovery`). The snapshot file stays at version 1.
    snapshot   snapshots/<term, 20 digits>-<index, 20 digits>.snap
               FILE_HEADER(type 19) | SNAPSHOT(a=index, b=term; body = meta length u32 | meta | data),
               meta = voter count u16 | (length u16 | utf-8)* | learner count u16 | (length u16 | utf-8)*

File types are numbered after the record kind each file exists to hold (16, 18, 19), so they cannot collide
with the store's (1, 2). `prev_term` chains each entry to the term of the one before it (0 = unknown): a
record that is internally valid but stale (a rolled-back or misdirected write) then breaks the chain with
its neighbour and is detected, which a CRC alone cannot do. The *watermark term* in the hard state (the term
of the entry at the acked watermark, 0 if unknown) does the same for a stale stretch that reaches the end of
the log: by Raft's log matching, if the entry at the watermark has that term, every entry up to it is the
one that was acknowledged. The *log end* (version 3) says where the log ended when the hard state was
saved, and its *anchor* which hard-state record in the log it was saved after; recovery uses them to tell
the log's own tail from a stale one a rolled-back write brought back (`vouch`, rule R7).

Invariants:
  1. `encode_entries` produces exactly the bytes `codec.encode_record(Kind.WAL_ENTRY, ...)` would.
  2. Hard-state slots sit in different 4 KiB pages, so one torn or rolled-back page damages one slot.
  3. Decoders raise `CorruptRecord` on malformed bodies; they never return a partial value.

Imports: L0, L1 (`codec`, `raft.types`), crc32c, attrs. Reference: DESIGN.md §3.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import attrs
from crc32c import crc32c

from jsraft import limits
from jsraft.codec.records import FILE_HEADER, FILE_HEADER_BYTES, FILE_MAGIC, HEADER_BYTES, Kind, encode_record
from jsraft.errors import BadFileFormat, CorruptRecord, invariant
from jsraft.raft.types import ConfState, Entry, EntryType, HardState, SnapshotMeta

FORMAT_VERSION = 1  # snapshot
GROUP_RECORD_FORMAT_VERSION = 2  # the node's record of started groups (which borrows these helpers): 2 a journal
SEGMENT_FORMAT_VERSION = 4  # segments: 2 adds WAL_HARD_STATE records, 3 their vote fence, 4 their log end
HARD_STATE_FORMAT_VERSION = 3  # the hard-state file: 2 adds the vote fence term, 3 the log end
HARD_STATE_BODY_VERSION = 3  # the HARD_STATE body this build writes (1 and 2 are still read)
SEGMENT_FILE_TYPE = 16
HARD_STATE_FILE_TYPE = 18
SNAPSHOT_FILE_TYPE = 19
GROUP_RECORD_FILE_TYPE = 24  # `runtime.group_record`'s `groups.rec`
# A header version further ahead of this build than this is damage (a flipped bit), never a newer format.
VERSION_STEPS_AHEAD_MAX = 8

WAL_DIR = "wal"
SNAPSHOT_DIR = "snapshots"
HARD_STATE_FILE = "hardstate"
TEMP_SUFFIX = ".tmp"  # what an interrupted `write_atomic` leaves behind

SEGMENT_KINDS = frozenset((int(Kind.WAL_ENTRY), int(Kind.WAL_SEGMENT_HEADER), int(Kind.WAL_HARD_STATE)))
SEGMENT_HEADER_BYTES = HEADER_BYTES  # an empty-bodied WAL_SEGMENT_HEADER record
SEGMENT_DATA_START = FILE_HEADER_BYTES + SEGMENT_HEADER_BYTES
ENTRY_OVERHEAD_BYTES = HEADER_BYTES + 9
# An entry record longer than this could not be found again by the scanner's resync after damage
# before it (codec.records `_valid_at`), so a damaged neighbour would also hide it.
ENTRY_DATA_BYTES_MAX = limits.resync_candidate_bytes_max - ENTRY_OVERHEAD_BYTES

HARD_STATE_SLOT_OFFSETS = (4096, 8192)
HARD_STATE_SLOT_BYTES = 4096
HARD_STATE_FILE_BYTES = 12288
VOTE_BYTES_MAX = 255  # node ids are short names; bounded so a slot always fits its page

_U32 = struct.Struct("<I")
_ENTRY_TAIL = struct.Struct("<BQQBQ")  # kind, index, term, entry type, prev_term
_ENTRY_BODY = struct.Struct("<BQ")  # entry type, prev_term
_HARD_STATE_V1 = struct.Struct("<QQQQBH")
_HARD_STATE_V2 = struct.Struct("<QQQQBQH")
_HARD_STATE = struct.Struct("<QQQQBQQQQH")
_COUNT = struct.Struct("<H")
_KIND_WAL_ENTRY = int(Kind.WAL_ENTRY)
_ENTRY_TYPES = frozenset(int(t) for t in EntryType)


# --- Names -----------------------------------------------------------------------------------------


def segment_name(first_index: int) -> str:
    return f"{first_index:020d}.log"


def parse_segment_name(name: str) -> int | None:
    """First index of a segment file name, or None if `name` is not one."""
    if len(name) != 24 or not name.endswith(".log") or not name[:20].isdigit():
        return None
    return int(name[:20])


def snapshot_name(term: int, index: int) -> str:
    return f"{term:020d}-{index:020d}.snap"


def parse_snapshot_name(name: str) -> tuple[int, int] | None:
    """`(term, index)` of a snapshot file name, or None if `name` is not one."""
    if len(name) != 46 or not name.endswith(".snap") or name[20] != "-":
        return None
    term, index = name[:20], name[21:41]
    if not (term.isdigit() and index.isdigit()):
        return None
    return int(term), int(index)


# --- File headers ----------------------------------------------------------------------------------


def _version_of(file_type: int) -> int:
    if file_type == SEGMENT_FILE_TYPE:
        return SEGMENT_FORMAT_VERSION
    if file_type == GROUP_RECORD_FILE_TYPE:
        return GROUP_RECORD_FORMAT_VERSION
    return HARD_STATE_FORMAT_VERSION if file_type == HARD_STATE_FILE_TYPE else FORMAT_VERSION


def file_header(file_type: int) -> bytes:
    return FILE_HEADER.pack(FILE_MAGIC, _version_of(file_type), file_type)


def _claims_newer(buffer: bytes, file_type: int) -> bool:
    """True if `buffer`'s header is ours with a version newer than this build's but still plausible."""
    if len(buffer) < FILE_HEADER_BYTES:
        return False
    magic, version, kind = FILE_HEADER.unpack_from(buffer, 0)
    newest = _version_of(file_type)
    return magic == FILE_MAGIC and kind == file_type and newest < version <= newest + VERSION_STEPS_AHEAD_MAX


def file_header_version(buffer: bytes, file_type: int) -> int:
    """The format version of `buffer`'s header if it is ours and readable (segments: 1 or 2), else 0. A
    header of a plausibly newer format version (at most `VERSION_STEPS_AHEAD_MAX` ahead) is refused
    outright: reading it as this version could misinterpret durable data, so it is not treated as mere
    damage. A version further ahead (130 for 2: one flipped bit) is no format any build wrote: damage (0).
    Read the file with `read_checked`, so a transient read flip is not believed on one reading."""
    if _claims_newer(buffer, file_type):
        version, newest = FILE_HEADER.unpack_from(buffer, 0)[1], _version_of(file_type)
        raise BadFileFormat(f"file format version {version} is newer than this build ({newest})")
    if len(buffer) < FILE_HEADER_BYTES:
        return 0
    magic, version, kind = FILE_HEADER.unpack_from(buffer, 0)
    return version if magic == FILE_MAGIC and kind == file_type and 1 <= version <= _version_of(file_type) else 0


def read_checked(read: Callable[[str], bytes], path: str, file_type: int) -> bytes:
    """`read(path)`, read once more when its header is ours but claims a version newer than this build: a
    transient read flip of the version byte reads right the second time, while what is really on disk
    reads the same again (then `file_header_version` decides: a newer format, refused, or damage)."""
    buffer = read(path)
    if len(buffer) < FILE_HEADER_BYTES:
        return buffer
    magic, version, kind = FILE_HEADER.unpack_from(buffer, 0)
    newer = magic == FILE_MAGIC and kind == file_type and version > _version_of(file_type)
    return read(path) if newer else buffer


def file_header_ok(buffer: bytes, file_type: int) -> bool:
    """True if `buffer` starts with our header in a version this build reads (`file_header_version`)."""
    return file_header_version(buffer, file_type) != 0


def segment_preamble(first_index: int) -> bytes:
    """Everything a new segment starts with: file header and segment header record."""
    return file_header(SEGMENT_FILE_TYPE) + encode_record(Kind.WAL_SEGMENT_HEADER, first_index, 0)


# --- Entries ---------------------------------------------------------------------------------------


def encode_entry(entry: Entry, prev_term: int) -> bytes:
    """One `WAL_ENTRY` record."""
    return b"".join(encode_entry_parts(entry, prev_term))


def encode_entry_parts(entry: Entry, prev_term: int) -> tuple[bytes, bytes]:
    """One `WAL_ENTRY` record as `(everything before the data, the data)`: the append hot path joins the
    records of a write once, so the entry's data is copied once, not three times. Hand-inlined
    `encode_record`, the CRC over the two pieces."""
    data = entry.data
    invariant(len(data) <= ENTRY_DATA_BYTES_MAX, "a WAL entry must be small enough to resync after damage")
    length = _U32.pack(ENTRY_OVERHEAD_BYTES + len(data))
    prefix = _ENTRY_TAIL.pack(_KIND_WAL_ENTRY, entry.index, entry.term, entry.type, prev_term)
    return length + _U32.pack(crc32c(data, crc32c(prefix, crc32c(length)))) + prefix, data


def decode_entry_body(index: int, term: int, body: bytes) -> tuple[Entry, int]:
    """`(entry, prev_term)` from a verified record's identity and body."""
    if len(body) < _ENTRY_BODY.size:
        raise CorruptRecord(f"WAL entry {index} body shorter than its prefix")
    entry_type, prev_term = _ENTRY_BODY.unpack_from(body, 0)
    if entry_type not in _ENTRY_TYPES:
        raise CorruptRecord(f"WAL entry {index} has unknown type {entry_type}")
    return Entry(index, term, EntryType(entry_type), bytes(body[_ENTRY_BODY.size :])), prev_term


def _text(raw: bytes) -> str:
    try:
        return bytes(raw).decode()
    except UnicodeDecodeError:
        raise CorruptRecord("a stored name is not valid UTF-8") from None


# --- Hard state ------------------------------------------------------------------------------------

ANCHOR_NONE = (1 << 64) - 1  # `LogEnd.anchor` after a cut: no record in the log vouches for entries above


@attrs.frozen
class LogEnd:
    """Where the log ended when a hard state was saved: its last `index` and that entry's `term` (0 if
    unknown), and the `anchor`: the sequence of the newest hard-state record in the log at that moment (a
    segment record's own sequence; 0 if the log held none; `ANCHOR_NONE` when the hard state was saved for
    a cut that removes what lies above `index`, so no record may vouch for it)."""

    index: int
    term: int
    anchor: int


@attrs.frozen
class DecodedHardState:
    """A hard-state body read back: the state, its watermark term, and its log end (None before version 3)."""

    hard_state: HardState
    watermark_term: int
    log_end: LogEnd | None = None


def encode_hard_state(hs: HardState, sequence: int, watermark_term: int, log_end: LogEnd) -> bytes:
    """A slot's `HARD_STATE` record, body version 3 (`b` says so)."""
    vote = b"" if hs.voted_for is None else hs.voted_for.encode()
    invariant(hs.voted_for != "", "a vote is a non-empty node id or None")
    invariant(len(vote) <= VOTE_BYTES_MAX, "voted_for is longer than a hard-state slot allows")
    prefix = _HARD_STATE.pack(hs.current_term, hs.commit_index, hs.acked_watermark, watermark_term,
                              int(hs.repairing), hs.vote_fence_term, log_end.index, log_end.term,
                              log_end.anchor, len(vote))
    return encode_record(Kind.HARD_STATE, sequence, HARD_STATE_BODY_VERSION, prefix + vote)


def encode_wal_hard_state(hs: HardState, sequence: int, watermark_term: int, log_end: LogEnd) -> bytes:
    """A segment's `WAL_HARD_STATE` record: the slot record's body under its own kind, the term in `b` (so a
    scan that keeps the highest term it saw counts it like an entry's)."""
    slot = encode_hard_state(hs, sequence, watermark_term, log_end)
    return encode_record(Kind.WAL_HARD_STATE, sequence, hs.current_term, slot[HEADER_BYTES:])


def slot_body_version(ident_b: int) -> int:
    """The body version a slot record's `b` names (0 for version 1, which wrote 0 there), or 0 if none."""
    return {0: 1, 2: 2, HARD_STATE_BODY_VERSION: HARD_STATE_BODY_VERSION}.get(ident_b, 0)


def segment_body_version(segment_version: int) -> int:
    """The body version of the `WAL_HARD_STATE` records a segment of this format holds, or 0 if it holds
    none (format 1, or a header that does not read: its hard-state records are junk, `scan`)."""
    return {2: 1, 3: 2, 4: HARD_STATE_BODY_VERSION}.get(segment_version, 0)


def decode_hard_state(body: bytes, version: int) -> DecodedHardState:
    """The hard state, its watermark term and log end, from a body of `version` (1, 2 or 3). The version
    comes from where the record sits (`slot_body_version`, `segment_body_version`), never from guessing by
    length: a newer body can fit an older layout by accident."""
    if version == 1:
        return _decode_v1(body)
    layout = {2: _HARD_STATE_V2, 3: _HARD_STATE}.get(version)
    if layout is None or len(body) < layout.size:
        raise CorruptRecord("hard-state body shorter than its prefix or of an unknown version")
    fields = layout.unpack_from(body, 0)
    term, commit, watermark, watermark_term, repairing, fence = fields[:6]
    log_end = LogEnd(*fields[6:9]) if version == 3 else None
    vote_len = fields[-1]
    vote = body[layout.size :]
    if len(vote) != vote_len or repairing > 1:
        raise CorruptRecord("hard-state body is malformed")
    hs = HardState(current_term=term, voted_for=_text(vote) if vote else None, commit_index=commit,
                   acked_watermark=watermark, repairing=bool(repairing), vote_fence_term=fence)
    return DecodedHardState(hs, watermark_term, log_end)


# Version 1 kept the vote fence in `voted_for` (never a node id: ids never contain '<').
_V1_FENCE_PREFIX = "<fenced-through:"
_V1_VOTE_UNKNOWN = "<unknown>"


def _decode_v1(body: bytes) -> DecodedHardState:
    if len(body) < _HARD_STATE_V1.size:
        raise CorruptRecord("hard-state body shorter than its prefix")
    term, commit, watermark, watermark_term, repairing, vote_len = _HARD_STATE_V1.unpack_from(body, 0)
    vote = body[_HARD_STATE_V1.size :]
    if len(vote) != vote_len or repairing > 1:
        raise CorruptRecord("hard-state body is malformed")
    voted_for, fence = _text(vote) if vote else None, 0
    if voted_for == _V1_VOTE_UNKNOWN:
        voted_for, fence = None, term  # the vote in this term is unknown: fenced through it
    elif voted_for is not None and voted_for.startswith(_V1_FENCE_PREFIX) and voted_for.endswith(">"):
        digits = voted_for[len(_V1_FENCE_PREFIX) : -1]
        if not digits.isdigit():
            raise CorruptRecord("hard-state body holds a malformed vote fence")
        voted_for, fence = None, int(digits)
    hs = HardState(current_term=term, voted_for=voted_for, commit_index=commit, acked_watermark=watermark,
                   repairing=bool(repairing), vote_fence_term=fence)
    return DecodedHardState(hs, watermark_term)


# --- Snapshots -------------------------------------------------------------------------------------


def _encode_names(names: tuple[str, ...]) -> bytes:
    parts = [_COUNT.pack(len(names))]
    for name in names:
        raw = name.encode()
        parts.append(_COUNT.pack(len(raw)) + raw)
    return b"".join(parts)


def _decode_names(buffer: bytes, offset: int) -> tuple[tuple[str, ...], int]:
    if offset + 2 > len(buffer):
        raise CorruptRecord("snapshot membership truncated")
    (count,) = _COUNT.unpack_from(buffer, offset)
    offset += 2
    names = []
    for _ in range(count):
        if offset + 2 > len(buffer):
            raise CorruptRecord("snapshot membership truncated")
        (size,) = _COUNT.unpack_from(buffer, offset)
        names.append(_text(buffer[offset + 2 : offset + 2 + size]))
        offset += 2 + size
    if offset > len(buffer):
        raise CorruptRecord("snapshot membership truncated")
    return tuple(names), offset


def encode_snapshot(meta: SnapshotMeta, data: bytes) -> bytes:
    conf = _encode_names(meta.conf.voters) + _encode_names(meta.conf.learners)
    body = _U32.pack(len(conf)) + conf + data
    return file_header(SNAPSHOT_FILE_TYPE) + encode_record(Kind.SNAPSHOT, meta.index, meta.term, body)


def decode_snapshot_body(index: int, term: int, body: bytes) -> tuple[SnapshotMeta, bytes]:
    if len(body) < 4:
        raise CorruptRecord("snapshot body shorter than its prefix")
    (conf_len,) = _U32.unpack_from(body, 0)
    conf = body[4 : 4 + conf_len]
    if len(conf) != conf_len:
        raise CorruptRecord("snapshot membership truncated")
    voters, offset = _decode_names(conf, 0)
    learners, offset = _decode_names(conf, offset)
    if offset != conf_len:
        raise CorruptRecord("snapshot membership has trailing bytes")
    meta = SnapshotMeta(index=index, term=term, conf=ConfState(voters=voters, learners=learners))
    return meta, bytes(body[4 + conf_len :])
