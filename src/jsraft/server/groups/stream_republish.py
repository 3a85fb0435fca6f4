"""A stream replica's `Republisher` (replica/republish.py) wired to this node: its leadership and the
client port (layer L5).

Owns: `attach_republisher` — the Raft term this node leads the stream's group in (`leading_term`, the
republisher's invariant 1) and where republished messages go: the node's consumer hub (`ConsumerHub.publish`,
the client port), so they reach subscribers here and, through cluster interest routing, at every peer,
as any publish from the node does (push deliveries and advisories take the same way).

Invariants:
  1. Attached once, when the replica's adapter is built, before its log replays: a restarted leader
     replaying old entries is not leading yet (its term's NOOP comes later), so it republishes nothing.

Imports: L0, L3½ (`replica.republish`), server siblings (duck-typed: the replica is not imported).
"""

from __future__ import annotations

from typing import Any

from jsraft.errors import JsraftError
from jsraft.replica.republish import Republisher


def attach_republisher(replica: Any) -> Republisher:
    """Give `replica.adapter` its `Republisher` (invariant 1)."""
    runtime, group = replica.runtime, replica.group

    def leading_term() -> int | None:
        try:
            if not runtime.is_leader(group):
                return None
            return runtime.status(group).raft.current_term
        except JsraftError:  # the group closed
            return None

    def send(message: Any) -> None:
        port = replica.consumers.port  # looked up each time: the hub may be attached after the replica opened
        if port is not None:
            port.publish(message)

    republisher = Republisher(replica.machine, leading_term)
    republisher.send = send
    replica.adapter.republisher = republisher
    return republisher
