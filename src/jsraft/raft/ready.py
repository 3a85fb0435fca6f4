"""`Ready`: everything the core wants done next, and the contract for doing it (layer L1).

Owns: `Ready`, `Snapshot`, `ReadState`, and the two functions that move work between a `RaftNode` and
its driver: `build_ready()` (collect pending work) and `apply_advance()` (record that it was done).

Invariants:
  1. At most one `Ready` is outstanding: `ready()` must be followed by `advance()` before the next one.
  2. A message in `Ready.messages` depends at most on the state persisted by the same `Ready` (or earlier
     ones): term and vote changes, entries, the acked watermark. Hence the ordering contract on `Ready`.
  3. `committed_entries` never include a faulty entry, nor one above `commit_index`, nor (while repairing)
     one not yet verified against a leader (`repair.trusted_index`).
  4. `send_first` only for a leader whose term, vote and repairing flag in this `Ready` are the ones already
     persisted: its messages (AppendEntries, heartbeats, snapshots, TimeoutNow, refusals) then depend on
     nothing the `Ready` persists, and may leave while its fsync runs (etcd's pipelining). The leader's
     own copy of `entries` counts toward commit only in `advance()`, after that fsync, and only if it
     still leads `leader_term` (`RaftNode.advance`).

Imports: L0, attrs. Reference: etcd-io/raft `node.go` (`Ready`, `Advance`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from jsraft.errors import invariant
from jsraft.raft import repair
from jsraft.raft.messages import Message
from jsraft.raft.status import Role
from jsraft.raft.types import Entry, HardState, SnapshotMeta

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode


@attrs.frozen(kw_only=True)
class Snapshot:
    """An application snapshot: what it covers (`meta`) and the application's opaque bytes."""

    meta: SnapshotMeta
    data: bytes


@attrs.frozen(kw_only=True)
class ReadState:
    """A read barrier passed: reads of state applied through `index` are linearizable for `ctx`."""

    index: int
    ctx: bytes


@attrs.frozen(kw_only=True)
class Ready:
    """What the driver must do, in this order, then call `RaftNode.advance(ready)`.

    1. Persist. If `snapshot` is set, save it and discard every log entry at or below its index. If
       `truncate_from` is set, discard every log entry at or above it. Append `entries` (when both are set,
       `entries[0].index == truncate_from`). Rewrite `repaired_entries` in place: each replaces a record
       found corrupt at the same index, and nothing else is removed. Save `hard_state` if set.
       If `must_sync`, fsync all of it before step 2.
    2. Only then send `messages`. They may grant a vote, acknowledge entries or report the acked
       watermark; sent before step 1 is durable, a crash could make them lies (rules 1 and 2). Messages to
       this node itself are never emitted. Exception: if `send_first`, send them before step 1 (a
       leader's messages, invariant 4).
    3. Install `snapshot` in the application, then apply `committed_entries` in order, and answer
       `read_states` once the application has applied through each one's index.
    """

    # The hard state to save, or None if it did not change since the last Ready.
    hard_state: HardState | None = None
    # Discard persisted entries at and above this index (a conflict with the leader, or a snapshot).
    truncate_from: int | None = None
    # Entries to append after the truncation, contiguous.
    entries: tuple[Entry, ...] = ()
    # Replacements for records found corrupt (same index), written without removing anything else.
    repaired_entries: tuple[Entry, ...] = ()
    # A leader's snapshot to save and install.
    snapshot: Snapshot | None = None
    # Entries to apply, in order, after persisting. Never a faulty one; never above the commit index.
    committed_entries: tuple[Entry, ...] = ()
    # Messages to send after persisting. Never addressed to this node.
    messages: tuple[Message, ...] = ()
    # Read barriers passed (read_index).
    read_states: tuple[ReadState, ...] = ()
    # Fsync step 1 before step 2: term, vote, watermark, repairing flag or the log changed (rule 1).
    must_sync: bool = False
    # The messages may be sent before step 1 (a leader's, invariant 4).
    send_first: bool = False
    # The term this node led when the Ready was built, else 0: `advance()` counts the leader's own copy
    # of the entries only if it still leads this term (invariant 4).
    leader_term: int = 0


