"""The `$route` wire format, sans-IO: forwarded messages and subject-interest frames between nodes (L5).

Owns: the bytes of the reserved group `$route` (node invariant 2), which rides the same links as Raft
and `$rpc` frames. Five frame kinds (little-endian, like the transport's own frames):

    MSGS    kind u8 | count u32 | messages, each:
            flags u8 (bit 0 reply, bit 1 headers, bit 2 shown) | subject u16+bytes | [reply u16+bytes]
            | [shown u16+bytes] | queues u16 count, each u16+bytes | [headers u32+bytes] | payload u32+bytes
    STATE   kind u8 | flags u8 (bit 0 first chunk, bit 1 last chunk) | epoch u64 | seq u64 | entries
    DELTA   kind u8 | epoch u64 | seq u64 | entries                    (weight 0 removes an entry)
    DIGEST  kind u8 | epoch u64 | seq u64 | count u32 | digest u64
    RESYNC  kind u8                                                    ("send me your full STATE")
    GOSSIP  kind u8 | address str16 | count u16, each name str16 | address str16
            (route discovery, `route_gossip`: the sender's own cluster "host:port" — "" when it listens
            on a wildcard host — then the other nodes it knows with theirs)

    entries: count u32, each subject u16+bytes | queue u16+bytes (empty: a plain subscription) | weight u32

A message in MSGS is nats-server's RMSG: the subject and reply as the publisher sent them (reply bytes
are not checked; nats-server does not check them either), the queue groups the receiver must serve one
member of, then headers and payload. A JetStream delivery (`ClientServer.deliver_as`) also carries the
subject its subscribers see (`shown`: the stream message's own), while `subject` (the pull request's
reply subject) is what it is matched by. Messages travel in batches: a burst of small publishes costs a few
transport frames, not one frame each (a peer's send queue is bounded in frames as well as bytes). An
interest entry is nats-server's RS+/RS-: a subject filter, a queue name and the number of queue members
behind it (1 for plain interest, which has no weight).

Invariants:
  1. Decoding never trusts a length: every count and size is checked against what remains (the shared
     `binary.Reader`), and every malformed frame raises `TransportProtocolError` — the transport closes
     that one link (transport invariant 2).
  2. A decoded message's subject is a valid subject — literal, or with wildcard tokens, which a client
     may publish on (client_server invariant 7) — and a decoded interest subject a valid filter; queue names are valid literal subjects (as `ClientConn` accepts them); a STATE entry has a
     positive weight. Nothing a peer sends reaches the sublist unchecked.
  3. `encode_state` and `encode_delta` split many entries into frames of at most `STATE_CHUNK_BYTES_MAX`
     bytes of entries, numbered with consecutive sequences (a STATE's first chunk flagged FIRST, its last
     LAST), so no interest frame is ever large.

Imports: stdlib, L0–L1 (`subjects`), L4 (`transport.binary`, `transport.errors`).
Reference: nats-server `server/route.go` (RS+, RS-, RMSG with queue names).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from jsraft import subjects
from jsraft.errors import InvalidSubject
from jsraft.transport.binary import U8, U16, U32, Reader, flag_bits, str16
from jsraft.transport.errors import TransportProtocolError

ROUTE_GROUP = "$route"
# Entries per STATE chunk are bounded by bytes: a chunk stays a small fraction of a frame and of the
# peer's send queue, so a large interest set never needs one oversized frame.
STATE_CHUNK_BYTES_MAX = 256 << 10
# A batch of forwarded messages is sent once it holds this many bytes (a larger message goes alone).
MSGS_BATCH_BYTES_MAX = 256 << 10
_MSG_BYTES_MIN = 1 + 2 + 2 + 4  # flags, subject length, queue count, payload length

_HEAD = struct.Struct("<BQQ")  # kind, epoch, seq
_EPOCH_SEQ = struct.Struct("<QQ")
_DIGEST = struct.Struct("<BQQIQ")  # kind, epoch, seq, count, digest
_MSG_REPLY, _MSG_HEADERS, _MSG_SHOWN = 1, 2, 4
_FLAGS_LENGTH = struct.Struct("<BH")  # a message's flags and subject length
_NO_QUEUES_PAYLOAD = struct.Struct("<HI")  # queue count 0, payload length
_STATE_FIRST, _STATE_LAST = 1, 2

Key = tuple[str, str]  # (subject filter, queue name or "" for plain interest)


class Kind(enum.IntEnum):
    """Frame kinds. Numbers are on the wire: never reuse or renumber one."""

    MSGS = 1
    STATE = 2
    DELTA = 3
    DIGEST = 4
    RESYNC = 5
    GOSSIP = 6


_MSGS_KIND = bytes([Kind.MSGS])


class RoutedMsg(NamedTuple):
    subject: str  # matched against the subscriptions
    subject_bytes: bytes  # what the subscribers see: the subject's bytes, or the shown subject's
    reply: bytes | None
    queues: tuple[str, ...]
    headers: bytes | None
    payload: bytes


class Interest(NamedTuple):
    """STATE or DELTA: `entries` maps a key to its weight (0 in a DELTA: removed)."""

    kind: Kind
    epoch: int
    seq: int
    first: bool
    last: bool
    entries: dict[Key, int]


class Digest(NamedTuple):
    epoch: int
    seq: int
    count: int
    digest: int


class Resync(NamedTuple):
    pass


class Msgs(NamedTuple):
    messages: list[RoutedMsg]


class Gossip(NamedTuple):
    """The sender's cluster address ("" unknown) and the nodes it knows: name -> "host:port"."""

    address: str
    nodes: dict[str, str]


