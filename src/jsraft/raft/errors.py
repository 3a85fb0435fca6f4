"""Operating errors raised by the Raft core's public API (layer L1).

Owns: the few conditions a caller of `RaftNode` must handle — this node is not the leader, the leader
cannot take a proposal right now, a membership change is malformed, a peer sent a malformed message.
They are `JsraftError`s with stable codes in jsraft's 2xxxx range (20100–20199 is reserved for Raft).
Programmer errors (misuse of `ready()`/`advance()`, broken invariants) go through `invariant()` instead.

Invariants:
  1. An `err_code` here is never reused or renumbered (same rule as `jsraft.errors`).

Imports: L0 only.
"""

from __future__ import annotations

from jsraft.errors import JsraftError


class RaftError(JsraftError):
    """Base of the Raft core's operating errors."""

    err_code = 20100
    http_code = 503
    default_description = "raft error"


class NotLeader(RaftError):
    """The request needs the leader; `leader_id` is this node's best guess of who it is (or None)."""

    err_code = 20101
    default_description = "not the leader"

    def __init__(self, leader_id: str | None) -> None:
        self.leader_id = leader_id
        hint = f"; leader is {leader_id}" if leader_id else "; no leader known"
        super().__init__(f"not the leader{hint}")


class ProposalDropped(RaftError):
    """The leader cannot accept this proposal now (transfer in progress, a bound reached, not caught up)."""

    err_code = 20102
    default_description = "proposal dropped"


class BadConfChange(RaftError):
    """A membership change that does not apply to the current configuration."""

    err_code = 20103
    http_code = 400
    default_description = "bad membership change"


class PeerProtocolError(RaftError):
    """A peer sent a message that breaks the protocol's structure; the driver logs it and drops the link."""

    err_code = 20104
    http_code = 500
    default_description = "peer protocol error"
