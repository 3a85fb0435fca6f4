"""`Readiness`: the one definition of "this node is ready" (layer L5) — what `/varz`, `/healthz`,
`Node.wait_ready`, the `jsraft_node_ready` metric and every harness wait for.

Owns: the rule and its per-term latch. A node is ready when a meta leader is known and, within that
leader's term, this node has caught up once: as the leader, its own term's no-op applied; as a follower,
it applied everything it knew was committed (a non-zero commit index); and every applied meta entry was
handled (stream groups opened or removed). Once caught up in a term it stays ready for that term: a
meta entry committed a moment before it applies is normal operation, not a node that stopped being
ready. A new leader or term, or no leader at all, starts the rule again.

Invariants:
  1. `reason()` is None exactly when the rule holds; otherwise it names the first unmet condition.
  2. Within one `(leader, term)` the answer goes from not ready to ready at most once (the latch), so a
     caller that saw the node ready sees it ready until the meta leadership changes.
  3. Read-only: it reads the node's meta status and stream manager, never changes them. It gets them
     as callables (`Node` wires them): a part not built yet raises `AttributeError`, read as "the meta
     group is not open".

Imports: L0, L1 (`raft` status), L3 (`meta`). Reference: nats-server `/healthz` (JetStream "current").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jsraft.errors import JsraftError
from jsraft.meta import MetaStateMachine
from jsraft.raft.status import Status


class Readiness:
    def __init__(self, name: str, meta: MetaStateMachine, *, meta_status: Callable[[], Status],
                 noop_term: Callable[[], int], streams_pending: Callable[[], Any]) -> None:
        """`meta_status`: the meta group's Raft status; `noop_term`: the term whose first entry the meta
        adapter applied (`MetaAdapter.noop_term`); `streams_pending`: stream groups still being opened or
        removed (truthy while any are)."""
        self.name, self.meta = name, meta
        self._meta_status, self._noop_term, self._streams_pending = meta_status, noop_term, streams_pending
        self._term: tuple[Any, int] | None = None  # (leader, term) the latch is for
        self._ready = False

    def reason(self) -> str | None:
        """None when the node is ready, else why not (invariant 1)."""
        try:
            status = self._meta_status()
        except (AttributeError, JsraftError):
            return "the meta group is not open"
        if status.leader_id is None:
            return "no meta leader is known"
        term = (status.leader_id, status.current_term)
        if term != self._term:
            self._term, self._ready = term, False
        if self._ready:  # invariant 2
            return None
        if status.leader_id == self.name:
            if self._noop_term() != status.current_term:
                return "the meta leader has not applied its term's first entry"
        elif status.commit_index == 0 or self.meta.applied_index < status.commit_index:
            return "this node has not applied the meta entries it knows are committed"
        if self._streams_pending():
            return "stream groups are still being opened or removed"
        self._ready = True
        return None
