"""Restore reconciliation: what a node must do with its stream groups after a meta snapshot replaced its state.

Owns: `plan_restore`, the pure decision of which stream groups to remove, leave, open or update once the
meta state machine restored a snapshot (at startup from its own WAL, or installed from the meta leader
when this node fell behind the leader's compacted log). The server (`server/groups/streams.py`) carries it out.

Why a plan is needed: a snapshot replaces the state wholesale, so the entries it covers are never applied
here one by one. A stream created and deleted inside it produces no `DELETE_STREAM` apply on this node,
yet this node may run (or hold the files of) that stream's group.

The rule, and why it is the committed-delete path rather than an orphan sweep (DESIGN §5; `quarantine`):
  A group is removed only if this node *knew it from its own committed meta state* — it was in the state
  the snapshot replaced, or a replica of it runs here (opened from an applied assignment) — and it is
  absent from the restored state, whose index is at or past the group's creation index. Group names carry
  their creation index (`entries.group_name`), so the same name re-created later is a different group.
  Meta entries are applied only once committed and a stream stops being assigned only by an applied
  `DeleteStream` (`apply` invariant 2), so a known group missing from a later committed state proves that
  a committed delete removed it: the snapshot IS that committed state, decoded only after its CRC and
  canonical form verified (`snapshot.decode_state`). A directory this node never knew from its meta state
  proves nothing and is never in the plan: it stays for the quarantine sweep, which moves, never deletes.

Invariants:
  1. `remove` holds only groups from `known` or `running`, absent from `machine`'s state, created at an
     index <= its applied index; never a group the state assigns.
  2. `open` is every assignment of `machine` that lists `node_id` (online or offline: the server skips the
     offline ones, DESIGN §9); `leave` only running replicas whose current assignment dropped `node_id`.
  3. Deterministic: sorted by stream name, a function of its arguments only.

Imports: L0, `meta.*`, attrs. Reference: DESIGN.md §5; Jepsen "NATS 2.12.1" (streams deleted after meta
snapshot corruption), which this rule answers by requiring positive proof of a committed delete.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from jsraft.meta.assignment import StreamAssignment
from jsraft.meta.entries import group_name
from jsraft.meta.machine import MetaStateMachine


@attrs.frozen(kw_only=True)
class RestorePlan:
    """What to do after a restore, in this order: remove, leave, open (module docstring)."""

    remove: tuple[tuple[str, str], ...] = ()  # (stream, group) deleted by a committed entry: stop, remove files
    leave: tuple[StreamAssignment, ...] = ()  # running, still assigned, but no longer to this node
    open: tuple[StreamAssignment, ...] = ()  # this node's assignments: open, or update the running replica


def created_index_of(stream: str, group: str) -> int | None:
    """The creation index `group` (a group name of `stream`) encodes, or None if it is not one."""
    prefix = group_name(stream, 0)[:-1]
    suffix = group[len(prefix):] if group.startswith(prefix) else ""
    if not suffix.isdigit() or group_name(stream, int(suffix)) != group:
        return None
    return int(suffix)


def plan_restore(machine: MetaStateMachine, node_id: str, *, known: Iterable[tuple[str, str]],
                 running: Mapping[str, str]) -> RestorePlan:
    """`known`: `(stream, group)` of every stream in the meta state before the restore; `running`: stream
    -> group of the replicas this node runs now. Both come from committed meta state (module docstring)."""
    current = {assignment.name: assignment for assignment in machine.streams()}
    candidates = set(known) | set(running.items())
    remove = []
    for stream, group in sorted(candidates):
        assignment = current.get(stream)
        if assignment is not None and assignment.group == group:
            continue
        created = created_index_of(stream, group)
        # Invariant 1: the restored state must cover the group's creation, or its absence proves nothing.
        if created is not None and 0 < created <= machine.applied_index:
            remove.append((stream, group))
    leave = [current[stream] for stream, group in sorted(running.items())
             if stream in current and current[stream].group == group and node_id not in current[stream].peers]
    opened = [assignment for name, assignment in sorted(current.items()) if node_id in assignment.peers]
    return RestorePlan(remove=tuple(remove), leave=tuple(leave), open=tuple(opened))
