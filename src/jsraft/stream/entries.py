"""Stream group log entries: binary, struct-packed, versioned (layer L3).

Owns: the encoding of every entry a stream's Raft group commits, and the one strict decoder for them.
The runtime puts these bytes in `raft.Entry.data`; every replica decodes and applies them in log order.

Envelope: `version u8 | kind u8 | body`. Bodies (little-endian):

    MSGS     first_seq u64, count u32, then per message
             timestamp_ns u64, flags u8, subject_len u16, msg_id_len u16, headers_len u32, payload_len u32,
             then subject, msg_id, headers, payload. Message i has seq `first_seq + i`.
    DELETE   seq u64, erase u8 (0/1)
    PURGE    flags u8 (1 subject, 2 seq, 4 keep), seq u64, keep u64, last_seq u64, subject_len u16, subject
    EXPIRE   cutoff_ns u64, up_to_seq u64
    CONFIG   meta_index u64 (the meta log index that set it; 0 unversioned), then the stream config as the
             raw JSON bytes received (non-empty)
    AUDIT    audit_id u64
    CONSUMER opaque bytes owned by `consumer` (routed by the runtime; the stream machine skips them)

Invariants:
  1. `decode_entry(encode_*(x)) == x` for every valid value (hypothesis round-trip tests).
  2. `decode_entry` either returns a fully checked value or raises `MalformedEntry`; no `struct.error`,
     `IndexError` or `UnicodeDecodeError` escapes, and trailing bytes are an error.
  3. Sequences in a MSGS entry are contiguous from `first_seq` (explicit: the leader assigned them).
  4. Kind numbers are durable: never reuse or renumber one.
  5. A decoded value holds no view of the entry's bytes, except a MSGS entry's payloads decoded with
     `payload_views` (for a store that copies what it keeps before the apply returns: no copy here).

The MSGS encoder is the hot path (DESIGN §12): one `struct.pack` per message and one `bytes.join` per
entry; no attrs value per message.

Imports: L0 (`errors`, `limits`), stdlib. Reference: DESIGN.md §6; nats-server `server/jetstream_cluster.go`
(`streamMsgOp`, `deleteMsgOp`, `purgeStreamOp`).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence

import attrs

from jsraft import limits
from jsraft.stream.errors import MalformedEntry

ENTRY_VERSION = 1
# A MSGS entry is bounded in messages so that applying it is bounded work; the leader starts a new entry
# past either bound (a single message above the byte bound still goes alone).
MSGS_PER_ENTRY_MAX = 8192
MSGS_ENTRY_BYTES_SOFT_MAX = 4 << 20
MSG_ID_BYTES_MAX = 0xFFFF

FLAG_ROLLUP_SUBJECT = 1  # after storing this message, purge its subject keeping 1 (`Nats-Rollup: sub`)
FLAG_ROLLUP_ALL = 2  # after storing this message, purge the stream keeping 1 (`Nats-Rollup: all`)
# After storing this message (a fired schedule, `Nats-Schedule-Next: purge`), purge the subject its
# `Nats-Scheduler` header names, up to it (ADR-51, `stream.schedules`); with a rollup, only the rollup runs.
FLAG_SCHEDULE_PURGE = 4
_MSG_FLAGS = FLAG_ROLLUP_SUBJECT | FLAG_ROLLUP_ALL | FLAG_SCHEDULE_PURGE
_ROLLUPS = FLAG_ROLLUP_SUBJECT | FLAG_ROLLUP_ALL

PURGE_SUBJECT, PURGE_SEQ, PURGE_KEEP = 1, 2, 4
_U64_MAX = (1 << 64) - 1

_ENVELOPE = struct.Struct("<BB")
_MSGS_HEAD = struct.Struct("<QI")
_MSG = struct.Struct("<QBHHII")
_DELETE = struct.Struct("<QB")
_PURGE = struct.Struct("<BQQQH")
_EXPIRE = struct.Struct("<QQ")
_AUDIT = struct.Struct("<Q")
_U64 = struct.Struct("<Q")


class EntryKind(enum.IntEnum):
    MSGS = 1
    DELETE = 2
    PURGE = 3
    EXPIRE = 4
    CONFIG = 5
    AUDIT = 6
    CONSUMER = 7



# A message inside a MSGS entry: (subject, headers, payload, timestamp_ns, msg_id, flags). A plain tuple
# because there is one per published message (DESIGN §12).
EntryMsg = tuple[str, bytes, bytes, int, str, int]


class MsgsBatch:
    """A decoded MSGS entry: messages with seqs `first_seq .. first_seq + len(msgs) - 1`."""

    __slots__ = ("first_seq", "msgs")
    kind = EntryKind.MSGS

    def __init__(self, first_seq: int, msgs: list[EntryMsg]) -> None:
        self.first_seq = first_seq
        self.msgs = msgs

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.msgs) - 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MsgsBatch) and (self.first_seq, self.msgs) == (other.first_seq, other.msgs)

    def __repr__(self) -> str:
        return f"MsgsBatch(first_seq={self.first_seq}, msgs={len(self.msgs)})"


@attrs.frozen(kw_only=True)
class DeleteEntry:
    kind = EntryKind.DELETE
    seq: int
    erase: bool = False


@attrs.frozen(kw_only=True)
class PurgeEntry:
    """JetStream purge, bounded by `last_seq`: the stream's last sequence when the leader proposed it,
    so that replaying the entry against a store that is already further along removes nothing newer."""

    kind = EntryKind.PURGE
    subject: str | None = None
    seq: int | None = None
    keep: int | None = None
    last_seq: int = 0


@attrs.frozen(kw_only=True)
class ExpireEntry:
    """Remove messages older than `cutoff_ns` from the head, never at or above `up_to_seq`."""

    kind = EntryKind.EXPIRE
    cutoff_ns: int
    up_to_seq: int


@attrs.frozen(kw_only=True)
class ConfigEntry:
    kind = EntryKind.CONFIG
    raw: bytes
    meta_index: int = 0  # the meta log index that set this config; 0: unversioned


@attrs.frozen(kw_only=True)
class AuditEntry:
    kind = EntryKind.AUDIT
    audit_id: int


@attrs.frozen(kw_only=True)
class ConsumerEntry:
    kind = EntryKind.CONSUMER
    body: bytes


Entry = MsgsBatch | DeleteEntry | PurgeEntry | ExpireEntry | ConfigEntry | AuditEntry | ConsumerEntry


# --- Encoding --------------------------------------------------------------------------------------


def _envelope(kind: EntryKind) -> bytes:
    return _ENVELOPE.pack(ENTRY_VERSION, kind)


def encode_msgs(first_seq: int, msgs: Sequence[tuple[bytes, bytes, bytes, int, bytes, int]]) -> bytes:
    """Encode a MSGS entry from `(subject, headers, payload, timestamp_ns, msg_id, flags)` with the
    subject and msg-id already UTF-8 encoded (the leader has them as bytes from the protocol)."""
    parts = [_envelope(EntryKind.MSGS), _MSGS_HEAD.pack(first_seq, len(msgs))]
    append, pack = parts.append, _MSG.pack
    for subject, headers, payload, timestamp_ns, msg_id, flags in msgs:
        append(pack(timestamp_ns, flags, len(subject), len(msg_id), len(headers), len(payload)))
        append(subject)
        append(msg_id)
        append(headers)
        append(payload)
    return b"".join(parts)


def encode_delete(seq: int, erase: bool = False) -> bytes:
    return _envelope(EntryKind.DELETE) + _DELETE.pack(seq, 1 if erase else 0)


def encode_purge(subject: str | None, seq: int | None, keep: int | None, last_seq: int) -> bytes:
    flags = (PURGE_SUBJECT if subject is not None else 0) | (PURGE_SEQ if seq is not None else 0) | (
        PURGE_KEEP if keep is not None else 0)
    subject_bytes = subject.encode() if subject is not None else b""
    head = _PURGE.pack(flags, seq or 0, keep or 0, last_seq, len(subject_bytes))
    return _envelope(EntryKind.PURGE) + head + subject_bytes


def encode_expire(cutoff_ns: int, up_to_seq: int) -> bytes:
    return _envelope(EntryKind.EXPIRE) + _EXPIRE.pack(cutoff_ns, up_to_seq)


def encode_config(raw: bytes, meta_index: int = 0) -> bytes:
    return _envelope(EntryKind.CONFIG) + _U64.pack(meta_index) + bytes(raw)


def encode_audit(audit_id: int) -> bytes:
    return _envelope(EntryKind.AUDIT) + _AUDIT.pack(audit_id)


def encode_consumer(body: bytes) -> bytes:
    return _envelope(EntryKind.CONSUMER) + bytes(body)


def encode_entry(entry: Entry) -> bytes:
    """Encode any decoded entry value (the inverse of `decode_entry`)."""
    if isinstance(entry, MsgsBatch):
        return encode_msgs(entry.first_seq, [(s.encode(), h, p, t, i.encode(), f) for s, h, p, t, i, f in entry.msgs])
    if isinstance(entry, DeleteEntry):
        return encode_delete(entry.seq, entry.erase)
    if isinstance(entry, PurgeEntry):
        return encode_purge(entry.subject, entry.seq, entry.keep, entry.last_seq)
    if isinstance(entry, ExpireEntry):
        return encode_expire(entry.cutoff_ns, entry.up_to_seq)
    if isinstance(entry, ConfigEntry):
        return encode_config(entry.raw, entry.meta_index)
    if isinstance(entry, AuditEntry):
        return encode_audit(entry.audit_id)
    return encode_consumer(entry.body)


# --- Decoding --------------------------------------------------------------------------------------


def entry_kind(data: bytes | memoryview) -> EntryKind:
    """The kind of an encoded entry, checking only the envelope."""
    if len(data) < _ENVELOPE.size:
        raise MalformedEntry("stream entry shorter than its envelope")
    version, kind = _ENVELOPE.unpack_from(data, 0)
    if version != ENTRY_VERSION:
        raise MalformedEntry(f"stream entry version {version} is not {ENTRY_VERSION}")
    try:
        return EntryKind(kind)
    except ValueError:
        raise MalformedEntry(f"unknown stream entry kind {kind}") from None


def decode_entry(data: bytes | memoryview, *, payload_views: bool = False) -> Entry:
    """Decode and check one entry; raise `MalformedEntry` (with the reason) on anything malformed.
    `payload_views`: a MSGS entry's payloads are read-only views of `data`, not copies (invariant 5)."""
    kind = entry_kind(data)
    body = memoryview(data)[_ENVELOPE.size :]
    try:
        if kind is EntryKind.MSGS:
            return _decode_msgs(body, payload_views)
        return _DECODERS[kind](body)
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as error:
        raise MalformedEntry(f"{kind.name} entry does not decode: {error}") from None


