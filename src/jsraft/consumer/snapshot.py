"""Consumer snapshots: every consumer of a stream as bytes, carried in the stream snapshot's `extra`.

Owns: `encode_snapshot(consumer_set)` and `restore_snapshot(data, store, retention)`, and one consumer's
entry in the same format (`encode_consumer` / `decode_consumer`: a stream backup's consumer state). Format
(little-endian): `magic b"JSCS" | version u8 | applied_index u64 | count u32 | consumer* | crc32c u32`
where the CRC covers everything before it, and each consumer is

    name_len u8, name, created_ns u64, paused_until_ns u64, start_last_seq u64,
    delivered (consumer_seq u64, stream_seq u64), ack_floor (consumer_seq u64, stream_seq u64),
    config_len u32, config, pending_count u32, pending_count x (stream_seq u64, consumer_seq u64, ts i64),
    redelivered_count u32, redelivered_count x (stream_seq u64, count u32)

Invariants:
  1. `restore_snapshot(encode_snapshot(s), ...) == s` (Hypothesis test over random op sequences).
  2. A damaged, truncated or foreign blob raises `MalformedConsumerSnapshot`; a restored state passes
     `ConsumerState.check()` or is refused the same way (a CRC can pass on a writer bug).
  3. Pending entries are written in stream-seq order, so the restored dict keeps invariant 3 of `state`.
  4. An empty `extra` (a stream snapshot taken before any consumer existed) restores an empty set.

Imports: L0, L1 (`jsapi`), L2 (`store`), crc32c. Reference: DESIGN.md §6 (stream snapshots carry
consumer states); nats-server `server/store.go` (encodeConsumerState).
"""

from __future__ import annotations

import struct

import crc32c

from jsraft.codec.reader import BoundedReader
from jsraft.consumer.errors import MalformedConsumerSnapshot
from jsraft.consumer.machine import ConsumerEntry, ConsumerSet
from jsraft.consumer.state import ConsumerState
from jsraft.errors import InvariantViolation
from jsraft.jsapi.stream_config import Retention, StreamConfig
from jsraft.store.base import StreamStore

MAGIC = b"JSCS"
SNAPSHOT_VERSION = 1
CONSUMERS_MAX = 1 << 16  # far above any stream's max_consumers; bounds a decode of damaged bytes
RECORDS_MAX = 1 << 24

_HEAD = struct.Struct("<4sBQI")
_FIXED = struct.Struct("<QQQQQQQ")
_U32 = struct.Struct("<I")
_U8 = struct.Struct("<B")
_PENDING = struct.Struct("<QQq")
_REDELIVERED = struct.Struct("<QI")


def _encode_entry(entry: ConsumerEntry) -> bytes:
    state = entry.state
    name = entry.name.encode()
    parts = [
        _U8.pack(len(name)), name,
        _FIXED.pack(entry.created_ns, entry.paused_until_ns, entry.start_last_seq,
                    state.delivered_consumer_seq, state.delivered_stream_seq,
                    state.ack_floor_consumer_seq, state.ack_floor_stream_seq),
        _U32.pack(len(entry.raw_config)), entry.raw_config,
        _U32.pack(len(state.pending)),
        *(_PENDING.pack(sseq, cseq, ts) for sseq, (cseq, ts) in state.pending.items()),
        _U32.pack(len(state.redelivered)),
        *(_REDELIVERED.pack(sseq, count) for sseq, count in sorted(state.redelivered.items())),
    ]
    return b"".join(parts)


def _encode(applied_index: int, entries: list[ConsumerEntry]) -> bytes:
    body = b"".join([_HEAD.pack(MAGIC, SNAPSHOT_VERSION, applied_index, len(entries)),
                     *(_encode_entry(e) for e in entries)])
    return body + _U32.pack(crc32c.crc32c(body))


def encode_snapshot(consumers: ConsumerSet) -> bytes:
    return _encode(consumers.applied_index, list(consumers.consumers.values()))


def encode_consumer(entry: ConsumerEntry) -> bytes:
    """One consumer in the same format (applied index 0): what a stream backup carries of its state."""
    return _encode(0, [entry])


