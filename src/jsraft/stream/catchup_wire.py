"""Range catch-up protocol values and their binary encoding (layer L3).

Owns: what a repairing follower and the stream leader exchange (over the transport, per group):

    CatchupRequest  the ranges of sequences the follower still needs, and how many bytes it takes at once
    CatchupChunk    the leader's answer: messages (seq, subject, headers, payload, timestamp, content CRC)
                    in seq order, the sub-ranges of the request holding no live message (`deleted`), and
                    `next_seq` to ask from next (0: every requested range is answered)
    CatchupRefusal  the leader will not serve (it has faults in those ranges, or is not current)

Wire (little-endian): `version u8 | kind u8 | body`;
    request: snapshot_index u64, bytes_max u32, stream_len u16, stream, count u32, (first u64, last u64) x count
    chunk:   next_seq u64, deleted count u32, (first u64, last u64) x count, msgs count u32, then per message
             seq u64, timestamp_ns u64, crc u32, subject_len u16, headers_len u32, payload_len u32, bytes
    refusal: reason_len u16, reason

Invariants:
  1. `decode_catchup(encode_*(x)) == x`; malformed input raises `MalformedCatchup`, nothing else.
  2. Bounded: at most `RANGES_PER_REQUEST_MAX` ranges per request and `CHUNK_BYTES_MAX` (plus one message)
     per chunk, so neither side holds more than that for one exchange.
  3. The CRC is the content CRC of the message's canonical `MSG` record (`codec.encode_message`), which
     the follower recomputes before storing anything.

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
_KIND_REQUEST, _KIND_CHUNK, _KIND_REFUSAL = 1, 2, 3
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


@attrs.frozen(kw_only=True)
class CatchupChunk:
    msgs: tuple[CatchupMsg, ...] = ()
    deleted: Ranges = ()
    next_seq: int = 0


@attrs.frozen(kw_only=True)
class CatchupRefusal:
    reason: str


def _pairs(ranges: Ranges) -> list[bytes]:
    return [_U32.pack(len(ranges)), *(_PAIR.pack(first, last) for first, last in ranges)]


def encode_request(request: CatchupRequest) -> bytes:
    stream = request.stream.encode()
    head = _ENVELOPE.pack(CATCHUP_VERSION, _KIND_REQUEST) + _REQUEST.pack(
        request.snapshot_index, request.bytes_max, len(stream))
    return b"".join([head, stream, *_pairs(request.ranges)])


def encode_chunk(chunk: CatchupChunk) -> bytes:
    parts = [_ENVELOPE.pack(CATCHUP_VERSION, _KIND_CHUNK), _U64.pack(chunk.next_seq), *_pairs(chunk.deleted),
             _U32.pack(len(chunk.msgs))]
    for seq, subject, headers, payload, timestamp_ns, crc in chunk.msgs:
        subject_bytes = subject.encode()
        parts += [_MSG.pack(seq, timestamp_ns, crc, len(subject_bytes), len(headers), len(payload)),
                  subject_bytes, headers, payload]
    return b"".join(parts)


def encode_refusal(refusal: CatchupRefusal) -> bytes:
    reason = refusal.reason.encode()[:0xFFFF]
    return _ENVELOPE.pack(CATCHUP_VERSION, _KIND_REFUSAL) + struct.pack("<H", len(reason)) + reason


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
    if version != CATCHUP_VERSION or kind not in (_KIND_REQUEST, _KIND_CHUNK, _KIND_REFUSAL):
        raise MalformedCatchup(f"catch-up message version {version} kind {kind} is not known")
    try:
        if kind == _KIND_REQUEST:
            value = _decode_request(reader)
        elif kind == _KIND_CHUNK:
            value = _decode_chunk(reader)
        else:
            value = CatchupRefusal(reason=reader.blob(reader.take(struct.Struct("<H"))[0]).decode())
    except UnicodeDecodeError:
        raise MalformedCatchup("catch-up message holds text that is not UTF-8") from None
    reader.end()
    return value


def _decode_request(reader: _Reader) -> CatchupRequest:
    snapshot_index, bytes_max, stream_len = reader.take(_REQUEST)
    stream = reader.blob(stream_len).decode()
    ranges = reader.ranges()
    if not ranges or len(ranges) > RANGES_PER_REQUEST_MAX or not 0 < bytes_max <= CHUNK_BYTES_MAX:
        raise MalformedCatchup("catch-up request needs 1..1024 ranges and a byte budget up to 8 MiB")
    return CatchupRequest(stream=stream, snapshot_index=snapshot_index, ranges=ranges, bytes_max=bytes_max)


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
