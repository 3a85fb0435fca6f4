"""`Clients`: simulated clients proposing unique values at whichever node leads, and their acknowledgements.

Owns: the client workload. At a step, with the seed's proposal rate, a random client proposes one value (or
a small batch) at a node that believes it leads (during a partition there may be a stale leader: its
proposals simply never commit). Values are `c<client>-<counter>`, unique over the run. A proposal is
*acknowledged* when the node it was proposed at applies an entry with the same index, term and value —
what a runtime answers a client on — and the checker then holds the cluster to it forever.

Invariants:
  1. Every value is proposed at most once (a retry would get a new value), so an acknowledged value
     names exactly one entry.
  2. Counts (`proposed`, `acknowledged`) are reported in the seed's result.
  3. Clients hold back while the leader has `UNCOMMITTED_MAX` entries not committed yet, as real clients
     with a bounded number of requests in flight do; without it, a slow link lets the backlog grow past
     what any bounded liveness phase can replicate.

Imports: stdlib. Reference: CHAOS.md (W-pub: unique values per client).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jsraft.testing.sim.simulator import Simulation

CLIENTS = 4
BATCH_MAX = 5
# Clients stop proposing at a leader with this many uncommitted entries (bounded requests in flight).
UNCOMMITTED_MAX = 100


class Clients:
    def __init__(self, rng: random.Random, rate: float) -> None:
        self.rng = rng
        self.rate = rate
        self.counters = [0] * CLIENTS
        self.proposed = 0
        self.acknowledged = 0

    def on_ack(self, node_id: str, index: int, term: int, value: bytes) -> bool:
        """A proposal applied where it was proposed; True: a client write the checker holds the cluster to."""
        self.acknowledged += 1
        return True

    def stats(self) -> dict[str, int]:
        return {}

    def next_value(self, client: int) -> bytes:
        self.counters[client] += 1
        return f"c{client}-{self.counters[client]}".encode()

    def step(self, sim: Simulation) -> None:
        if self.rng.random() >= self.rate:
            return
        leaders = [d for _, d in sorted(sim.drivers.items()) if d.node is not None and d.node.role == "leader"]
        if not leaders:
            return
        driver = self.rng.choice(leaders)
        log = driver.node.log  # type: ignore[union-attr]
        if log.last_index - log.commit_index >= UNCOMMITTED_MAX:
            return
        batch = 1 if self.rng.random() < 0.8 else self.rng.randint(2, BATCH_MAX)
        for _ in range(batch):
            value = self.next_value(self.rng.randrange(CLIENTS))
            if driver.propose(value) is None:
                return
            self.proposed += 1
