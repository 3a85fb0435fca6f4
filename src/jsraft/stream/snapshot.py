"""Stream snapshots: the group's state at an applied index, without the messages (layer L3).

Owns: `GroupState` (what a replica must hold at an index: the state tuple, the deleted ranges and the
per-range digests), `StreamSnapshot` (that plus the dedupe window, the raw config and the small
positions the machine keeps), their binary encoding, and `group_state_of(store)`.

Format (little-endian)::

    magic "JSSN" | version u8
    applied_index, first_seq, last_seq, msgs, bytes, digest, num_deleted, last_timestamp_ns,
        last_audit_id                                             9 x u64
    config_len u32, config | last_msg_id_len u16, last_msg_id | extra_len u32, extra
    deleted count u32, (first u64, last u64) x count
    digest ranges count u32, (range number u64, digest u64) x count
    dedupe count u32, (id_len u16, seq u64, timestamp_ns u64, id) x count
    crc32c u32 over everything before it

Invariants:
  1. `decode_snapshot(encode_snapshot(s)) == s`; anything else that fails to decode (bad magic, version,
     CRC, lengths, trailing bytes) raises `MalformedSnapshot`, never a struct error.
  2. `GroupState` is self-consistent: `deleted` ranges lie in `[first_seq, last_seq]`, sorted, disjoint,
     and `msgs + num_deleted == last_seq - first_seq + 1` when `msgs > 0` (StreamStore invariant 3).
  3. `extra` is opaque here: the runtime attaches the consumers' states (owned by `consumer`).

Imports: L0, L2 (`store` values), crc32c, attrs. Reference: DESIGN.md §6 ("Stream snapshots").
"""

from __future__ import annotations

import bisect
import struct

import attrs
from crc32c import crc32c

from jsraft.errors import NoMessageFound
from jsraft.store.base import StoreState, StreamStore
from jsraft.stream.errors import MalformedSnapshot

_MAGIC = b"JSSN"
SNAPSHOT_VERSION = 1
_HEAD = struct.Struct("<4sB10Q")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_PAIR = struct.Struct("<QQ")
_DEDUPE = struct.Struct("<HQQ")



Ranges = tuple[tuple[int, int], ...]


@attrs.frozen(kw_only=True)
class GroupState:
    """What every replica holds at one applied index (the target of drift repair)."""

    first_seq: int
    last_seq: int
    msgs: int
    bytes: int
    digest: int
    num_deleted: int = 0
    deleted: Ranges = ()
    digest_ranges: Ranges = ()

    def agreement_key(self) -> tuple[int, int, int, int, int]:
        return (self.first_seq, self.last_seq, self.msgs, self.bytes, self.digest)

    def is_live(self, seq: int) -> bool:
        """True when `seq` holds a message in the group state."""
        if self.msgs == 0 or not self.first_seq <= seq <= self.last_seq:
            return False
        position = bisect.bisect_right(self.deleted, (seq, 1 << 64)) - 1
        return position < 0 or self.deleted[position][1] < seq

    def range_digests(self) -> dict[int, int]:
        return dict(self.digest_ranges)

    def check(self) -> "GroupState":
        previous = self.first_seq - 1
        for first, last in self.deleted:
            if not previous < first <= last <= self.last_seq:
                raise MalformedSnapshot(f"deleted range {first}..{last} is out of order or bounds")
            previous = last
        span = self.last_seq - self.first_seq + 1
        if self.msgs and self.msgs + self.num_deleted != span:
            raise MalformedSnapshot("msgs + num_deleted does not cover [first_seq, last_seq]")
        if sum(last - first + 1 for first, last in self.deleted) != (self.num_deleted if self.msgs else 0):
            raise MalformedSnapshot("deleted ranges do not add up to num_deleted")
        return self


@attrs.frozen(kw_only=True)
class StreamSnapshot:
    applied_index: int
    group: GroupState
    raw_config: bytes
    last_msg_id: str = ""
    last_timestamp_ns: int = 0
    last_audit_id: int = 0
    dedupe: tuple[tuple[str, int, int], ...] = ()
    extra: bytes = b""
    config_meta_index: int = 0


