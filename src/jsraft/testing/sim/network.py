"""`SimNetwork`: messages between simulated nodes, with delay, loss, duplication, reordering and partitions.

Owns: the messages in flight (a heap ordered by delivery tick, then send order) and the set of cut
directed links. Partitions are expressed only as cut links, so every shape is one mechanism:
  - `partition(groups)`: symmetric, every link between two different groups cut both ways;
  - `isolate(node)`: one node against the rest;
  - `cut_one_way(src, dst)`: asymmetric, `src` can no longer reach `dst`, the reverse still works;
  - `bridge(a, b)`: a and b cannot talk to each other, but both still reach everyone else (the bridge);
  - swizzle: nodes are cut off one at a time (`swizzle_step`), then restored one at a time in a random
    order;
  - `heal()`: every link open again.
Beside partitions, `send_filter` (a predicate set by the fault scheduler) loses the messages it picks, when
sent and still in flight: one node's outgoing links down but for one message, say (the scheduler's
`lost-vote` plan). It is not a partition shape: `heal()` does not clear it.

Invariants:
  1. A message crosses a link only if the link is open both when it is sent and when it is delivered:
     a cut drops what is in flight on that link, as a real partition does.
  2. Delivery is in (tick, send order) order, so with no delay variation messages on a link are FIFO;
     `reorder` and random delays make later messages overtake earlier ones.
  3. Every random choice comes from the generator given at construction (simulator invariant 1).
  4. The number of messages in flight is bounded by `in_flight_max`; beyond it new ones are dropped (and
     counted), as a real transport's buffers would.

Imports: stdlib, `jsraft.raft` (message types only). Reference: DESIGN.md §11; CHAOS.md S05, S06 (bridge,
swizzle); Jepsen's partition nemeses.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable

from jsraft.raft import Message

IN_FLIGHT_MAX = 20_000


class SimNetwork:
    def __init__(self, rng: random.Random, node_ids: Iterable[str], *, drop: float = 0.0,
                 duplicate: float = 0.0, delay_max_ticks: int = 1, reorder: float = 0.0,
                 in_flight_max: int = IN_FLIGHT_MAX) -> None:
        self.rng = rng
        self.node_ids = tuple(node_ids)
        self.drop, self.duplicate, self.reorder = drop, duplicate, reorder
        self.delay_max_ticks = max(1, delay_max_ticks)
        self.in_flight_max = in_flight_max
        self.cut: set[tuple[str, str]] = set()
        self._heap: list[tuple[int, int, Message]] = []
        self._sent = 0
        self.dropped = 0
        self.duplicated = 0
        self.delivered = 0
        self.shape = "healed"  # a one-word description of the current partition, for the trace
        self._swizzle_order: list[str] = []
        self._swizzle_cut: list[str] = []
        self._swizzle_restoring = False
        # Loses the messages it returns True for (see the module docstring); None: loses none.
        self.send_filter: Callable[[Message], bool] | None = None

    # --- Sending and delivering ---------------------------------------------------------------------

    def send(self, message: Message, now: int) -> None:
        if (not self.can_send(message.from_id, message.to_id) or len(self._heap) >= self.in_flight_max
                or self._filtered(message)):
            self.dropped += 1
            return
        if self.drop and self.rng.random() < self.drop:
            self.dropped += 1
            return
        self._enqueue(message, now)
        if self.duplicate and self.rng.random() < self.duplicate:
            self.duplicated += 1
            self._enqueue(message, now)

    def _enqueue(self, message: Message, now: int) -> None:
        delay = 1 + (self.rng.randrange(self.delay_max_ticks) if self.delay_max_ticks > 1 else 0)
        if self.reorder and self.rng.random() < self.reorder:
            delay += self.rng.randint(2, 8)
        self._sent += 1
        heapq.heappush(self._heap, (now + delay, self._sent, message))

    def due(self, now: int) -> list[Message]:
        """Pop every message due by `now` whose link is still open (invariant 1), in delivery order."""
        out: list[Message] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            message = heapq.heappop(heap)[2]
            if not self.can_send(message.from_id, message.to_id) or self._filtered(message):
                self.dropped += 1
                continue
            out.append(message)
        self.delivered += len(out)
        return out

    def _filtered(self, message: Message) -> bool:
        return self.send_filter is not None and self.send_filter(message)

    def in_flight(self) -> int:
        return len(self._heap)

    def quiet(self) -> None:
        """Stop losing, duplicating and reordering (the liveness phase); delays stay."""
        self.drop = self.duplicate = self.reorder = 0.0

    # --- Partitions ---------------------------------------------------------------------------------

    def can_send(self, src: str, dst: str) -> bool:
        return (src, dst) not in self.cut

    def heal(self) -> None:
        self.cut.clear()
        self.shape = "healed"
        self._swizzle_order, self._swizzle_cut, self._swizzle_restoring = [], [], False

    def partition(self, groups: list[set[str]]) -> None:
        """Symmetric partition: nodes talk only within their group (a node in no group is alone)."""
        self.heal()
        where = {node: position for position, group in enumerate(groups) for node in group}
        for a in self.node_ids:
            for b in self.node_ids:
                if a != b and (a not in where or b not in where or where[a] != where[b]):
                    self.cut.add((a, b))
        self.shape = "partition " + " | ".join(",".join(sorted(g)) for g in groups)

    def isolate(self, node: str) -> None:
        self.partition([{node}, set(self.node_ids) - {node}])
        self.shape = f"isolate {node}"

    def cut_one_way(self, src: str, dst: str) -> None:
        """Asymmetric: `src` -> `dst` is cut, `dst` -> `src` still works (added to the current cuts)."""
        self.cut.add((src, dst))
        self.shape = f"one-way {src}-x->{dst}"

    def bridge(self, a: str, b: str) -> None:
        """a and b cannot talk to each other; everyone else (the bridge) still reaches both."""
        self.heal()
        self.cut.update({(a, b), (b, a)})
        self.shape = f"bridge {a}x{b}"

    def start_swizzle(self) -> None:
        self.heal()
        self._swizzle_order = list(self.node_ids)
        self.rng.shuffle(self._swizzle_order)
        self.shape = "swizzle"

    def swizzling(self) -> bool:
        return bool(self._swizzle_order) or bool(self._swizzle_cut)

    def swizzle_step(self) -> str:
        """Cut the next node off (up to all but one), then restore them one at a time in a random order."""
        if not self._swizzle_restoring and len(self._swizzle_order) > 1:
            node = self._swizzle_order.pop()
            self._swizzle_cut.append(node)
            if not self._swizzle_order or len(self._swizzle_cut) >= len(self.node_ids) - 1:
                self._swizzle_restoring = True
                self._swizzle_order = []
                self.rng.shuffle(self._swizzle_cut)
            self._recompute_swizzle()
            return f"swizzle cut {node}"
        if self._swizzle_cut:
            node = self._swizzle_cut.pop()
            self._recompute_swizzle()
            if not self._swizzle_cut:
                self.heal()
            return f"swizzle restore {node}"
        self.heal()
        return "swizzle done"

    def _recompute_swizzle(self) -> None:
        self.cut.clear()
        for node in self._swizzle_cut:
            for other in self.node_ids:
                if other != node:
                    self.cut.update({(node, other), (other, node)})

    # --- Reachability (for the checkers) -----------------------------------------------------------

    def linked_both_ways(self, node: str, others: Iterable[str]) -> set[str]:
        """The nodes among `others` that `node` can both reach and hear from."""
        return {o for o in others if o != node and (node, o) not in self.cut and (o, node) not in self.cut}
