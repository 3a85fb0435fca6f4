"""Consumer ops: the body of a stream log entry of kind CONSUMER (layer L3).

Owns: the values the stream leader proposes for its consumers, their binary encoding and the one strict
decoder. Several ops, for several consumers, travel in one entry (the leader batches them).

Body (little-endian): `version u8 | op_count u16 | op*`; each op is `kind u8 | name_len u8 | name | ...`:

    CREATE     created_ns u64, config_len u32, config (the raw JSON bytes the client sent, non-empty)
    CREATE_AT  created_ns u64, start_seq u64, start_last_seq u64, config_len u32, config
               (a CREATE whose start the leader resolved: see below)
    DELETE     (nothing)
    DELIVERED  count u32, then count x (stream_seq u64, consumer_seq u64, delivery_count u32, ts_ns i64)
    ACK        count u32, then count x stream_seq u64
    TERM       count u32, then count x stream_seq u64
    SKIP       stream_seq u64   (the delivered cursor moves up to it: messages not to be delivered)
    PAUSE      until_ns u64     (0 resumes)
    STATE      delivered (consumer_seq u64, stream_seq u64), ack_floor (consumer_seq u64, stream_seq u64),
               pending_count u32, pending_count x (stream_seq u64, consumer_seq u64, ts_ns i64),
               redelivered_count u32, redelivered_count x (stream_seq u64, count u32)
               (the whole replicated state, replacing the consumer's: a restore from a backup)

Invariants:
  1. `decode_ops(encode_ops(x)) == x` for every valid value (Hypothesis round trip).
  2. `decode_ops` returns fully checked values or raises `MalformedConsumerOps`; no `struct.error`,
     `IndexError` or `UnicodeDecodeError` escapes, and trailing bytes are an error.
  3. Sequences are >= 1, delivery counts >= 1, names are 1..255 bytes of UTF-8; bounds below hold.
  4. Op kind numbers are durable: never reuse or renumber one.
  5. A STATE op holds a consistent state (`ConsumerState.check()`: pending in stream-seq order, within
     (ack_floor, delivered]; no stream seq twice; redelivery counts >= 1); the encoder refuses any other
     (ValueError) and the decoder too (`MalformedConsumerOps`), so applying one cannot fail.

A CREATE_AT carries the consumer's start as the stream leader resolved it when proposing
(`position.start_position` over the leader's store): `start_seq` is the delivered stream cursor the
consumer starts from, `start_last_seq` the stream's last seq at creation (for `last_per_subject`). Replicas
take both from the op and never read their store for it: a replica's store may be ahead of the entry (a
restart's replay, a catch-up from a source further along). The leader always proposes CREATE_AT; the
older CREATE (kind 1, start read from the store at apply) is still decoded for logs written before.
`CreateOp.start_seq is None` means a kind-1 CREATE.

A DELIVERED record is also how the leader replicates a NAK delay or a `+WPI` (same delivery count, new
timestamp) and a message that ran out of deliveries (delivery count `max_deliver + 1`), as nats-server's
`updateDelivered` does. The encoder is one `struct.pack` per record and one `bytes.join` per entry.

Imports: L0, stdlib, attrs, the `state` sibling. Reference: DESIGN.md §7; nats-server `server/jetstream_cluster.go`
(updateDeliveredOp, updateAcksOp), `server/store.go` (ConsumerState).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from itertools import starmap

import attrs

from jsraft.codec.reader import BoundedReader
from jsraft.consumer.errors import MalformedConsumerOps
from jsraft.consumer.state import ConsumerState
from jsraft.errors import InvariantViolation, invariant

OPS_VERSION = 1
OPS_PER_ENTRY_MAX = 4096  # bounds the work of applying one entry
RECORDS_PER_OP_MAX = 1 << 16  # a DELIVERED/ACK/TERM batch; the leader splits larger ones
CONFIG_BYTES_MAX = 1 << 20  # a consumer config is a small JSON object; 1 MiB is far above any real one
NAME_BYTES_MAX = 255
_U64_MAX = (1 << 64) - 1

_HEAD = struct.Struct("<BH")
_OP = struct.Struct("<BB")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_CREATE = struct.Struct("<QI")
_CREATE_AT = struct.Struct("<QQQI")
_DELIVERED = struct.Struct("<QQIq")
_POSITION = struct.Struct("<QQQQ")
_PENDING = struct.Struct("<QQq")
_REDELIVERED = struct.Struct("<QI")


class OpKind(enum.IntEnum):
    CREATE = 1
    DELETE = 2
    DELIVERED = 3
    ACK = 4
    TERM = 5
    SKIP = 6
    PAUSE = 7
    CREATE_AT = 8
    STATE = 9


# One delivery: (stream_seq, consumer_seq, delivery_count, ts_ns). A tuple: one per delivered message.
Delivered = tuple[int, int, int, int]


@attrs.frozen(kw_only=True)
class CreateOp:
    name: str
    config: bytes
    created_ns: int
    start_seq: int | None = None  # None: a kind-1 CREATE (start read from the store at apply)
    start_last_seq: int = 0

    @property
    def kind(self) -> OpKind:
        return OpKind.CREATE if self.start_seq is None else OpKind.CREATE_AT


@attrs.frozen(kw_only=True)
class DeleteOp:
    kind = OpKind.DELETE
    name: str


@attrs.frozen(kw_only=True)
class DeliveredOp:
    kind = OpKind.DELIVERED
    name: str
    records: tuple[Delivered, ...]


@attrs.frozen(kw_only=True)
class AckOp:
    kind = OpKind.ACK
    name: str
    seqs: tuple[int, ...]


@attrs.frozen(kw_only=True)
class TermOp:
    kind = OpKind.TERM
    name: str
    seqs: tuple[int, ...]


@attrs.frozen(kw_only=True)
class SkipOp:
    kind = OpKind.SKIP
    name: str
    stream_seq: int


@attrs.frozen(kw_only=True)
class PauseOp:
    kind = OpKind.PAUSE
    name: str
    until_ns: int


@attrs.frozen(kw_only=True)
class StateOp:
    """Set the consumer's whole replicated state (a restore: nats-server carries it in its snapshot)."""

    kind = OpKind.STATE
    name: str
    delivered: tuple[int, int]  # (consumer_seq, stream_seq)
    ack_floor: tuple[int, int]
    pending: tuple[tuple[int, int, int], ...]  # (stream_seq, consumer_seq, ts_ns), in stream-seq order
    redelivered: tuple[tuple[int, int], ...]  # (stream_seq, count), in stream-seq order

    def state(self) -> ConsumerState:
        """The state this op sets, checked (invariant 5: `InvariantViolation` when inconsistent)."""
        state = ConsumerState()
        state.delivered_consumer_seq, state.delivered_stream_seq = self.delivered
        state.ack_floor_consumer_seq, state.ack_floor_stream_seq = self.ack_floor
        state.pending = {sseq: (cseq, ts) for sseq, cseq, ts in self.pending}
        state.redelivered = dict(self.redelivered)
        invariant(len(state.pending) == len(self.pending) and len(state.redelivered) == len(self.redelivered),
                  "a stream seq twice in a consumer state")
        invariant(all(count > 0 for _, count in self.redelivered), "a redelivery count of 0")
        state.check()
        return state

    @classmethod
    def of(cls, name: str, state: ConsumerState) -> "StateOp":
        return cls(name=name, delivered=(state.delivered_consumer_seq, state.delivered_stream_seq),
                   ack_floor=(state.ack_floor_consumer_seq, state.ack_floor_stream_seq),
                   pending=tuple((sseq, cseq, ts) for sseq, (cseq, ts) in state.pending.items()),
                   redelivered=tuple(sorted(state.redelivered.items())))


