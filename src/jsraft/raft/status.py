"""What a replica reports about itself: its role and its `Status` (layer L1).

Owns: `Role` and the `Status` value returned by `RaftNode.status()`, which the driver shows in
monitoring and which tells an operator when a group has halted because too many voters are repairing
(rule 4).

Invariants:
  1. `halted_reason` is not None only when this replica knows no leader and knows that the voters that
     are not repairing cannot form a quorum.

Imports: attrs.
"""

from __future__ import annotations

import enum

import attrs


class Role(enum.StrEnum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@attrs.frozen(kw_only=True)
class Status:
    node_id: str
    role: Role
    current_term: int
    voted_for: str | None
    leader_id: str | None
    commit_index: int
    applied_index: int
    last_index: int
    snapshot_index: int
    acked_watermark: int
    repairing: bool
    repair_reason: str | None
    faulty_count: int
    halted_reason: str | None
    voters: tuple[str, ...]
    learners: tuple[str, ...]
    # On a leader: the other voters that answered within the current check-quorum window, the most
    # caught-up first (ties by name) — where a leader that must hand over sends its leadership, instead
    # of to a peer that is paused or cut off. Empty on every other role.
    reachable_followers: tuple[str, ...] = ()
    observer: bool = False  # lame duck mode: stands for election in no group with another voter (core 6)
    # On a leader: the voter its leadership is being handed to, until the core drops the transfer (done, or
    # not done within an election timeout: a caller that still wants it asks again). None otherwise.
    lead_transferee: str | None = None