Frame = Msgs | Interest | Digest | Resync | Gossip
# Nodes one GOSSIP frame may list: far more than any cluster, and a bound on what a peer can make us dial.
GOSSIP_NODES_MAX = 1024


# --- Encoding -------------------------------------------------------------------------------------------


def encode_msg(subject: bytes, reply: bytes | None, queues: Sequence[str], headers: bytes | None,
               payload: bytes, shown: bytes | None = None) -> bytes:
    """One message of a MSGS frame; `subject`, `reply` and `shown` are wire bytes (`protocol.wire.wire_text`)."""
    if not queues and headers is None and reply is not None and shown is not None:
        # A JetStream delivery (most of what crosses a route while a consumer drains): one pack.
        return b"".join((_FLAGS_LENGTH.pack(_MSG_REPLY | _MSG_SHOWN, len(subject)), subject, U16.pack(len(reply)),
                         reply, U16.pack(len(shown)), shown, _NO_QUEUES_PAYLOAD.pack(0, len(payload)), payload))
    parts = [U8.pack(flag_bits(reply is not None, headers is not None, shown is not None)), U16.pack(len(subject)),
             subject]
    if reply is not None:
        parts += [U16.pack(len(reply)), reply]
    if shown is not None:
        parts += [U16.pack(len(shown)), shown]
    parts.append(U16.pack(len(queues)))
    parts += [str16(queue) for queue in queues]
    if headers is not None:
        parts += [U32.pack(len(headers)), headers]
    parts += [U32.pack(len(payload)), payload]
    return b"".join(parts)


def encode_msgs(messages: Sequence[bytes]) -> bytes:
    """A MSGS frame of messages made by `encode_msg`."""
    return b"".join([U8.pack(Kind.MSGS), U32.pack(len(messages)), *messages])


def _entry(key: Key, weight: int) -> bytes:
    return str16(key[0]) + str16(key[1]) + U32.pack(weight)


def _chunks(entries: Iterable[tuple[Key, int]]) -> list[list[bytes]]:
    """Encoded entries, grouped so that each group holds at most `STATE_CHUNK_BYTES_MAX` bytes (or one
    entry); never zero groups, so an empty set still makes one frame."""
    chunks: list[list[bytes]] = [[]]
    size = 0
    for key, weight in entries:
        entry = _entry(key, weight)
        if chunks[-1] and size + len(entry) > STATE_CHUNK_BYTES_MAX:
            chunks.append([])
            size = 0
        chunks[-1].append(entry)
        size += len(entry)
    return chunks


def encode_delta(epoch: int, first_seq: int, entries: Iterable[tuple[Key, int]]) -> list[bytes]:
    """Changes as DELTA frames with sequences `first_seq, first_seq + 1, ...` (chunked like a STATE)."""
    return [b"".join([_HEAD.pack(Kind.DELTA, epoch, first_seq + index), U32.pack(len(chunk)), *chunk])
            for index, chunk in enumerate(_chunks(entries))]