def _exact(body: memoryview, layout: struct.Struct, what: str) -> tuple:
    if len(body) != layout.size:
        raise MalformedEntry(f"{what} entry has {len(body)} body bytes, expected {layout.size}")
    return layout.unpack_from(body, 0)


def _decode_msgs(body: memoryview, views: bool = False) -> MsgsBatch:
    if len(body) < _MSGS_HEAD.size:
        raise MalformedEntry("MSGS entry shorter than its header")
    first_seq, count = _MSGS_HEAD.unpack_from(body, 0)
    if not 1 <= count <= MSGS_PER_ENTRY_MAX:
        raise MalformedEntry(f"MSGS entry holds {count} messages, not 1..{MSGS_PER_ENTRY_MAX}")
    if first_seq < 1 or first_seq + count - 1 > _U64_MAX:
        raise MalformedEntry(f"MSGS entry sequences from {first_seq} leave 1..2^64-1")
    msgs: list[EntryMsg] = []
    append = msgs.append
    position, end, unpack, size = _MSGS_HEAD.size, len(body), _MSG.unpack_from, _MSG.size
    subject_max, headers_max, payload_max = limits.subject_bytes_max, limits.headers_bytes_max, limits.payload_bytes_max
    for _ in range(count):  # per message: the hot path of every replica's apply (DESIGN §12)
        if position + size > end:
            raise MalformedEntry("MSGS entry ends inside a message header")
        timestamp_ns, flags, subject_len, id_len, headers_len, payload_len = unpack(body, position)
        position += size
        stop = position + subject_len + id_len + headers_len + payload_len
        if stop > end:
            raise MalformedEntry("MSGS entry ends inside a message")
        if flags and (flags & ~_MSG_FLAGS or flags & _ROLLUPS == _ROLLUPS):
            raise MalformedEntry(f"MSGS message flags {flags:#x} are not valid")
        if not 0 < subject_len <= subject_max:
            raise MalformedEntry(f"MSGS message subject length {subject_len} is not 1..{subject_max}")
        if headers_len > headers_max or payload_len > payload_max:
            raise MalformedEntry("MSGS message headers or payload above the server limit")
        subject = str(body[position : position + subject_len], "utf-8")
        position += subject_len
        # Most messages carry no msg-id and no headers: skip the slice and copy of nothing.
        if id_len:
            msg_id = str(body[position : position + id_len], "utf-8")
            position += id_len
        else:
            msg_id = ""
        if headers_len:
            headers = bytes(body[position : position + headers_len])
        else:
            headers = b""
        payload = body[position + headers_len : stop]
        append((subject, headers, payload if views else bytes(payload), timestamp_ns, msg_id, flags))
        position = stop
    if position != end:
        raise MalformedEntry(f"MSGS entry has {end - position} trailing bytes")
    return MsgsBatch(first_seq, msgs)


