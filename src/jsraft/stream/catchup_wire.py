"""Range catch-up protocol values and their binary encoding (layer L3).

Owns: what a repairing follower and the stream leader exchange (over the transport, per group):

    CatchupRequest  the ranges of sequences the follower still needs, and how many bytes it takes at once;
                    with `crcs_only` (a *probe*) it asks for each live message's content CRC, not its body
    CatchupChunk    the leader's answer: messages (seq, subject, headers, payload, timestamp, content CRC)
                    in seq order — or, for a probe, `crcs` (seq, content CRC) — the sub-ranges of the
                    request holding no live message (`deleted`), and `next_seq` to ask from next (0: every
                    requested range is answered)
    CatchupRefusal  the leader will not serve (it has faults in those ranges, or is not current)

Wire (little-endian): `version u8 | kind u8 | body`;
    request: snapshot_index u64, bytes_max u32, stream_len u16, stream, count u32, (first u64, last u64) x count
    probe:   the same body as a request (kind 4)
    chunk:   next_seq u64, deleted count u32, (first u64, last u64) x count, msgs count u32, then per message
             seq u64, timestamp_ns u64, crc u32, subject_len u16, headers_len u32, payload_len u32, bytes
    crcs:    next_seq u64, deleted count u32, (first u64, last u64) x count, count u32, (seq u64, crc u32) x count
             (kind 5: a chunk answering a probe; a probe answer without live messages is a plain chunk)
    refusal: reason_len u16, reason, code_len u8, code (a `RefusalCode`: stable, for the requester to act on)

Invariants:
  1. `decode_catchup(encode_*(x)) == x`; malformed input raises `MalformedCatchup`, nothing else.
  2. Bounded: at most `RANGES_PER_REQUEST_MAX` ranges per request and `CHUNK_BYTES_MAX` (plus one message)
     per chunk, so neither side holds more than that for one exchange.
  3. The CRC is the content CRC of the message's canonical `MSG` record (`codec.encode_message`), which
     the follower recomputes before storing anything.
  4. A chunk carries messages or CRCs, never both.

Imports: L0, L1 (`limits`), attrs. Reference: DESIGN.md §6 (range catch-up).
"""

from __future__ import annotations

import struct

import attrs

from jsraft import limits
from jsraft.stream.errors import MalformedCatchup
from jsraft.stream.snapshot import Ranges

CATCHUP_VERSION = 1
RANGES_PER_REQUEST_MAX = 1024
CHUNK_BYTES_MAX = 8 << 20
CHUNK_BYTES_DEFAULT = 1 << 20
_KIND_REQUEST, _KIND_CHUNK, _KIND_REFUSAL, _KIND_PROBE, _KIND_CRCS = 1, 2, 3, 4, 5
_KINDS = (_KIND_REQUEST, _KIND_CHUNK, _KIND_REFUSAL, _KIND_PROBE, _KIND_CRCS)
_SEQ_CRC = struct.Struct("<QI")
CRC_BYTES = _SEQ_CRC.size  # what one probed message costs in a chunk's byte budget
_ENVELOPE = struct.Struct("<BB")
_REQUEST = struct.Struct("<QIH")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_PAIR = struct.Struct("<QQ")
_MSG = struct.Struct("<QQIHII")

# (seq, subject, headers, payload, timestamp_ns, crc): one per message sent, so a tuple (DESIGN §12).
CatchupMsg = tuple[int, str, bytes, bytes, int, int]



@attrs.frozen(kw_only=True)
class CatchupRequest:
    stream: str
    snapshot_index: int
    ranges: Ranges
    bytes_max: int = CHUNK_BYTES_DEFAULT
    crcs_only: bool = False


@attrs.frozen(kw_only=True)
class CatchupChunk:
    msgs: tuple[CatchupMsg, ...] = ()
    deleted: Ranges = ()
    next_seq: int = 0
    crcs: tuple[tuple[int, int], ...] = ()  # (seq, content CRC) per live message, answering a probe