Op = CreateOp | DeleteOp | DeliveredOp | AckOp | TermOp | SkipOp | PauseOp | StateOp


def _name(name: str) -> bytes:
    raw = name.encode()
    if not 1 <= len(raw) <= NAME_BYTES_MAX:
        raise ValueError(f"consumer name must be 1..{NAME_BYTES_MAX} bytes")
    return raw


def _seqs(seqs: Sequence[int]) -> bytes:
    if len(seqs) > RECORDS_PER_OP_MAX:
        raise ValueError(f"more than {RECORDS_PER_OP_MAX} sequences in one op")
    return _U32.pack(len(seqs)) + struct.pack(f"<{len(seqs)}Q", *seqs)


def _encode_one(op: Op) -> bytes:
    head = _OP.pack(op.kind, len(_name(op.name))) + _name(op.name)
    if isinstance(op, CreateOp):
        if not 0 < len(op.config) <= CONFIG_BYTES_MAX:
            raise ValueError("a CREATE op needs its config bytes")
        if op.start_seq is None:
            if op.start_last_seq:
                raise ValueError("a CREATE without its start carries no start_last_seq")
            return head + _CREATE.pack(op.created_ns, len(op.config)) + bytes(op.config)
        fixed = _CREATE_AT.pack(op.created_ns, op.start_seq, op.start_last_seq, len(op.config))
        return head + fixed + bytes(op.config)
    if isinstance(op, DeleteOp):
        return head
    if isinstance(op, DeliveredOp):
        if len(op.records) > RECORDS_PER_OP_MAX:
            raise ValueError(f"more than {RECORDS_PER_OP_MAX} records in one op")
        return b"".join([head, _U32.pack(len(op.records)), *starmap(_DELIVERED.pack, op.records)])
    if isinstance(op, (AckOp, TermOp)):
        return head + _seqs(op.seqs)
    if isinstance(op, SkipOp):
        return head + _U64.pack(op.stream_seq)
    if isinstance(op, StateOp):
        return head + _encode_state(op)
    return head + _U64.pack(op.until_ns)