def _decode_delete(body: memoryview) -> DeleteEntry:
    seq, erase = _exact(body, _DELETE, "DELETE")
    if seq < 1 or erase not in (0, 1):
        raise MalformedEntry(f"DELETE entry seq {seq} / erase {erase} out of range")
    return DeleteEntry(seq=seq, erase=bool(erase))


def _decode_purge(body: memoryview) -> PurgeEntry:
    if len(body) < _PURGE.size:
        raise MalformedEntry("PURGE entry shorter than its header")
    flags, seq, keep, last_seq, subject_len = _PURGE.unpack_from(body, 0)
    if len(body) != _PURGE.size + subject_len:
        raise MalformedEntry("PURGE entry length does not match its subject length")
    if flags & ~(PURGE_SUBJECT | PURGE_SEQ | PURGE_KEEP):
        raise MalformedEntry(f"PURGE flags {flags:#x} are not valid")
    if (flags & PURGE_SEQ and flags & PURGE_KEEP) or (not flags & PURGE_SUBJECT and subject_len):
        raise MalformedEntry("PURGE entry combines seq with keep, or carries a subject it does not flag")
    if (not flags & PURGE_SEQ and seq) or (not flags & PURGE_KEEP and keep):
        raise MalformedEntry("PURGE entry carries a seq or keep it does not flag")
    subject = str(body[_PURGE.size :], "utf-8") if flags & PURGE_SUBJECT else None
    if subject is not None and not subject:
        raise MalformedEntry("PURGE entry flags an empty subject")
    return PurgeEntry(subject=subject, seq=seq if flags & PURGE_SEQ else None,
                      keep=keep if flags & PURGE_KEEP else None, last_seq=last_seq)


def _decode_expire(body: memoryview) -> ExpireEntry:
    cutoff_ns, up_to_seq = _exact(body, _EXPIRE, "EXPIRE")
    return ExpireEntry(cutoff_ns=cutoff_ns, up_to_seq=up_to_seq)


def _decode_config(body: memoryview) -> ConfigEntry:
    if len(body) <= _U64.size:
        raise MalformedEntry("CONFIG entry is empty")
    (meta_index,) = _U64.unpack_from(body, 0)
    return ConfigEntry(raw=bytes(body[_U64.size:]), meta_index=meta_index)


def _decode_audit(body: memoryview) -> AuditEntry:
    return AuditEntry(audit_id=_exact(body, _AUDIT, "AUDIT")[0])


def _decode_consumer(body: memoryview) -> ConsumerEntry:
    return ConsumerEntry(body=bytes(body))


_DECODERS = {
    EntryKind.MSGS: _decode_msgs,
    EntryKind.DELETE: _decode_delete,
    EntryKind.PURGE: _decode_purge,
    EntryKind.EXPIRE: _decode_expire,
    EntryKind.CONFIG: _decode_config,
    EntryKind.AUDIT: _decode_audit,
    EntryKind.CONSUMER: _decode_consumer,
}