def encode_state(epoch: int, first_seq: int, entries: Iterable[tuple[Key, int]]) -> list[bytes]:
    """The full interest set as STATE chunks with sequences `first_seq, first_seq + 1, ...` (invariant 3)."""
    chunks = _chunks(entries)
    return [b"".join([U8.pack(Kind.STATE), U8.pack(flag_bits(index == 0, index == len(chunks) - 1)),
                      _EPOCH_SEQ.pack(epoch, first_seq + index), U32.pack(len(chunk)), *chunk])
            for index, chunk in enumerate(chunks)]


def encode_digest(epoch: int, seq: int, count: int, digest: int) -> bytes:
    return _DIGEST.pack(Kind.DIGEST, epoch, seq, count, digest)


def encode_resync() -> bytes:
    return U8.pack(Kind.RESYNC)


def encode_gossip(address: str, nodes: dict[str, str]) -> bytes:
    items = sorted(nodes.items())[:GOSSIP_NODES_MAX]
    return b"".join([U8.pack(Kind.GOSSIP), str16(address), U16.pack(len(items)),
                     *(str16(name) + str16(where) for name, where in items)])


# --- Decoding (invariants 1 and 2) ----------------------------------------------------------------------


def decode(payload: bytes | memoryview) -> Frame:
    """One `$route` frame from a peer; `TransportProtocolError` when it is malformed."""
    if payload[:1] == _MSGS_KIND:
        frame = decode_msgs_fast(payload if type(payload) is bytes else bytes(payload))
        if frame is not None:
            return frame
    reader = Reader(payload, TransportProtocolError)
    kind = reader.u8()
    if kind == Kind.MSGS:
        count = reader.u32()
        if count * _MSG_BYTES_MIN > reader.remaining:
            raise reader.fail(f"{count} messages cannot fit {reader.remaining} bytes")
        frame: Frame = Msgs([_decode_msg(reader) for _ in range(count)])
    elif kind == Kind.STATE:
        flags = reader.flags(_STATE_FIRST | _STATE_LAST)
        epoch, seq = reader.u64(), reader.u64()
        frame = Interest(Kind.STATE, epoch, seq, bool(flags & _STATE_FIRST), bool(flags & _STATE_LAST),
                         _decode_entries(reader, weight_min=1))
    elif kind == Kind.DELTA:
        epoch, seq = reader.u64(), reader.u64()
        frame = Interest(Kind.DELTA, epoch, seq, False, False, _decode_entries(reader, weight_min=0))
    elif kind == Kind.DIGEST:
        frame = Digest(reader.u64(), reader.u64(), reader.u32(), reader.u64())
    elif kind == Kind.RESYNC:
        frame = Resync()
    elif kind == Kind.GOSSIP:
        frame = _decode_gossip(reader)
    else:
        raise reader.fail(f"unknown route frame kind {kind}")
    reader.finish()
    return frame


def _decode_msg(reader: Reader) -> RoutedMsg:
    flags = reader.flags(_MSG_REPLY | _MSG_HEADERS | _MSG_SHOWN)
    subject_bytes = reader.raw(reader.u16())
    subject = _message_subject(reader, subject_bytes)
    reply = reader.raw(reader.u16()) if flags & _MSG_REPLY else None
    if flags & _MSG_SHOWN:
        subject_bytes = reader.raw(reader.u16())
        _message_subject(reader, subject_bytes)
    queues = tuple(_queue(reader) for _ in range(reader.u16()))
    headers = reader.blob32(reader.remaining, "headers") if flags & _MSG_HEADERS else None
    return RoutedMsg(subject, subject_bytes, reply, queues, headers, reader.blob32(reader.remaining, "payload"))