def _encode_state(op: StateOp) -> bytes:
    if len(op.pending) > RECORDS_PER_OP_MAX or len(op.redelivered) > RECORDS_PER_OP_MAX:
        raise ValueError(f"more than {RECORDS_PER_OP_MAX} pending or redelivered messages in a STATE op")
    try:
        op.state()
    except InvariantViolation as error:
        raise ValueError(f"an inconsistent consumer state: {error}") from None
    return b"".join([_POSITION.pack(*op.delivered, *op.ack_floor), _U32.pack(len(op.pending)),
                     *(_PENDING.pack(*p) for p in op.pending), _U32.pack(len(op.redelivered)),
                     *(_REDELIVERED.pack(*r) for r in op.redelivered)])


def encode_ops(ops: Sequence[Op]) -> bytes:
    """The CONSUMER entry body for `ops` (applied in this order). ValueError on a value out of bounds."""
    if not 1 <= len(ops) <= OPS_PER_ENTRY_MAX:
        raise ValueError(f"a CONSUMER entry carries 1..{OPS_PER_ENTRY_MAX} ops")
    try:
        return b"".join([_HEAD.pack(OPS_VERSION, len(ops)), *(_encode_one(op) for op in ops)])
    except struct.error as error:
        raise ValueError(f"consumer op out of range: {error}") from None


class _Reader(BoundedReader):
    __slots__ = ()

    def __init__(self, data: bytes) -> None:
        super().__init__(data, MalformedConsumerOps, "consumer ops")


def _read_seqs(reader: _Reader) -> tuple[int, ...]:
    (count,) = reader.take(_U32)
    if count > RECORDS_PER_OP_MAX:
        raise MalformedConsumerOps(f"{count} sequences in one consumer op")
    seqs = struct.unpack(f"<{count}Q", reader.blob(count * _U64.size))  # one bounds check, one unpack
    if 0 in seqs:
        raise MalformedConsumerOps("stream sequence 0 in a consumer op")
    return seqs