class RefusalCode:
    """The stable codes of a `CatchupRefusal` (and of a refused `stream.snapshot`): what a requester may
    branch on; `reason` is for humans. Every refusal is retried by the requester after a wait."""

    refused = "refused"  # no more specific code
    not_leader = "not_leader"  # the asked node does not lead the stream (now)
    no_stream = "no_stream"  # the asked node has no such stream
    behind_snapshot = "behind_snapshot"  # it applied less than the snapshot the request is for
    source_not_current = "source_not_current"  # its replica is drifted, repairing or replaying
    source_faulty = "source_faulty"  # its store lists faults (in the requested ranges, or at all)
    source_disagreed = "source_disagreed"  # its store disagreed with the majority at its latest audit
    source_unjudged = "source_unjudged"  # its store awaits an audit's confirmation (an unverified repair)
    ALL = frozenset({refused, not_leader, no_stream, behind_snapshot, source_not_current, source_faulty,
                     source_disagreed, source_unjudged})


@attrs.frozen(kw_only=True)
class CatchupRefusal:
    reason: str
    code: str = RefusalCode.refused


def _pairs(ranges: Ranges) -> list[bytes]:
    return [_U32.pack(len(ranges)), *(_PAIR.pack(first, last) for first, last in ranges)]


def encode_request(request: CatchupRequest) -> bytes:
    stream = request.stream.encode()
    kind = _KIND_PROBE if request.crcs_only else _KIND_REQUEST
    head = _ENVELOPE.pack(CATCHUP_VERSION, kind) + _REQUEST.pack(
        request.snapshot_index, request.bytes_max, len(stream))
    return b"".join([head, stream, *_pairs(request.ranges)])


def encode_chunk(chunk: CatchupChunk) -> bytes:
    if chunk.crcs:
        if chunk.msgs:
            raise MalformedCatchup("a catch-up chunk carries messages or CRCs, not both")
        return b"".join([_ENVELOPE.pack(CATCHUP_VERSION, _KIND_CRCS), _U64.pack(chunk.next_seq),
                         *_pairs(chunk.deleted), _U32.pack(len(chunk.crcs)),
                         *(_SEQ_CRC.pack(seq, crc) for seq, crc in chunk.crcs)])
    parts = [_ENVELOPE.pack(CATCHUP_VERSION, _KIND_CHUNK), _U64.pack(chunk.next_seq), *_pairs(chunk.deleted),
             _U32.pack(len(chunk.msgs))]
    for seq, subject, headers, payload, timestamp_ns, crc in chunk.msgs:
        subject_bytes = subject.encode()
        parts += [_MSG.pack(seq, timestamp_ns, crc, len(subject_bytes), len(headers), len(payload)),
                  subject_bytes, headers, payload]
    return b"".join(parts)