def _durable_fields(hard_state: HardState) -> tuple[object, ...]:
    """Fields whose change must be fsynced; `commit_index` is only a restart hint."""
    return (hard_state.current_term, hard_state.voted_for, hard_state.acked_watermark, hard_state.repairing,
            hard_state.vote_fence_term)


def _fenced_fields(hard_state: HardState) -> tuple[object, ...]:
    """Fields a leader's messages depend on: they must be durable before any of them is sent."""
    return (hard_state.current_term, hard_state.voted_for, hard_state.repairing, hard_state.vote_fence_term)


def messages_independent_of_storage(node: RaftNode) -> bool:
    """A leader's messages depend on nothing unpersisted: its term, vote and repairing flag are durable."""
    return _fenced_fields(node.hard_state()) == _fenced_fields(node.persisted_hard_state)


def hard_state_due(node: RaftNode) -> HardState:
    """The hard state the next Ready persists: none new while the term query runs (`term_query` invariant
    2: the storage stays as empty as the restore found it, so a restart still knows its term is unknown)."""
    return node.persisted_hard_state if node.term_query is not None else node.hard_state()


def has_ready(node: RaftNode) -> bool:
    log = node.log
    return bool(
        node.outbox or node.read_states or node.pending_snapshot is not None or log.has_writes()
        or hard_state_due(node) != node.persisted_hard_state
        or log.committed_to_apply(1, repair.trusted_index(node)))


def build_ready(node: RaftNode) -> Ready:
    invariant(not node.ready_outstanding, "ready() called again before advance()")
    log = node.log
    truncate_from, entries, repaired = log.take_writes()
    snapshot, node.pending_snapshot = node.pending_snapshot, None
    committed = log.committed_to_apply(node.config.committed_entries_per_ready_max, repair.trusted_index(node))
    leading = node.role is Role.LEADER
    if entries and leading:
        # Rule 2 for the leader: it counts its own copy toward commit once this Ready is durable, which is
        # an acknowledgement too; the watermark covering it is persisted with the entries.
        node.acked_watermark = node.rule_acked_watermark(node.acked_watermark, entries[-1].index)
    hard_state = hard_state_due(node)
    changed = hard_state != node.persisted_hard_state
    durable_changed = changed and _durable_fields(hard_state) != _durable_fields(node.persisted_hard_state)
    log_written = bool(entries or repaired or truncate_from is not None or snapshot is not None)
    messages, node.outbox = tuple(node.outbox), []
    read_states, node.read_states = tuple(node.read_states), []
    node.ready_outstanding = True
    return Ready(
        hard_state=hard_state if changed else None,
        truncate_from=truncate_from,
        entries=tuple(entries),
        repaired_entries=tuple(repaired),
        snapshot=snapshot,
        committed_entries=tuple(committed),
        messages=messages,
        read_states=read_states,
        must_sync=node.rule_must_sync(durable_changed, log_written),
        send_first=leading and messages_independent_of_storage(node),
        leader_term=node.current_term if leading else 0,
    )


def apply_advance(node: RaftNode, ready: Ready) -> None:
    invariant(node.ready_outstanding, "advance() without an outstanding ready()")
    node.ready_outstanding = False
    log = node.log
    if ready.hard_state is not None:
        node.persisted_hard_state = ready.hard_state
    if ready.entries:
        log.mark_stable(ready.entries[-1])
    if ready.snapshot is not None:
        log.applied_index = max(log.applied_index, ready.snapshot.meta.index)
    if ready.committed_entries:
        last_applied = ready.committed_entries[-1].index
        invariant(last_applied <= log.commit_index, "applied entries were committed")
        log.applied_index = max(log.applied_index, last_applied)
