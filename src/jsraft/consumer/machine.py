"""`ConsumerSet`: every consumer of one stream, fed the CONSUMER entries of the stream's log (layer L3).

Owns: the set of consumers (created and deleted by ops in the stream log, so that they are ordered with
the stream's messages), each one's config (raw JSON as received, and decoded) and replicated
`ConsumerState`, and the retention decision after each entry. `apply(index, body)` returns an
`ApplyResult` saying what changed and which stream seqs the caller must now delete from the store.

Invariants:
  1. Two `ConsumerSet`s over equal stores fed the same entries are equal (`key()`); nothing here reads a
     clock or depends on dict iteration order of anything not replicated.
  2. Entry indexes only grow: an entry at or below `applied_index` is ignored (a replay).
  3. A CREATE whose config this build cannot decode makes the consumer *offline* (raw config kept; its
     other ops ignored; it needs every message for retention); a CREATE that breaks the work-queue rules
     (`check_create`) is refused at apply, identically on every replica, and reported in `refused`.
  4. A malformed entry raises `MalformedConsumerOps` and changes nothing.
  5. Nothing applied reads a position from the store: a CREATE's start comes in the op (`create_op`
     resolves it on the leader), a purge's floor from the PURGE entry. The store is read only for
     retention (which messages are live, their subjects) and for a kind-1 CREATE of an older build.

Imports: L0, L1 (`jsapi`, `subjects`), L2 (`store`). Reference: DESIGN.md §7; nats-server
`server/jetstream_cluster.go` (applyConsumerEntries), `server/stream.go` (partitionUnique).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from jsraft import subjects as subjectlib
from jsraft.consumer import retention as retention_rules
from jsraft.consumer.ops import (
    AckOp, CreateOp, DeleteOp, DeliveredOp, Op, PauseOp, SkipOp, StateOp, TermOp, decode_ops,
)
from jsraft.consumer.position import start_position
from jsraft.consumer.state import ConsumerState, Range
from jsraft.errors import JsraftError
from jsraft.jsapi.consumer_config import ConsumerConfig, ConsumerConfigError, parse_consumer_config
from jsraft.jsapi.stream_config import Retention, StreamConfig
from jsraft.store.base import StreamStore


class ConsumerEntry:
    """One consumer: its config, its replicated state, and what the set needs to route ops to it."""

    __slots__ = ("name", "raw_config", "config", "offline_reason", "created_ns", "paused_until_ns",
                 "start_last_seq", "state", "_filters")

    def __init__(self, name: str, raw_config: bytes, created_ns: int, stream: StreamConfig | None = None) -> None:
        self.name = name
        self.raw_config = raw_config
        self.created_ns = created_ns
        self.paused_until_ns = 0
        self.start_last_seq = 0
        self.state = ConsumerState()
        self.config: ConsumerConfig | None = None
        self.offline_reason = ""
        self._filters: subjectlib.FilterSet | None = None
        self.set_config(raw_config, stream)

    def set_config(self, raw_config: bytes, stream: StreamConfig | None = None) -> None:
        """Decode `raw_config` strictly; failure makes the consumer offline (DESIGN §9), not an error.

        `stream` supplies the defaults that come from the stream (`consumer_limits`); the rules that
        compare the config with the stream were the leader's to check before proposing, and are not
        re-checked here (nats-server does not re-check them when recovering either).
        """
        self.raw_config = raw_config
        try:
            self.config = parse_consumer_config(raw_config, defaults_from=stream)[0]
        except JsraftError as error:
            # nats-server's words for a stored config it cannot decode (PR #7158).
            self.config, self._filters = None, None
            self.offline_reason = f"unsupported - config error: {error.description}"
            return
        self.offline_reason = ""
        self._filters = subjectlib.FilterSet(self.config.filters) if self.config.filters else None

    @property
    def offline(self) -> bool:
        return self.config is None

    def matches(self, subject: str) -> bool:
        return self.offline or self._filters is None or self._filters.matches(subject)

    def needs(self, seq: int, subject: str) -> bool:
        return self.offline or (self.matches(subject) and self.state.needs(seq))

    def key(self) -> tuple:
        return (self.name, self.raw_config, self.created_ns, self.paused_until_ns, self.start_last_seq,
                self.state.key())


@attrs.frozen(kw_only=True)
class ApplyResult:
    """What one CONSUMER entry changed. `removable`: stream seqs the caller deletes at this index."""

    index: int
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    refused: tuple[tuple[str, JsraftError], ...] = ()
    acked: tuple[tuple[str, tuple[int, ...]], ...] = ()
    removable: tuple[int, ...] = ()


class _Changes:
    """Accumulates an entry's effects while its ops apply (one per entry, not per message)."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.updated: list[str] = []
        self.deleted: list[str] = []
        self.refused: list[tuple[str, JsraftError]] = []
        self.acked: list[tuple[str, tuple[int, ...]]] = []
        self.released: list[Range] = []


