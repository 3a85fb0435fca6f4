"""The byte stream of a stream snapshot (`$JS.API.STREAM.SNAPSHOT` out, `STREAM.RESTORE` in) (layer L5).

Owns: the format a snapshot's chunks are slices of, its writer (`encode_*`) and its incremental, verifying
reader (`SnapshotReader`), and the state tuple of a set of messages (`TupleSum`: first, last, messages,
bytes, digest, computed exactly as a store computes its own).

The stream starts with `MAGIC`, then frames `kind u8 | length u32 | crc32c u32 | body`, the CRC covering
kind, length and body:

    HEADER    JSON: {"format": 1, "stream": name, "config": {...}, "state": {...}} (the stream info's)
    MSGS      message records exactly as a store keeps them (`codec.records.encode_message`: each with
              its own length and CRC32C), in increasing sequence order
    CONSUMER  JSON: one consumer's info (name, config, delivered, ack_floor), and under `STATE_KEY` its
              replicated state (delivered, ack floor, pending with delivery counts) in
              `consumer.snapshot`'s CRC'd encoding, base64; a backup written before has no state there
    END       JSON: the state tuple of the messages in the snapshot {"first_seq", "last_seq",
              "messages", "bytes", "digest"} — what the restored stream must hold

Chunk boundaries carry no meaning: a client may store the chunks' bytes as one file and send them back in
chunks of any size (as the `nats` CLI does).

Invariants:
  1. The reader accepts a stream only if every frame CRC and every message record CRC verifies, the
     sequences increase, exactly one HEADER comes first and one END last, and the END tuple equals the
     tuple the reader computed from the messages it read. Anything else is `BadSnapshot` (10062, no
     stream is made from it).
  2. Bounded: a frame's body is at most `FRAME_BYTES_MAX`; the reader buffers at most one frame.

Imports: stdlib, crc32c, L0 (`errors`), L1 (`codec`), L2 (`store.base.msg_size`), server `errors`. Reference: nats-server
`server/jetstream_api.go` (`jsStreamSnapshotRequest`, `jsStreamRestoreRequest`), whose payload is a tar of
store files; jsraft sends its own records instead.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

from crc32c import crc32c

from jsraft.codec.records import HEADER_BYTES, Kind, decode_message_body, encode_message, message_digest, read_record
from jsraft.errors import CorruptRecord
from jsraft.server.errors import RestoreFailed
from jsraft.store.base import msg_size

MAGIC = b"JSRSNAP1"
FORMAT_VERSION = 1
KIND_HEADER, KIND_MSGS, KIND_CONSUMER, KIND_END = 1, 2, 3, 4
FRAME_BYTES_MAX = 8 << 20
STATE_KEY = "jsraft_state"  # a CONSUMER frame's replicated state
_FRAME = struct.Struct("<BII")
_U64 = (1 << 64) - 1


class BadSnapshot(RestoreFailed):
    """The snapshot's bytes cannot be restored (invariant 1)."""

    default_description = "restore failed: the snapshot is damaged"


def _frame(kind: int, body: bytes) -> bytes:
    head = struct.pack("<BI", kind, len(body))
    return _FRAME.pack(kind, len(body), crc32c(body, crc32c(head))) + body


def encode_header(stream: str, config: dict[str, Any], state: dict[str, Any]) -> bytes:
    body = json.dumps({"format": FORMAT_VERSION, "stream": stream, "config": config, "state": state}).encode()
    return MAGIC + _frame(KIND_HEADER, body)


def encode_msgs(records: list[bytes]) -> bytes:
    return _frame(KIND_MSGS, b"".join(records))


def encode_consumer(info: dict[str, Any]) -> bytes:
    return _frame(KIND_CONSUMER, json.dumps(info).encode())


def encode_end(tuple_json: dict[str, Any]) -> bytes:
    return _frame(KIND_END, json.dumps(tuple_json).encode())


class TupleSum:
    """The state tuple of messages added in increasing sequence order, as a store would compute it."""

    def __init__(self) -> None:
        self.first_seq = 0
        self.last_seq = 0
        self.messages = 0
        self.bytes = 0
        self.digest = 0

    def add(self, seq: int, subject: bytes, headers: bytes, payload: bytes, crc: int) -> None:
        if self.messages == 0:
            self.first_seq = seq
        self.last_seq = seq
        self.messages += 1
        self.bytes += msg_size(len(subject), len(headers), len(payload))
        self.digest = (self.digest + message_digest(seq, crc)) & _U64

    def to_json(self, last_seq: int) -> dict[str, Any]:
        """The tuple; `last_seq` is the stream's (its tail may be deleted messages)."""
        # An empty store's first sequence is the one after its last, and 0 when it never held one.
        first = self.first_seq if self.messages else (last_seq + 1 if last_seq else 0)
        return {"first_seq": first, "last_seq": last_seq, "messages": self.messages, "bytes": self.bytes,
                "digest": f"{self.digest:016x}"}


