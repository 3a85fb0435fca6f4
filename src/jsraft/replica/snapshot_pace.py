"""`SnapshotPace`: a stream group's snapshot bound in messages and bytes, beside the cycle's entry count
(layer L3½).

Owns: counting what a stream replica applied since its last snapshot (messages, entry bytes) and asking
for a snapshot (`on_due`, the runtime's `request_snapshot`) once either passes its bound.

Why: the cycle snapshots every `snapshot_every_entries` applied entries, but a MSGS entry carries up to
`MSGS_PER_ENTRY_MAX` messages, so 4,096 entries can be hundreds of thousands of messages — all of which a
restart replays and verifies against the store before the replica is current (bench/README.md "Restart").
Bounding messages and bytes bounds that replay whatever the batching was.

Invariants:
  1. `on_due` is called at most once per snapshot period once it took the request (returned True): after
     that, not again until `reset()` (a snapshot taken or restored); one that could not (the group is not
     running yet) is asked again at the next entry. The cycle keeps the request until a snapshot is taken; one refused is asked for
     again once more has applied (cycle invariant 5), so nothing is lost by asking once.
  2. A bound of None never makes a snapshot due; both None: `applied` only counts.
  3. The pace only asks; whether a snapshot can be taken (current, not replaying, nothing held back) is
     still the state machine's `snapshot_ready()` and the cycle's own rules.

Imports: stdlib, attrs. Must not import the runtime: `on_due` is handed in.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs


@attrs.frozen(kw_only=True)
class SnapshotBound:
    """Ask for a snapshot once this many messages or entry bytes applied since the last one (None: no bound)."""

    msgs: int | None = None
    bytes: int | None = None

    def __attrs_post_init__(self) -> None:
        for value in (self.msgs, self.bytes):
            if value is not None and value < 1:
                raise ValueError("a snapshot bound is at least 1 (None: no bound)")


def _never() -> bool:
    return False


class SnapshotPace:
    def __init__(self, bound: SnapshotBound, on_due: Callable[[], bool] = _never) -> None:
        self.bound = bound
        self.on_due = on_due
        self.msgs = 0
        self.bytes = 0
        self.asked = False
        self.requests = 0  # how many requests `on_due` took (tests)

    def applied(self, msgs: int, nbytes: int) -> None:
        """An entry applied: `msgs` messages in `nbytes` bytes of entry data."""
        self.msgs += msgs
        self.bytes += nbytes
        if not self.asked and self.due():
            self.asked = self.on_due()  # invariant 1
            self.requests += self.asked

    def due(self) -> bool:
        bound = self.bound
        return ((bound.msgs is not None and self.msgs >= bound.msgs)
                or (bound.bytes is not None and self.bytes >= bound.bytes))

    def reset(self) -> None:
        """A snapshot was taken or restored: count from zero again."""
        self.msgs = self.bytes = 0
        self.asked = False
