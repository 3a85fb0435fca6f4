"""`Progress`: wakes whoever waits for this node's state to move on, at the end of every Ready cycle
(layer L4).

Owns: one notifier per `NodeRuntime`. A create waited for the meta entry to apply here, for its group to
open and elect, for its first CONFIG entry — each by polling every 2–5 ms (most of what was left of a
create besides its fsyncs, and work for the interpreter while other groups need it). Every one of those
states changes only when a group's cycle applies entries or changes its role, so a waiter now sleeps until
a cycle ended and looks again.

Invariants:
  1. `notify` runs after every Ready cycle (`NodeRuntime._ready_loop`), after its applies and role changes.
  2. Every wait is bounded (`until`'s `recheck_s`): a state that changed outside a cycle (a replica
     registered by the stream manager after its group's cycle ran) is seen at most that much later,
     never missed for good.
  3. `notify` first runs the `after_cycle` callbacks, on the trio thread, before any task runs again: the
     client port sends what the cycle's applies queued for its connections (`ClientServer.flush_queued`),
     so a PubAck queued behind a push consumer's delivery to the same client leaves with the cycle, not
     at its writer task's next turn. A callback must not block or raise.

Imports: trio, stdlib.
"""

from __future__ import annotations

from collections.abc import Callable

import trio


class Progress:
    def __init__(self) -> None:
        self._event = trio.Event()
        self.after_cycle: list[Callable[[], None]] = []  # invariant 3

    def notify(self) -> None:
        """A cycle ended (invariant 1): run `after_cycle` (invariant 3), then wake every waiter."""
        for callback in self.after_cycle:
            callback()
        self._event.set()
        self._event = trio.Event()

    async def until(self, predicate: Callable[[], bool], timeout_s: float, *, recheck_s: float = 0.05) -> bool:
        """Wait until `predicate()` holds, looking after every cycle and at least every `recheck_s`
        (invariant 2); False when `timeout_s` passed first. A predicate that holds already costs no
        cancel scope (most of a create's waits: the state they wait for came with the cycle before)."""
        if predicate():
            return True
        with trio.move_on_after(timeout_s):
            while not predicate():
                with trio.move_on_after(recheck_s):
                    await self._event.wait()
            return True
        return predicate()