def message_record(seq: int, timestamp_ns: int, subject: str, headers: bytes, payload: bytes,
                   total: TupleSum) -> bytes:
    """One message's record, counted in `total`."""
    subject_bytes = subject.encode()
    record, crc = encode_message(seq, timestamp_ns, subject_bytes, headers, payload)
    total.add(seq, subject_bytes, headers, payload, crc)
    return record


def iter_records(body: bytes) -> Iterator[tuple[int, int, bytes, bytes, bytes, int]]:
    """`(seq, timestamp_ns, subject, headers, payload, crc)` of each message record in a MSGS body, each
    verified (`BadSnapshot` at the first that does not)."""
    offset = 0
    while offset < len(body):
        try:
            view = read_record(body, offset)
            if view.kind != Kind.MSG:
                raise CorruptRecord(f"record kind {view.kind}")
            subject, headers, payload = decode_message_body(body[offset + HEADER_BYTES:offset + view.length])
        except CorruptRecord as error:
            raise BadSnapshot(f"restore failed: a message record is damaged ({error})") from None
        yield view.ident_a, view.ident_b, bytes(subject), bytes(headers), bytes(payload), view.crc
        offset += view.length


class SnapshotReader:
    """Feed bytes in any slices; `messages()` yields each verified message; `finish()` checks the end."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._magic_seen = False
        self.header: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        self.consumers: list[dict[str, Any]] = []
        self.total = TupleSum()
        self._pending: list[tuple[int, int, str, bytes, bytes]] = []

    def feed(self, data: bytes) -> None:
        self._buffer += data
        if not self._magic_seen:
            if len(self._buffer) < len(MAGIC):
                return
            if bytes(self._buffer[:len(MAGIC)]) != MAGIC:
                raise BadSnapshot("restore failed: not a jsraft snapshot (bad magic)")
            del self._buffer[:len(MAGIC)]
            self._magic_seen = True
        while len(self._buffer) >= _FRAME.size:
            kind, length, crc = _FRAME.unpack_from(self._buffer)
            if length > FRAME_BYTES_MAX:  # invariant 2
                raise BadSnapshot(f"restore failed: a frame claims {length} bytes")
            if len(self._buffer) < _FRAME.size + length:
                return
            body = bytes(self._buffer[_FRAME.size:_FRAME.size + length])
            if crc32c(body, crc32c(struct.pack("<BI", kind, length))) != crc:
                raise BadSnapshot("restore failed: a snapshot frame fails its checksum")
            del self._buffer[:_FRAME.size + length]
            self._frame(kind, body)

    def _frame(self, kind: int, body: bytes) -> None:
        if self.end is not None:
            raise BadSnapshot("restore failed: data after the end of the snapshot")
        if (kind == KIND_HEADER) != (self.header is None):
            raise BadSnapshot("restore failed: the snapshot must start with exactly one header")
        if kind == KIND_MSGS:
            self._msgs(body)
        elif kind in (KIND_HEADER, KIND_CONSUMER, KIND_END):
            try:
                value = json.loads(body)
            except ValueError:
                raise BadSnapshot("restore failed: a snapshot frame is not JSON") from None
            if not isinstance(value, dict):
                raise BadSnapshot("restore failed: a snapshot frame is not a JSON object")
            if kind == KIND_HEADER:
                if value.get("format") != FORMAT_VERSION:
                    raise BadSnapshot(f"restore failed: snapshot format {value.get('format')!r} is not supported")
                self.header = value
            elif kind == KIND_CONSUMER:
                self.consumers.append(value)
            else:
                self.end = value
        else:
            raise BadSnapshot(f"restore failed: unknown snapshot frame kind {kind}")

    def _msgs(self, body: bytes) -> None:
        for seq, timestamp_ns, subject, headers, payload, crc in iter_records(body):
            if seq <= self.total.last_seq:
                raise BadSnapshot(f"restore failed: sequence {seq} out of order")
            self.total.add(seq, subject, headers, payload, crc)
            self._pending.append((seq, timestamp_ns, subject.decode(errors="surrogateescape"), headers, payload))

    def messages(self) -> Iterator[tuple[int, int, str, bytes, bytes]]:
        """`(seq, timestamp_ns, subject, headers, payload)` of the messages read since the last call."""
        pending, self._pending = self._pending, []
        yield from pending

    def finish(self) -> dict[str, Any]:
        """The END tuple, once invariant 1 holds for the whole stream."""
        if self._buffer or self.end is None or self.header is None:
            raise BadSnapshot("restore failed: the snapshot is truncated (no end marker)")
        computed = self.total.to_json(int(self.end.get("last_seq", -1)))
        if computed != self.end:
            raise BadSnapshot(f"restore failed: the messages read ({computed}) do not match the snapshot's "
                              f"state ({self.end})")
        return self.end