class _Reader(BoundedReader):
    __slots__ = ()

    def __init__(self, data: bytes) -> None:
        super().__init__(data, MalformedConsumerSnapshot, "consumer snapshot")

    def count(self) -> int:
        (value,) = self.take(_U32)
        if value > RECORDS_MAX:
            raise MalformedConsumerSnapshot(f"{value} records in a consumer snapshot")
        return value


def _decode_entry(reader: _Reader, stream: StreamConfig | None) -> ConsumerEntry:
    try:
        name = reader.blob(reader.take(_U8)[0]).decode()
    except UnicodeDecodeError:
        raise MalformedConsumerSnapshot("consumer name is not UTF-8") from None
    created, paused, start_last, d_cseq, d_sseq, f_cseq, f_sseq = reader.take(_FIXED)
    raw_config = reader.blob(reader.count())
    if not name or not raw_config:
        raise MalformedConsumerSnapshot("consumer without a name or a config")
    entry = ConsumerEntry(name, raw_config, created, stream)
    entry.paused_until_ns, entry.start_last_seq = paused, start_last
    state = ConsumerState()
    state.delivered_consumer_seq, state.delivered_stream_seq = d_cseq, d_sseq
    state.ack_floor_consumer_seq, state.ack_floor_stream_seq = f_cseq, f_sseq
    for _ in range(reader.count()):
        sseq, cseq, ts = reader.take(_PENDING)
        state.pending[sseq] = (cseq, ts)
    for _ in range(reader.count()):
        sseq, count = reader.take(_REDELIVERED)
        state.redelivered[sseq] = count
    try:
        state.check()
    except InvariantViolation as error:
        raise MalformedConsumerSnapshot(f"consumer {name!r} state is inconsistent: {error}") from None
    entry.state = state
    return entry


def _decode(data: bytes, stream: StreamConfig | None) -> tuple[int, dict[str, ConsumerEntry]]:
    """`(applied_index, {name: entry})` of a non-empty snapshot (invariant 2)."""
    if len(data) < _HEAD.size + _U32.size:
        raise MalformedConsumerSnapshot("consumer snapshot truncated")
    body, (crc,) = data[:-_U32.size], _U32.unpack_from(data, len(data) - _U32.size)
    if crc32c.crc32c(body) != crc:
        raise MalformedConsumerSnapshot("consumer snapshot checksum mismatch")
    reader = _Reader(body)
    magic, version, applied_index, count = reader.take(_HEAD)
    if magic != MAGIC or version != SNAPSHOT_VERSION:
        raise MalformedConsumerSnapshot(f"not a consumer snapshot this build reads ({magic!r} v{version})")
    if count > CONSUMERS_MAX:
        raise MalformedConsumerSnapshot(f"{count} consumers in a snapshot")
    entries: dict[str, ConsumerEntry] = {}
    for _ in range(count):
        entry = _decode_entry(reader, stream)
        if entry.name in entries:
            raise MalformedConsumerSnapshot(f"consumer {entry.name!r} twice in a snapshot")
        entries[entry.name] = entry
    if reader.remaining:
        raise MalformedConsumerSnapshot("trailing bytes in a consumer snapshot")
    return applied_index, entries


def restore_snapshot(data: bytes, store: StreamStore, retention: Retention = Retention.limits,
                     stream: StreamConfig | None = None) -> ConsumerSet:
    """The `ConsumerSet` a snapshot describes, over `store` (the stream's, already restored)."""
    consumers = ConsumerSet(store, retention, stream)
    if data:
        consumers.applied_index, consumers.consumers = _decode(data, stream)
    return consumers


def decode_consumer(data: bytes, stream: StreamConfig | None = None) -> ConsumerEntry:
    """The one consumer `encode_consumer` wrote (`MalformedConsumerSnapshot` for anything else)."""
    _, entries = _decode(data, stream)
    if len(entries) != 1:
        raise MalformedConsumerSnapshot(f"{len(entries)} consumers where one was expected")
    return next(iter(entries.values()))
