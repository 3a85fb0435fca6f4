"""`ConsumerReplica`: the consumers of one stream on this replica, fed in log order next to the stream's
state machine (layer L3½).

Owns: this replica's `ConsumerSet` (DESIGN §7: consumers are replicated through their stream's Raft
group), applying each CONSUMER entry to it, the retention removals that follow (interest / work-queue:
`StreamStateMachine.remove_for_retention` at the same index on every replica), the consumer hooks of the
stream's own entries (interest retention after MSGS, `on_purge` after a PURGE of every subject, the
stream config after CONFIG), and the consumers' part of a stream snapshot (its `extra`) and of a restore. The
`StreamAdapter` calls it for every entry it applies and every snapshot it takes or restores.

Invariants:
  1. Called for every applied entry, in index order, right after the stream machine applied it: the
     consumer set and the store change at the same index on every replica, so replicas fed the same log
     hold equal consumer sets and remove the same messages (consumer/machine.py invariant 1).
  2. A malformed CONSUMER entry raises `MalformedConsumerOps` out of the apply: the group stops there
     rather than skip an entry the other replicas applied (consumer/errors.py invariant 2).
  3. A snapshot's `extra` is the consumer set at the stream machine's `applied_index` (both only move
     together, in `StreamAdapter._apply_one`); a restore replaces the set with the snapshot's.
  4. `listener` (the stream leader's consumer service, when this node leads) is called synchronously
     after each entry that changed consumers or stored messages; it must not block or raise.
  5. The consumers' reaction to a PURGE comes from the entry's own content (`purge_floor`), never from
     the store's first seq: a store may be ahead of the entry (a restart's replay, a catch-up from a
     source further along), and replicas must still agree. Only a purge of every subject without `keep`
     determines the new head by itself; after the other purges and after EXPIRE the consumers keep their
     pending messages, and the consumer leader terminates those it finds gone when they come due
     (delivery.py rule 4), as nats-server's `checkPending` drops them lazily.
  6. Retention removes, after a CONSUMER entry, only messages at or below the stream's last seq as the log
     gives it at that index (`machine.last_seq`): a store that is ahead holds later messages, which a
     consumer deletion would otherwise let an interest stream remove before the consumer created after it
     (in the log) could claim them; those are judged when their own MSGS entry is replayed.

Imports: stdlib, L0, L1 (`subjects`), L3 (`stream`, `consumer`). Reference: consumer/__init__.py (the integration guide).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jsraft import subjects
from jsraft.consumer import ApplyResult as ConsumerApplied
from jsraft.consumer import ConsumerEntry, ConsumerSet, encode_snapshot, restore_snapshot
from jsraft.errors import DamagedSequence, JsraftError, NoMessageFound
from jsraft.jsapi.stream_config import Retention
from jsraft.stream import ApplyResult, EntryKind, Health, StreamStateMachine
from jsraft.stream.entries import PurgeEntry, decode_entry

log = logging.getLogger("jsraft.server.consumers")

# (index, what a CONSUMER entry changed — None for an entry that only stored messages)
Listener = Callable[[int, ConsumerApplied | None], None]


def _ignore(index: int, applied: ConsumerApplied | None) -> None:
    return None


class ConsumerReplica:
    def __init__(self, machine: StreamStateMachine) -> None:
        self.machine = machine
        self.consumers = ConsumerSet(machine.store, stream=machine.config)
        self.listener: Listener = _ignore
        self.removed = 0  # messages removed by retention on this replica (monitoring, tests)

    @property
    def entries(self) -> dict[str, ConsumerEntry]:
        """Every consumer of the stream, by name."""
        return self.consumers.consumers

    def on_applied(self, index: int, result: ApplyResult,
                   data: bytes | memoryview | None = None) -> ConsumerApplied | None:
        """Invariant 1; returns the consumer set's result for a CONSUMER entry (the proposal's outcome).
        `data` is the entry itself (needed for a PURGE: invariant 5)."""
        consumers, machine = self.consumers, self.machine
        consumers.store = machine.store  # a repair may have replaced the store
        kind = result.kind
        if kind is EntryKind.CONSUMER and result.consumer_body is not None:
            applied = consumers.apply(index, result.consumer_body)  # invariant 2: raises, never skips
            # Invariant 6: a message the log has not published by this index is not this entry's to remove.
            removable = [seq for seq in applied.removable if seq <= machine.last_seq]
            if removable:
                self.removed += machine.remove_for_retention(index, removable)
            self.listener(index, applied)
            return applied
        if kind is EntryKind.MSGS:
            if consumers.retention is Retention.interest and result.finding is None:
                self._interest_on_publish(index, result)
            self.listener(index, None)
        elif kind is EntryKind.PURGE and result.error is None and data is not None and consumers.consumers:
            floor = purge_floor(data)
            if floor:
                consumers.on_purge(floor)
        elif kind is EntryKind.CONFIG and result.error is None:
            consumers.set_stream_config(machine.config)
        return None

    def _interest_on_publish(self, index: int, result: ApplyResult) -> None:
        """Interest retention: messages no consumer needs are not kept (removable_on_publish)."""
        if self.machine.health is not Health.current:
            return
        refused = result.refused or {}
        stored: list[tuple[int, str]] = []
        for seq in range(result.first_seq, result.last_seq + 1):
            if seq in refused:
                continue
            try:
                stored.append((seq, self.machine.store.load(seq).subject))
            except NoMessageFound:  # removed by a limit at once, or by a replayed later entry
                continue
            except DamagedSequence:
                # Found damaged on read (the store lists the fault now, so this replica no longer vouches
                # for its store): keep it; the repair that follows brings the group's removals.
                continue
        removable = self.consumers.removable_on_publish(stored)
        if removable:
            self.removed += self.machine.remove_for_retention(index, removable)

    # --- Snapshots (invariant 3) ---------------------------------------------------------------------

    def snapshot_extra(self) -> bytes:
        return encode_snapshot(self.consumers)

    def restored(self) -> None:
        """The stream machine restored a snapshot: take the consumer set its `extra` carried."""
        machine = self.machine
        try:
            self.consumers = restore_snapshot(machine.snapshot_extra, machine.store, stream=machine.config)
        except JsraftError as error:
            # The stream snapshot's own CRC passed, so this is a writer bug: stop, never go on with a set
            # that differs from the other replicas'.
            log.error("stream %s: the consumers of the snapshot at %d do not restore: %s", machine.config.name,
                      machine.applied_index, error)
            raise
        self.listener(machine.applied_index, None)


def purge_floor(data: bytes | memoryview) -> int:
    """The stream's first seq after a PURGE entry, when its content alone decides it (invariant 5), else 0:
    a purge of every subject without `keep` removes every message below `seq`, or up to the `last_seq` the
    leader stamped on it."""
    entry = decode_entry(data)
    if not isinstance(entry, PurgeEntry) or entry.keep is not None:
        return 0
    if entry.subject is not None and subjects.validate(entry.subject, wildcards=True) != ">":
        return 0  # apply_ops.purge_bounded's test for "every subject"
    return entry.seq if entry.seq is not None else entry.last_seq + 1
