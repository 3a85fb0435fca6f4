"""Operating errors of the runtime's public API (layer L4).

Owns: what a caller of `NodeRuntime` must handle besides the Raft core's own errors (`NotLeader`,
`ProposalDropped`, re-raised unchanged): the group does not exist, already exists, is closed, or a
proposal's outcome cannot be known. Codes are in jsraft's 202xx range (20200–20299 reserved for the
runtime).

Invariants:
  1. An `err_code` here is never reused or renumbered (same rule as `jsraft.errors`).
  2. Each error says whether the proposal may have been committed: `GroupClosed` and `OutcomeUnknown`
     say "maybe" (the caller must not assume either way); `NotLeader`/`ProposalDropped` from `propose`
     say "no".

Imports: L0 only.
"""

from __future__ import annotations

from jsraft.errors import JsraftError


class GroupError(JsraftError):
    """Base of the runtime's operating errors."""

    err_code = 20200
    http_code = 503
    default_description = "raft group error"


class GroupNotFound(GroupError):
    err_code = 20201
    http_code = 404
    default_description = "raft group not found"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"raft group {name!r} is not open on this node")


class GroupExists(GroupError):
    err_code = 20202
    http_code = 400
    default_description = "raft group already open"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"raft group {name!r} is already open on this node")


class GroupClosed(GroupError):
    """The group was closed (or failed) on this node; a proposal in flight may or may not commit."""

    err_code = 20203
    default_description = "raft group closed"


class OutcomeUnknown(GroupError):
    """A snapshot from the leader covered a proposal's index: whether it was ours cannot be told."""

    err_code = 20204
    default_description = "proposal outcome unknown"


class BadBeat(GroupError):
    """A node beat (`runtime.quiesce`) from a peer did not decode: the link to that peer is dropped."""

    err_code = 20205
    http_code = 400
    default_description = "malformed node beat"


class GroupHalted(GroupClosed):
    """The group's Raft core broke one of its own rules (an `InvariantViolation`, e.g. rule 5: a committed
    entry would be removed): this group stopped for good on this node, the node and its other groups go
    on. Raised out of the group's cycle so the runtime stops the group like any other failed one."""

    err_code = 20206
    default_description = "raft group halted: a safety invariant broke"
