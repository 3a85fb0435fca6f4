"""Reconnect delays: exponential backoff with jitter from an injected RNG (layer L4, pure).

Owns: the delay a dialer waits between attempts to reach a peer. Delays double from `initial_s` up to
`max_s`; each is drawn uniformly from the upper half of the current step ("equal jitter"), so nodes that
lost a peer at the same moment do not all redial it in lockstep, yet none waits less than half a step.

Invariants:
  1. `initial_s / 2 <= next_delay() <= max_s`, always.
  2. The step only grows until `reset()`; the number of doublings is bounded by `max_s / initial_s`.

Imports: stdlib, L0. Reference: AWS Architecture Blog, "Exponential Backoff And Jitter" (2015).
"""

from __future__ import annotations

import random

from jsraft.errors import invariant


class Backoff:
    __slots__ = ("_initial_s", "_max_s", "_rng", "_step_s")

    def __init__(self, initial_s: float, max_s: float, rng: random.Random) -> None:
        invariant(0 < initial_s <= max_s, "backoff bounds are positive and ordered")
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng
        self._step_s = initial_s

    def next_delay(self) -> float:
        """The delay before the next attempt; the step doubles for the one after (invariant 2)."""
        step_s = self._step_s
        self._step_s = min(self._max_s, step_s * 2)
        delay_s = step_s / 2 + self._rng.uniform(0, step_s / 2)
        invariant(self._initial_s / 2 <= delay_s <= self._max_s, "delay within bounds")
        return delay_s

    def reset(self) -> None:
        """A link stayed up long enough to count as healthy: the next failure starts small again."""
        self._step_s = self._initial_s