def group_state_of(store: StreamStore, state: StoreState | None = None) -> GroupState:
    """The store's `GroupState`. Interior deletes (only when `num_deleted > 0`) come from the store's
    `deleted_ranges` when it has one (FileStore: its block summaries, no record read), else by walking the
    live messages with `load_next`."""
    state = state if state is not None else store.state()
    deleted: list[tuple[int, int]] = []
    ranges = getattr(store, "deleted_ranges", None)
    if state.msgs and state.num_deleted and ranges is not None:
        deleted = ranges(state.first_seq, state.last_seq)
    elif state.msgs and state.num_deleted:
        expected = state.first_seq
        while expected <= state.last_seq:
            try:
                seq = store.load_next(None, expected).seq
            except NoMessageFound:
                seq = state.last_seq + 1
            if seq > expected:
                deleted.append((expected, seq - 1))
            expected = seq + 1
    return GroupState(
        first_seq=state.first_seq, last_seq=state.last_seq, msgs=state.msgs, bytes=state.bytes,
        digest=state.digest, num_deleted=state.num_deleted, deleted=tuple(deleted),
        digest_ranges=tuple(sorted(store.digest_ranges().items())),
    )


def encode_snapshot(snapshot: StreamSnapshot) -> bytes:
    group = snapshot.group
    msg_id = snapshot.last_msg_id.encode()
    parts = [
        _HEAD.pack(_MAGIC, SNAPSHOT_VERSION, snapshot.applied_index, group.first_seq, group.last_seq,
                   group.msgs, group.bytes, group.digest, group.num_deleted, snapshot.last_timestamp_ns,
                   snapshot.last_audit_id, snapshot.config_meta_index),
        _U32.pack(len(snapshot.raw_config)), snapshot.raw_config,
        _U16.pack(len(msg_id)), msg_id,
        _U32.pack(len(snapshot.extra)), snapshot.extra,
        _U32.pack(len(group.deleted)), *(_PAIR.pack(a, b) for a, b in group.deleted),
        _U32.pack(len(group.digest_ranges)), *(_PAIR.pack(a, b) for a, b in group.digest_ranges),
        _U32.pack(len(snapshot.dedupe)),
    ]
    for dedupe_id, seq, ts in snapshot.dedupe:
        encoded = dedupe_id.encode()
        parts += [_DEDUPE.pack(len(encoded), seq, ts), encoded]
    data = b"".join(parts)
    return data + _U32.pack(crc32c(data))


class _Reader:
    """Bounds-checked reads over a buffer: a short buffer is `MalformedSnapshot`, not `struct.error`."""

    def __init__(self, data: memoryview) -> None:
        self.data, self.position = data, 0

    def take(self, layout: struct.Struct) -> tuple:
        if self.position + layout.size > len(self.data):
            raise MalformedSnapshot("stream snapshot ends early")
        values = layout.unpack_from(self.data, self.position)
        self.position += layout.size
        return values

    def blob(self, length: int) -> bytes:
        if self.position + length > len(self.data):
            raise MalformedSnapshot("stream snapshot ends early")
        value = bytes(self.data[self.position : self.position + length])
        self.position += length
        return value

    def pairs(self) -> Ranges:
        (count,) = self.take(_U32)
        if count * _PAIR.size > len(self.data) - self.position:
            raise MalformedSnapshot("stream snapshot range count exceeds its length")
        return tuple(self.take(_PAIR) for _ in range(count))


def decode_snapshot(data: bytes) -> StreamSnapshot:
    if len(data) < _HEAD.size + 4 or crc32c(data[:-4]) != _U32.unpack_from(data, len(data) - 4)[0]:
        raise MalformedSnapshot("stream snapshot is short or fails its CRC")
    reader = _Reader(memoryview(data)[:-4])
    magic, version, applied, first, last, msgs, size, digest, num_deleted, last_ts, audit_id, config_index = (
        reader.take(_HEAD))
    if magic != _MAGIC or version != SNAPSHOT_VERSION:
        raise MalformedSnapshot(f"not a version {SNAPSHOT_VERSION} stream snapshot")
    raw_config = reader.blob(reader.take(_U32)[0])
    try:
        last_msg_id = reader.blob(reader.take(_U16)[0]).decode()
        extra = reader.blob(reader.take(_U32)[0])
        deleted, ranges = reader.pairs(), reader.pairs()
        dedupe = []
        for _ in range(reader.take(_U32)[0]):
            id_len, seq, ts = reader.take(_DEDUPE)
            dedupe.append((reader.blob(id_len).decode(), seq, ts))
    except UnicodeDecodeError:
        raise MalformedSnapshot("stream snapshot holds an id that is not UTF-8") from None
    if reader.position != len(reader.data):
        raise MalformedSnapshot("stream snapshot has trailing bytes")
    group = GroupState(first_seq=first, last_seq=last, msgs=msgs, bytes=size, digest=digest,
                       num_deleted=num_deleted, deleted=deleted, digest_ranges=ranges).check()
    return StreamSnapshot(applied_index=applied, group=group, raw_config=raw_config, last_msg_id=last_msg_id,
                          last_timestamp_ns=last_ts, last_audit_id=audit_id, dedupe=tuple(dedupe), extra=extra,
                          config_meta_index=config_index)