def encode_refusal(refusal: CatchupRefusal) -> bytes:
    reason, code = refusal.reason.encode()[:0xFFFF], refusal.code.encode()[:0xFF]
    return (_ENVELOPE.pack(CATCHUP_VERSION, _KIND_REFUSAL) + struct.pack("<H", len(reason)) + reason
            + struct.pack("<B", len(code)) + code)


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data, self.position = memoryview(data), 0

    def take(self, layout: struct.Struct) -> tuple:
        if self.position + layout.size > len(self.data):
            raise MalformedCatchup("catch-up message ends early")
        values = layout.unpack_from(self.data, self.position)
        self.position += layout.size
        return values

    def blob(self, length: int) -> bytes:
        if self.position + length > len(self.data):
            raise MalformedCatchup("catch-up message ends early")
        value = bytes(self.data[self.position : self.position + length])
        self.position += length
        return value

    def ranges(self) -> Ranges:
        (count,) = self.take(_U32)
        if count > max(RANGES_PER_REQUEST_MAX, (len(self.data) - self.position) // _PAIR.size):
            raise MalformedCatchup(f"catch-up message claims {count} ranges")
        found = tuple(self.take(_PAIR) for _ in range(count))
        previous = 0
        for first, last in found:
            if not previous < first <= last:
                raise MalformedCatchup(f"catch-up range {first}..{last} is empty or out of order")
            previous = last
        return found

    def end(self) -> None:
        if self.position != len(self.data):
            raise MalformedCatchup("catch-up message has trailing bytes")


def decode_catchup(data: bytes) -> CatchupRequest | CatchupChunk | CatchupRefusal:
    reader = _Reader(data)
    version, kind = reader.take(_ENVELOPE)
    if version != CATCHUP_VERSION or kind not in _KINDS:
        raise MalformedCatchup(f"catch-up message version {version} kind {kind} is not known")
    try:
        if kind in (_KIND_REQUEST, _KIND_PROBE):
            value = _decode_request(reader, crcs_only=kind == _KIND_PROBE)
        elif kind == _KIND_CHUNK:
            value = _decode_chunk(reader)
        elif kind == _KIND_CRCS:
            value = _decode_crcs(reader)
        else:
            value = _decode_refusal(reader)
    except UnicodeDecodeError:
        raise MalformedCatchup("catch-up message holds text that is not UTF-8") from None
    reader.end()
    return value


def _decode_refusal(reader: _Reader) -> CatchupRefusal:
    reason = reader.blob(reader.take(struct.Struct("<H"))[0]).decode()
    code = reader.blob(reader.take(struct.Struct("<B"))[0]).decode()
    if code not in RefusalCode.ALL:
        raise MalformedCatchup(f"catch-up refusal code {code!r} is not known")
    return CatchupRefusal(reason=reason, code=code)


def _decode_request(reader: _Reader, *, crcs_only: bool) -> CatchupRequest:
    snapshot_index, bytes_max, stream_len = reader.take(_REQUEST)
    stream = reader.blob(stream_len).decode()
    ranges = reader.ranges()
    if not ranges or len(ranges) > RANGES_PER_REQUEST_MAX or not 0 < bytes_max <= CHUNK_BYTES_MAX:
        raise MalformedCatchup("catch-up request needs 1..1024 ranges and a byte budget up to 8 MiB")
    return CatchupRequest(stream=stream, snapshot_index=snapshot_index, ranges=ranges, bytes_max=bytes_max,
                          crcs_only=crcs_only)


def _decode_chunk(reader: _Reader) -> CatchupChunk:
    (next_seq,) = reader.take(_U64)
    deleted = reader.ranges()
    (count,) = reader.take(_U32)
    if count > (len(reader.data) - reader.position) // _MSG.size:
        raise MalformedCatchup(f"catch-up chunk claims {count} messages")
    msgs = []
    previous = 0
    for _ in range(count):
        seq, timestamp_ns, crc, subject_len, headers_len, payload_len = reader.take(_MSG)
        if seq <= previous or not 0 < subject_len <= limits.subject_bytes_max:
            raise MalformedCatchup(f"catch-up message {seq} is out of order or has no subject")
        if headers_len > limits.headers_bytes_max or payload_len > limits.payload_bytes_max:
            raise MalformedCatchup(f"catch-up message {seq} is above the server limits")
        subject = reader.blob(subject_len).decode()
        msgs.append((seq, subject, reader.blob(headers_len), reader.blob(payload_len), timestamp_ns, crc))
        previous = seq
    return CatchupChunk(msgs=tuple(msgs), deleted=deleted, next_seq=next_seq)


def _decode_crcs(reader: _Reader) -> CatchupChunk:
    (next_seq,) = reader.take(_U64)
    deleted = reader.ranges()
    (count,) = reader.take(_U32)
    if not 0 < count <= (len(reader.data) - reader.position) // _SEQ_CRC.size:
        raise MalformedCatchup(f"catch-up CRC chunk claims {count} messages")
    crcs = tuple(reader.take(_SEQ_CRC) for _ in range(count))
    if any(not previous < seq for previous, (seq, _) in zip([0] + [s for s, _ in crcs], crcs)):
        raise MalformedCatchup("catch-up CRCs are out of order")
    return CatchupChunk(crcs=crcs, deleted=deleted, next_seq=next_seq)