class ConsumerSet:
    """All consumers of one stream. Not thread-safe; owned by the stream group's apply loop."""

    def __init__(self, store: StreamStore, retention: Retention = Retention.limits,
                 stream: StreamConfig | None = None) -> None:
        self.store = store
        self.retention = stream.retention if stream is not None else retention
        self.stream = stream
        self.consumers: dict[str, ConsumerEntry] = {}
        self.applied_index = 0

    def key(self) -> tuple:
        return (self.applied_index, str(self.retention), tuple(e.key() for e in self.consumers.values()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConsumerSet) and self.key() == other.key()

    def set_retention(self, retention: Retention) -> None:
        """The stream's retention changed (a CONFIG entry applied at the same index)."""
        self.retention = retention

    def set_stream_config(self, stream: StreamConfig) -> None:
        """The stream's config changed (a CONFIG entry applied at the same index)."""
        self.stream, self.retention = stream, stream.retention

    # --- leader-side checks --------------------------------------------------------------------

    def check_create(self, name: str, config: ConsumerConfig) -> None:
        """Work-queue rules against the other consumers (nats-server: 10099, 10100); raise to refuse."""
        if self.retention is not Retention.workqueue or config.direct:
            return
        others = [e for n, e in self.consumers.items() if n != name]
        if not others:
            return
        if not config.filters:
            raise ConsumerConfigError("wq_multiple_unfiltered")
        for other in others:
            if other.offline or not other.config.filters:
                raise ConsumerConfigError("wq_not_unique")
            if any(subjectlib.overlaps(mine, theirs) for mine in config.filters for theirs in other.config.filters):
                raise ConsumerConfigError("wq_not_unique")

    def create_op(self, name: str, config: ConsumerConfig, raw: bytes, created_ns: int) -> CreateOp:
        """The CREATE op the leader proposes: its start resolved now over the leader's store (ops.py)."""
        start_seq, start_last_seq = start_position(config, self.store)
        return CreateOp(name=name, config=raw, created_ns=created_ns, start_seq=start_seq,
                        start_last_seq=start_last_seq)

    # --- apply ---------------------------------------------------------------------------------

    def apply(self, index: int, body: bytes) -> ApplyResult:
        """Decode and apply one CONSUMER entry body committed at `index`."""
        return self.apply_ops(index, decode_ops(body))

    def apply_ops(self, index: int, ops: Iterable[Op]) -> ApplyResult:
        if index <= self.applied_index:
            return ApplyResult(index=index)
        changes = _Changes()
        for op in ops:
            _APPLY[type(op)](self, op, changes)
        self.applied_index = index
        consumers = list(self.consumers.values())
        removable = retention_rules.removable(self.retention, self.store, consumers, changes.released)
        return ApplyResult(index=index, created=tuple(changes.created), updated=tuple(changes.updated),
                           deleted=tuple(changes.deleted), refused=tuple(changes.refused),
                           acked=tuple(changes.acked), removable=tuple(removable))

    def _create(self, op: CreateOp, changes: _Changes) -> None:
        existing = self.consumers.get(op.name)
        if existing is not None:
            if existing.raw_config != op.config:
                existing.set_config(op.config, self.stream)
                if existing.config is not None:
                    existing.paused_until_ns = existing.config.pause_until_ns
                changes.updated.append(op.name)
            return
        entry = ConsumerEntry(op.name, op.config, op.created_ns, self.stream)
        if entry.config is not None:
            try:
                self.check_create(op.name, entry.config)
            except ConsumerConfigError as error:
                changes.refused.append((op.name, error))
                return
            if op.start_seq is not None:  # resolved by the leader (ops.py CREATE_AT): never read the store
                delivered, entry.start_last_seq = op.start_seq, op.start_last_seq
            else:  # a kind-1 CREATE of an older build
                delivered, entry.start_last_seq = start_position(entry.config, self.store)
            entry.state = ConsumerState(delivered)
            entry.paused_until_ns = entry.config.pause_until_ns
        self.consumers[op.name] = entry
        changes.created.append(op.name)

    def _delete(self, op: DeleteOp, changes: _Changes) -> None:
        if self.consumers.pop(op.name, None) is None:
            return
        changes.deleted.append(op.name)
        if self.retention is Retention.interest:
            state = self.store.state()
            changes.released.append((state.first_seq, state.last_seq))

    def _online(self, name: str) -> ConsumerEntry | None:
        entry = self.consumers.get(name)
        return entry if entry is not None and entry.config is not None else None

    def _delivered(self, op: DeliveredOp, changes: _Changes) -> None:
        entry = self._online(op.name)
        if entry is not None:
            config = entry.config
            changes.released.extend(entry.state.apply_delivered(op.records, config.ack_policy, config.max_deliver))

    def _ack(self, op: AckOp, changes: _Changes) -> None:
        entry = self._online(op.name)
        if entry is not None:
            changes.released.extend(entry.state.apply_ack(op.seqs, entry.config.ack_policy))
            changes.acked.append((op.name, op.seqs))

    def _term(self, op: TermOp, changes: _Changes) -> None:
        entry = self._online(op.name)
        if entry is not None:
            changes.released.extend(entry.state.apply_term(op.seqs))
            changes.acked.append((op.name, op.seqs))

    def _skip(self, op: SkipOp, changes: _Changes) -> None:
        entry = self._online(op.name)
        if entry is not None:
            changes.released.extend(entry.state.apply_skip(op.stream_seq))

    def _set_state(self, op: StateOp, changes: _Changes) -> None:
        """A restore: the consumer's state becomes the op's (checked when decoded: ops invariant 5)."""
        entry = self._online(op.name)
        if entry is None:
            return
        old, new = entry.state, op.state()
        entry.state = new
        # What the old state needed and the new one does not lies in (old floor, new delivered]; retention
        # re-checks every consumer's needs over it.
        if new.delivered_stream_seq > old.ack_floor_stream_seq:
            changes.released.append((old.ack_floor_stream_seq + 1, new.delivered_stream_seq))

    def _pause(self, op: PauseOp, changes: _Changes) -> None:
        entry = self._online(op.name)
        if entry is not None:
            entry.paused_until_ns = op.until_ns

    # --- hooks for the stream's own entries (called by the runtime at the same index) ---------

    def removable_on_publish(self, msgs: Iterable[tuple[int, str]]) -> list[int]:
        """Of messages just stored by a MSGS entry, those an interest stream does not keep."""
        return retention_rules.removable_on_publish(self.retention, list(self.consumers.values()), msgs)

    def on_purge(self, first_seq: int) -> None:
        """The stream removed every message below `first_seq` (a purge of every subject, to `first_seq`):
        consumers forget below it. The caller takes `first_seq` from the entry, never from its store."""
        for entry in self.consumers.values():
            entry.state.apply_purge(first_seq)


_APPLY = {
    CreateOp: ConsumerSet._create,
    DeleteOp: ConsumerSet._delete,
    DeliveredOp: ConsumerSet._delivered,
    AckOp: ConsumerSet._ack,
    TermOp: ConsumerSet._term,
    SkipOp: ConsumerSet._skip,
    PauseOp: ConsumerSet._pause,
    StateOp: ConsumerSet._set_state,
}
