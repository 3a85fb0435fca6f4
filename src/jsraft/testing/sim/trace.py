"""The simulator's event trace: one line per event, always recorded, printed when a seed fails.

Owns: `Trace`, two bounded rings of `"t=<tick> <text>"` lines, merged in the order they were added when
rendered: *events* (faults, restarts, role and term changes, repairs, snapshots, membership, acks of probes)
and *messages* (each message sent and delivered, recorded only when a failing seed is replayed verbosely).
Messages are many and events few, so separate bounds keep the whole fault history of a run visible next to
the last messages before the violation.

Invariants:
  1. At most `events_max` lines of each kind are held; `dropped` counts the older ones discarded.
  2. Rendered lines are in the order the simulator produced them; each starts with its tick.

Imports: stdlib. Reference: TigerBeetle VOPR (a failing seed prints what happened, then replays exactly).
"""

from __future__ import annotations

import collections
import heapq


class Trace:
    def __init__(self, events_max: int = 2000) -> None:
        self.events_max = events_max
        self._events: collections.deque[tuple[int, str]] = collections.deque(maxlen=events_max)
        self._messages: collections.deque[tuple[int, str]] = collections.deque(maxlen=events_max)
        self._sequence = 0
        self.dropped = 0
        self.now = 0

    def add(self, text: str) -> None:
        self._push(self._events, text)

    def message(self, text: str) -> None:
        self._push(self._messages, text)

    def _push(self, ring: collections.deque[tuple[int, str]], text: str) -> None:
        if len(ring) == self.events_max:
            self.dropped += 1
        self._sequence += 1
        ring.append((self._sequence, f"t={self.now} {text}"))

    def lines(self) -> list[str]:
        return [line for _, line in heapq.merge(self._events, self._messages)]

    def render(self) -> str:
        head = [f"... {self.dropped} earlier lines not kept ..."] if self.dropped else []
        return "\n".join(head + self.lines())
