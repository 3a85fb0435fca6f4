"""When a stream replica may lead its stream, without I/O (layer L3½): production's `StreamReplica` and the
simulator both ask here before they build a `StreamLeader`.

Owns: `leader_ready`, the conditions of stream_replica invariant 1 — the node is the group's Raft leader,
its term's NOOP applied on this replica (so every entry of earlier terms applied too), every entry in its
log applied, and the stream machine can lead (current, fault-free, not replaying); and `alone_voter`, the
`alone` of `StreamLeader.audit_due` (stream/leader.py invariant 6; `server.groups.stream_audit` asks).

Invariants:
  1. A `StreamLeader` built when `leader_ready` is false could decide from a state that misses entries
     the group committed: the conditions are written once, here.

Imports: L1 (`raft` status), L3 (`stream`). Never trio, time, os or the server layer.
"""

from __future__ import annotations

from jsraft.raft.status import Status
from jsraft.stream import StreamStateMachine


def leader_ready(*, is_leader: bool, noop_term: int, current_term: int, applied_index: int, last_index: int,
                 machine: StreamStateMachine | None) -> bool:
    """Invariant 1: may this replica build a `StreamLeader` now?"""
    return (is_leader and noop_term == current_term and applied_index >= last_index and machine is not None
            and machine.can_lead)


def alone_voter(status: Status, node_id: str) -> bool:
    """Whether `node_id` is its group's only voter and the group has no learner: no other replica's
    report could be judged against its own (`StreamLeader.audit_due`'s `alone`)."""
    return status.voters == (node_id,) and not status.learners
