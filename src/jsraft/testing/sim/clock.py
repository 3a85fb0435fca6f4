"""`SimClock`: discrete simulated time, and how many ticks each node's clock gets per step.

Owns: the global tick counter `now` and each node's tick rate. A node's `RaftNode.tick()` is called by the
simulator as many times per step as `ticks_for()` says: a rate of 1.0 is one tick per step; a skewed node
(rate 0.7–1.3) accumulates fractional credit and sometimes gets 0 or 2 ticks, so its election timeouts run
slow or fast against the others' — the simulator's version of clock skew and strobing.

Invariants:
  1. `now` only increases, by one per `advance()`.
  2. Over `k` steps a node with rate `r` gets `floor(k * r)` ticks, give or take one: skew is bounded and
     deterministic (no randomness after construction).

Imports: stdlib. Reference: DESIGN.md §11; CHAOS.md S08 (clock skew).
"""

from __future__ import annotations


class SimClock:
    def __init__(self, rates: dict[str, float]) -> None:
        self.now = 0
        self.rates = dict(rates)
        self._credit = {node_id: 0.0 for node_id in rates}

    def advance(self) -> None:
        self.now += 1
        for node_id, rate in self.rates.items():
            self._credit[node_id] += rate

    def ticks_for(self, node_id: str) -> int:
        """Whole ticks this node has earned since it last asked; paused or crashed nodes still earn none."""
        credit = self._credit.get(node_id, 0.0)
        whole = int(credit)
        self._credit[node_id] = credit - whole
        return whole

    def forfeit(self, node_id: str) -> None:
        """A crashed node's clock does not run: drop what it earned while down."""
        self._credit[node_id] = 0.0

    def uniform(self) -> None:
        """End the skew (liveness phase): every node ticks once per step from now on."""
        self.rates = {node_id: 1.0 for node_id in self.rates}
        self._credit = {node_id: 0.0 for node_id in self.rates}