def _read_delivered(reader: _Reader) -> tuple[Delivered, ...]:
    (count,) = reader.take(_U32)
    if count > RECORDS_PER_OP_MAX:
        raise MalformedConsumerOps(f"{count} records in one DELIVERED op")
    records = tuple(_DELIVERED.iter_unpack(reader.blob(count * _DELIVERED.size)))  # one bounds check
    for record in records:
        if record[0] == 0 or record[1] == 0 or record[2] == 0:
            raise MalformedConsumerOps("DELIVERED record with a zero sequence or delivery count")
    return records


def _read_state(reader: _Reader, name: str) -> StateOp:
    d_cseq, d_sseq, f_cseq, f_sseq = reader.take(_POSITION)
    records: list[tuple] = []
    for record in (_PENDING, _REDELIVERED):
        (count,) = reader.take(_U32)
        if count > RECORDS_PER_OP_MAX:
            raise MalformedConsumerOps(f"{count} records in a STATE op")
        records.append(tuple(reader.take(record) for _ in range(count)))
    op = StateOp(name=name, delivered=(d_cseq, d_sseq), ack_floor=(f_cseq, f_sseq), pending=records[0],
                 redelivered=records[1])
    try:
        op.state()  # invariant 5
    except InvariantViolation as error:
        raise MalformedConsumerOps(f"STATE op of {name!r} is inconsistent: {error}") from None
    return op


def _decode_one(reader: _Reader) -> Op:
    kind, name_len = reader.take(_OP)
    try:
        name = reader.blob(name_len).decode()
    except UnicodeDecodeError:
        raise MalformedConsumerOps("consumer name is not UTF-8") from None
    if not name:
        raise MalformedConsumerOps("empty consumer name in an op")
    if kind == OpKind.CREATE:
        created_ns, config_len = reader.take(_CREATE)
        if not 0 < config_len <= CONFIG_BYTES_MAX:
            raise MalformedConsumerOps(f"CREATE config of {config_len} bytes")
        return CreateOp(name=name, config=reader.blob(config_len), created_ns=created_ns)
    if kind == OpKind.CREATE_AT:
        created_ns, start_seq, start_last_seq, config_len = reader.take(_CREATE_AT)
        if not 0 < config_len <= CONFIG_BYTES_MAX:
            raise MalformedConsumerOps(f"CREATE config of {config_len} bytes")
        return CreateOp(name=name, config=reader.blob(config_len), created_ns=created_ns, start_seq=start_seq,
                        start_last_seq=start_last_seq)
    if kind == OpKind.DELETE:
        return DeleteOp(name=name)
    if kind == OpKind.DELIVERED:
        return DeliveredOp(name=name, records=_read_delivered(reader))
    if kind == OpKind.ACK:
        return AckOp(name=name, seqs=_read_seqs(reader))
    if kind == OpKind.TERM:
        return TermOp(name=name, seqs=_read_seqs(reader))
    if kind == OpKind.SKIP:
        return SkipOp(name=name, stream_seq=reader.take(_U64)[0])
    if kind == OpKind.PAUSE:
        return PauseOp(name=name, until_ns=reader.take(_U64)[0])
    if kind == OpKind.STATE:
        return _read_state(reader, name)
    raise MalformedConsumerOps(f"unknown consumer op kind {kind}")


def decode_ops(body: bytes) -> list[Op]:
    """The ops of a CONSUMER entry body, in order; `MalformedConsumerOps` for anything else."""
    reader = _Reader(body)
    version, count = reader.take(_HEAD)
    if version != OPS_VERSION:
        raise MalformedConsumerOps(f"unknown consumer ops version {version}")
    if not 1 <= count <= OPS_PER_ENTRY_MAX:
        raise MalformedConsumerOps(f"{count} ops in one CONSUMER entry")
    ops = [_decode_one(reader) for _ in range(count)]
    if reader.remaining:
        raise MalformedConsumerOps(f"{reader.remaining} trailing bytes after consumer ops")
    return ops
