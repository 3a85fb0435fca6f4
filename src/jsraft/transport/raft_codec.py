"""Binary encoding of every Raft message (`jsraft.raft.messages`), for the transport's DATA payloads.

Owns: the layout of each message class and of the values it carries (`Entry`, `SnapshotMeta`,
`ConfState`). Struct-based, versioned, never pickled. Every message is::

    version u8 (= 1) | tag u8 | from_id str8 | to_id str8 | term u64 | fields of the tag, in order

Integers are little-endian u64 (indexes, terms, offsets, byte counts), booleans are bits of one u8 flags
field per message, node ids are `str8` (u8 length + UTF-8), byte strings are `u32 length + bytes`, an
optional node id is a flag bit plus the id. An entry is `index u64 | term u64 | type u8 | data blob32`.

Invariants:
  1. `decode_message(encode_message(m)) == m` for every message the Raft core can build.
  2. `decode_message` is strict and total: any input either decodes to a message or raises
     `RaftCodecError` — never `struct.error`, `IndexError`, `ValueError` or `UnicodeDecodeError` — and
     rejects unknown versions, tags, entry types and flag bits, and trailing bytes.
  3. Decoding allocates no more than its input: counts and lengths are checked against the bytes that
     remain before anything is built (`binary.Reader`).
  4. A tag number is never reused or renumbered; a change of layout takes a new `CODEC_VERSION`.

Decoding checks structure only. Whether a message makes sense (addressed to this node, contiguous
entries, terms in order) is the Raft core's gateway, `raft.messages.validate_message()`; the runtime calls
it right after `decode_message`, and both raise a `PeerProtocolError`.

Imports: stdlib, L0, L1 (`raft`). Reference: etcd-io/raft `raftpb` (one schema per message kind).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from jsraft.errors import InvariantViolation, invariant
from jsraft.raft.messages import (
    MESSAGE_TYPES, AppendEntries, AppendEntriesResponse, InstallSnapshot, InstallSnapshotResponse, Message,
    RequestVote, RequestVoteResponse, StatusProbe, StatusProbeResponse, TermQuery, TermQueryResponse, TimeoutNow,
)
from jsraft.raft.types import ConfState, Entry, EntryType, SnapshotMeta
from jsraft.transport.binary import U8, U32, Reader, flag_bits, str8
from jsraft.transport.errors import RaftCodecError
from jsraft.transport.wire import FRAME_BYTES_MAX

CODEC_VERSION = 1
_HEAD = struct.Struct("<BB")  # version, tag
_U64 = struct.Struct("<Q")
_ENTRY = struct.Struct("<QQBI")  # index, term, type, data length
_APPEND = struct.Struct("<QQQQB")  # prev_log_index, prev_log_term, leader_commit, read_round, flags
_APPEND_RESPONSE = struct.Struct("<QQQQQQB")  # match, rejected, hint index, hint term, read_round, watermark, flags
_VOTE = struct.Struct("<QQB")  # last_log_index, last_log_term, flags
_VOTE_RESPONSE = struct.Struct("<QQB")  # commit_index, commit_term, flags
_SNAPSHOT_CHUNK = struct.Struct("<QQB")  # offset, total_bytes, flags
_SNAPSHOT_RESPONSE = struct.Struct("<QQQQB")  # snapshot_index, chunk_offset, next_offset, match, flags
_META = struct.Struct("<QQ")  # snapshot index, term

# One message is one transport frame, so nothing inside it can be larger than a frame.
BLOB_BYTES_MAX = FRAME_BYTES_MAX
# A u32 entry count is bounded further: each entry takes at least `_ENTRY.size` bytes (invariant 3), and
# no Raft config batches more than this many entries into one AppendEntries.
ENTRIES_PER_MESSAGE_MAX = 1 << 16
# Voters and learners are each counted in a u8: far above any real cluster (3 or 5 voters).
CONF_MEMBERS_MAX = 0xFF
_VALID_ENTRY_TYPES = frozenset(int(t) for t in EntryType)


class _Tag:
    """Wire tags of the message kinds (invariant 4). Plain ints: they index a dict on the hot path."""

    APPEND_ENTRIES = 1
    APPEND_ENTRIES_RESPONSE = 2
    REQUEST_VOTE = 3
    REQUEST_VOTE_RESPONSE = 4
    INSTALL_SNAPSHOT = 5
    INSTALL_SNAPSHOT_RESPONSE = 6
    TIMEOUT_NOW = 7
    STATUS_PROBE = 8
    STATUS_PROBE_RESPONSE = 9
    TERM_QUERY = 10
    TERM_QUERY_RESPONSE = 11


# --- Values carried inside messages ---------------------------------------------------------------


def _u64(value: int, what: str) -> bytes:
    # Our own messages never carry a negative or oversized number; one that does is a bug upstream.
    invariant(0 <= value <= 0xFFFFFFFFFFFFFFFF, f"{what} {value} fits a u64")
    return _U64.pack(value)


def _encode_entries(entries: tuple[Entry, ...]) -> list[bytes]:
    invariant(len(entries) <= ENTRIES_PER_MESSAGE_MAX, "entries per message within bound")
    parts = [U32.pack(len(entries))]
    for entry in entries:
        parts.append(_ENTRY.pack(entry.index, entry.term, entry.type, len(entry.data)))
        parts.append(entry.data)
    return parts


def _decode_entries(reader: Reader) -> tuple[Entry, ...]:
    count = reader.u32()
    if count > ENTRIES_PER_MESSAGE_MAX or count * _ENTRY.size > reader.remaining:
        raise reader.fail(f"entry count {count} impossible in {reader.remaining} bytes")
    entries = []
    for _ in range(count):
        index, term, entry_type, size = reader.unpack(_ENTRY)
        if entry_type not in _VALID_ENTRY_TYPES:
            raise reader.fail(f"unknown entry type {entry_type}")
        entries.append(Entry(index, term, EntryType(entry_type), reader.raw(size)))
    return tuple(entries)


def _encode_members(members: tuple[str, ...]) -> bytes:
    invariant(len(members) <= CONF_MEMBERS_MAX, "membership fits a u8 count")
    return U8.pack(len(members)) + b"".join(str8(member) for member in members)


def _decode_members(reader: Reader) -> tuple[str, ...]:
    return tuple(reader.str8("member id") for _ in range(reader.u8()))


def _encode_meta(meta: SnapshotMeta) -> bytes:
    invariant(min(meta.index, meta.term) >= 0, "snapshot position is not negative")
    return b"".join((_META.pack(meta.index, meta.term), _encode_members(meta.conf.voters),
                     _encode_members(meta.conf.learners)))


def _decode_meta(reader: Reader) -> SnapshotMeta:
    index, term = reader.unpack(_META)
    voters = _decode_members(reader)
    learners = _decode_members(reader)
    return SnapshotMeta(index=index, term=term, conf=ConfState(voters=voters, learners=learners))


# --- One encoder and one decoder per message kind --------------------------------------------------
# An encoder returns the parts after the common head; a decoder reads them and returns the fields.


def _enc_append(m: AppendEntries) -> list[bytes]:
    fixed = _APPEND.pack(m.prev_log_index, m.prev_log_term, m.leader_commit, m.read_round,
                         flag_bits(m.heartbeat))
    return [str8(m.leader_id), fixed, *_encode_entries(m.entries)]


def _dec_append(reader: Reader) -> dict[str, object]:
    leader_id = reader.str8("leader id")
    prev_log_index, prev_log_term, leader_commit, read_round, flags = reader.unpack(_APPEND)
    _check_flags(reader, flags, 0b1)
    return dict(leader_id=leader_id, prev_log_index=prev_log_index, prev_log_term=prev_log_term,
                leader_commit=leader_commit, read_round=read_round, heartbeat=bool(flags & 1),
                entries=_decode_entries(reader))


def _enc_append_response(m: AppendEntriesResponse) -> list[bytes]:
    return [_APPEND_RESPONSE.pack(m.match_index, m.rejected_index, m.reject_hint_index, m.reject_hint_term,
                                  m.read_round, m.acked_watermark, flag_bits(m.success, m.heartbeat, m.repairing))]


def _dec_append_response(reader: Reader) -> dict[str, object]:
    match_index, rejected, hint_index, hint_term, read_round, watermark, flags = reader.unpack(_APPEND_RESPONSE)
    _check_flags(reader, flags, 0b111)
    return dict(match_index=match_index, rejected_index=rejected, reject_hint_index=hint_index,
                reject_hint_term=hint_term, read_round=read_round, acked_watermark=watermark, success=bool(flags & 1),
                heartbeat=bool(flags & 2), repairing=bool(flags & 4))


def _enc_vote(m: RequestVote) -> list[bytes]:
    return [_VOTE.pack(m.last_log_index, m.last_log_term, flag_bits(m.pre_vote, m.leadership_transfer))]


def _dec_vote(reader: Reader) -> dict[str, object]:
    last_log_index, last_log_term, flags = reader.unpack(_VOTE)
    _check_flags(reader, flags, 0b11)
    return dict(last_log_index=last_log_index, last_log_term=last_log_term, pre_vote=bool(flags & 1),
                leadership_transfer=bool(flags & 2))


def _enc_vote_response(m: RequestVoteResponse) -> list[bytes]:
    return [_VOTE_RESPONSE.pack(m.commit_index, m.commit_term, flag_bits(m.vote_granted, m.pre_vote, m.repairing))]


def _dec_vote_response(reader: Reader) -> dict[str, object]:
    commit_index, commit_term, flags = reader.unpack(_VOTE_RESPONSE)
    _check_flags(reader, flags, 0b111)
    return dict(vote_granted=bool(flags & 1), pre_vote=bool(flags & 2), repairing=bool(flags & 4),
                commit_index=commit_index, commit_term=commit_term)


def _enc_snapshot(m: InstallSnapshot) -> list[bytes]:
    return [str8(m.leader_id), _encode_meta(m.meta),
            _SNAPSHOT_CHUNK.pack(m.offset, m.total_bytes, flag_bits(m.done)), U32.pack(len(m.data)), m.data]


def _dec_snapshot(reader: Reader) -> dict[str, object]:
    leader_id = reader.str8("leader id")
    meta = _decode_meta(reader)
    offset, total_bytes, flags = reader.unpack(_SNAPSHOT_CHUNK)
    _check_flags(reader, flags, 0b1)
    data = reader.blob32(BLOB_BYTES_MAX, "snapshot chunk")
    return dict(leader_id=leader_id, meta=meta, offset=offset, total_bytes=total_bytes, done=bool(flags & 1),
                data=data)


def _enc_snapshot_response(m: InstallSnapshotResponse) -> list[bytes]:
    return [_SNAPSHOT_RESPONSE.pack(m.snapshot_index, m.chunk_offset, m.next_offset, m.match_index,
                                    flag_bits(m.done))]


def _dec_snapshot_response(reader: Reader) -> dict[str, object]:
    snapshot_index, chunk_offset, next_offset, match_index, flags = reader.unpack(_SNAPSHOT_RESPONSE)
    _check_flags(reader, flags, 0b1)
    return dict(snapshot_index=snapshot_index, chunk_offset=chunk_offset, next_offset=next_offset,
                match_index=match_index, done=bool(flags & 1))


def _enc_nothing(m: TimeoutNow) -> list[bytes]:
    return []


def _dec_nothing(reader: Reader) -> dict[str, object]:
    return {}


def _enc_probe(m: StatusProbe) -> list[bytes]:
    return [U8.pack(flag_bits(m.repairing))]


def _dec_probe(reader: Reader) -> dict[str, object]:
    return dict(repairing=bool(reader.flags(0b1)))


def _enc_probe_response(m: StatusProbeResponse) -> list[bytes]:
    flags = U8.pack(flag_bits(m.repairing, m.leader_id is not None))
    return [flags] if m.leader_id is None else [flags, str8(m.leader_id)]


def _dec_probe_response(reader: Reader) -> dict[str, object]:
    flags = reader.flags(0b11)
    leader_id = reader.str8("leader id") if flags & 2 else None
    return dict(repairing=bool(flags & 1), leader_id=leader_id)


def _enc_term_query(m: TermQuery) -> list[bytes]:
    return [_u64(m.query_id, "query id")]


def _dec_term_query(reader: Reader) -> dict[str, object]:
    (query_id,) = reader.unpack(_U64)
    return dict(query_id=query_id)


def _enc_term_query_response(m: TermQueryResponse) -> list[bytes]:
    return [_u64(m.query_id, "query id"), U8.pack(flag_bits(m.term_known))]


def _dec_term_query_response(reader: Reader) -> dict[str, object]:
    (query_id,) = reader.unpack(_U64)
    return dict(query_id=query_id, term_known=bool(reader.flags(0b1)))


def _check_flags(reader: Reader, flags: int, defined_mask: int) -> None:
    if flags & ~defined_mask:
        raise reader.fail(f"undefined flag bits {flags & ~defined_mask:#04x}")


_Encoder = Callable[[Message], list[bytes]]
_Decoder = Callable[[Reader], dict[str, object]]
_CODECS: dict[type, tuple[int, _Encoder, _Decoder]] = {
    AppendEntries: (_Tag.APPEND_ENTRIES, _enc_append, _dec_append),  # type: ignore[dict-item]
    AppendEntriesResponse: (_Tag.APPEND_ENTRIES_RESPONSE, _enc_append_response, _dec_append_response),  # type: ignore[dict-item]
    RequestVote: (_Tag.REQUEST_VOTE, _enc_vote, _dec_vote),  # type: ignore[dict-item]
    RequestVoteResponse: (_Tag.REQUEST_VOTE_RESPONSE, _enc_vote_response, _dec_vote_response),  # type: ignore[dict-item]
    InstallSnapshot: (_Tag.INSTALL_SNAPSHOT, _enc_snapshot, _dec_snapshot),  # type: ignore[dict-item]
    InstallSnapshotResponse: (_Tag.INSTALL_SNAPSHOT_RESPONSE, _enc_snapshot_response, _dec_snapshot_response),  # type: ignore[dict-item]
    TimeoutNow: (_Tag.TIMEOUT_NOW, _enc_nothing, _dec_nothing),  # type: ignore[dict-item]
    StatusProbe: (_Tag.STATUS_PROBE, _enc_probe, _dec_probe),  # type: ignore[dict-item]
    StatusProbeResponse: (_Tag.STATUS_PROBE_RESPONSE, _enc_probe_response, _dec_probe_response),  # type: ignore[dict-item]
    TermQuery: (_Tag.TERM_QUERY, _enc_term_query, _dec_term_query),  # type: ignore[dict-item]
    TermQueryResponse: (_Tag.TERM_QUERY_RESPONSE, _enc_term_query_response, _dec_term_query_response),  # type: ignore[dict-item]
}
_BY_TAG: dict[int, tuple[type, _Decoder]] = {tag: (cls, dec) for cls, (tag, _, dec) in _CODECS.items()}
invariant(set(_CODECS) == set(MESSAGE_TYPES), "every Raft message class has a codec")


def encode_message(message: Message) -> bytes:
    """The bytes of `message` (invariant 1). A message the core could not have built is a bug: it raises
    `InvariantViolation` rather than putting something undecodable on the wire."""
    return b"".join(encode_message_parts(message))


def encode_message_parts(message: Message) -> list[bytes]:
    """`encode_message(message)` before the final join: the entries' data are the entries' own bytes,
    so a sender that frames the parts (`Transport.send_parts`) copies each entry once per peer, not twice."""
    codec = _CODECS.get(type(message))
    invariant(codec is not None, f"{type(message).__name__} is a Raft message")
    tag, encoder, _ = codec  # type: ignore[misc]
    head = [_HEAD.pack(CODEC_VERSION, tag), str8(message.from_id), str8(message.to_id),
            _u64(message.term, "term")]
    try:
        return head + encoder(message)
    except struct.error as exc:
        raise InvariantViolation(f"{type(message).__name__} has a field out of range: {exc}") from exc


def decode_message(data: bytes | bytearray | memoryview) -> Message:
    """The message in `data`; raises `RaftCodecError` for anything else (invariants 2 and 3)."""
    reader = Reader(data, RaftCodecError)
    version, tag = reader.unpack(_HEAD)
    if version != CODEC_VERSION:
        raise reader.fail(f"raft codec version {version} is not supported (this node speaks {CODEC_VERSION})")
    known = _BY_TAG.get(tag)
    if known is None:
        raise reader.fail(f"unknown raft message tag {tag}")
    cls, decoder = known
    from_id = reader.str8("from_id")
    to_id = reader.str8("to_id")
    term = reader.u64()
    fields = decoder(reader)
    reader.finish()
    return cls(from_id=from_id, to_id=to_id, term=term, **fields)  # type: ignore[no-any-return]