def decode_msgs_fast(data: bytes) -> Msgs | None:
    """A MSGS frame of messages without queue groups (a burst of deliveries), decoded inline with the
    checks of `_decode_msg` (flag bits, lengths against what remains, UTF-8, literal subjects, no trailing
    bytes); None for anything else, which `decode` then takes the general way (and its errors)."""
    size = len(data)
    if size < 5 or data[0] != Kind.MSGS:
        return None
    count = U32.unpack_from(data, 1)[0]
    if count * _MSG_BYTES_MIN > size - 5:
        return None
    validate, at, messages = _published, 5, []
    try:
        for _ in range(count):
            flags, length = _FLAGS_LENGTH.unpack_from(data, at)
            subject_bytes = data[at + 3 : at + 3 + length]
            at += 3 + length
            if flags & ~(_MSG_REPLY | _MSG_HEADERS | _MSG_SHOWN) or len(subject_bytes) != length:
                return None
            subject = validate(subject_bytes.decode())
            reply = None
            if flags & _MSG_REPLY:
                length = U16.unpack_from(data, at)[0]
                reply, at = data[at + 2 : at + 2 + length], at + 2 + length
            if flags & _MSG_SHOWN:
                length = U16.unpack_from(data, at)[0]
                subject_bytes, at = data[at + 2 : at + 2 + length], at + 2 + length
                validate(subject_bytes.decode())
            if U16.unpack_from(data, at)[0]:
                return None  # queue groups: the general way
            at += 2
            headers = None
            if flags & _MSG_HEADERS:
                length = U32.unpack_from(data, at)[0]
                headers, at = data[at + 4 : at + 4 + length], at + 4 + length
            length = U32.unpack_from(data, at)[0]
            body, at = data[at + 4 : at + 4 + length], at + 4 + length
            if at > size:
                return None  # a slice came up short: truncated somewhere
            messages.append(RoutedMsg(subject, subject_bytes, reply, (), headers, body))
    except (struct.error, UnicodeDecodeError, InvalidSubject):
        return None
    return Msgs(messages) if at == size else None


def _published(subject: str) -> str:
    """A subject a client may publish on: literal (the common case, cached) or with wildcard tokens."""
    try:
        return subjects.validate_literal_cached(subject)
    except InvalidSubject:
        return subjects.validate(subject, wildcards=True)


def _message_subject(reader: Reader, data: bytes) -> str:
    subject = _text(reader, data, "subject")
    try:
        _published(subject)
    except InvalidSubject:
        raise reader.fail(f"forwarded message on invalid subject {subject[:64]!r}") from None
    return subject


def _decode_entries(reader: Reader, *, weight_min: int) -> dict[Key, int]:
    count = reader.u32()
    # Each entry takes at least 8 bytes: a count the frame cannot hold is refused before any work.
    if count * 8 > reader.remaining:
        raise reader.fail(f"{count} interest entries cannot fit {reader.remaining} bytes")
    entries: dict[Key, int] = {}
    for _ in range(count):
        filter_ = reader.str16("interest subject")
        try:
            subjects.validate(filter_, wildcards=True)
        except InvalidSubject:
            raise reader.fail(f"interest in invalid subject {filter_[:64]!r}") from None
        queue = _queue(reader, allow_empty=True)
        weight = reader.u32()
        if weight < weight_min:
            raise reader.fail(f"interest weight {weight} below {weight_min}")
        entries[(filter_, queue)] = weight
    return entries


def _decode_gossip(reader: Reader) -> Gossip:
    address = _gossip_address(reader, allow_empty=True)
    count = reader.u16()
    if count > GOSSIP_NODES_MAX:
        raise reader.fail(f"{count} gossiped nodes exceed {GOSSIP_NODES_MAX}")
    nodes: dict[str, str] = {}
    for _ in range(count):
        name = reader.str16("node name")
        if not 0 < len(name.encode()) <= 255 or any(c.isspace() or c in "/\\" for c in name):
            raise reader.fail(f"gossiped node name {name[:64]!r} is not a node name")
        nodes[name] = _gossip_address(reader)
    return Gossip(address, nodes)


def _gossip_address(reader: Reader, *, allow_empty: bool = False) -> str:
    """A "host:port" with a port in 1..65535 (or "" where allowed)."""
    text = reader.str16("cluster address")
    if text == "" and allow_empty:
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise reader.fail(f"gossiped address {text[:64]!r} is not host:port")
    return text


def _queue(reader: Reader, *, allow_empty: bool = False) -> str:
    queue = reader.str16("queue name")
    if queue == "" and allow_empty:
        return queue
    try:
        subjects.validate_literal_cached(queue)
    except InvalidSubject:
        raise reader.fail(f"invalid queue name {queue[:64]!r}") from None
    return queue


def _text(reader: Reader, data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise reader.fail(f"{what} is not valid UTF-8") from None

