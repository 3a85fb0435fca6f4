"""`MetaAdapter`: `MetaStateMachine` behind the runtime's `StateMachine` protocol (layer L5).

Owns: feeding the meta group's committed entries to the meta state machine — NORMAL entries through
`apply(index, data)`, NOOP and CONF_CHANGE entries through `note_applied(index)` — and telling the node
what each applied entry changed (`on_applied`), so it can open or delete stream groups.

Invariants:
  1. Every committed entry reaches the meta state machine exactly once, in order (runtime invariant 1);
     the result of a NORMAL entry is the `Applied` the proposer is answered from.
  2. `noop_term` is the term of the last NOOP applied: a leader whose `current_term` equals it has
     applied every entry of earlier terms, the precondition of `MetaStateMachine.propose_*`.
  3. A malformed entry raises (`MalformedMetaEntry`): the runtime stops the group rather than skip it.

Imports: L1 (`raft.types`), L3 (`meta`), stdlib. Reference: meta/machine.py "How the runtime drives it".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jsraft.meta import Applied, MetaStateMachine
from jsraft.raft.types import Entry, EntryType


class MetaAdapter:
    def __init__(self, meta: MetaStateMachine, on_applied: Callable[[Applied], None],
                 on_restored: Callable[[], None]) -> None:
        self.meta = meta
        self._on_applied = on_applied
        self._on_restored = on_restored
        self.noop_term = 0

    @property
    def applied_index(self) -> int:
        return self.meta.applied_index

    def apply(self, entries: Sequence[Entry]) -> list[object]:
        results: list[object] = []
        for entry in entries:
            if entry.type is EntryType.NORMAL:
                applied = self.meta.apply(entry.index, entry.data)
                self._on_applied(applied)
                results.append(applied)
                continue
            self.meta.note_applied(entry.index)
            if entry.type is EntryType.NOOP:
                self.noop_term = max(self.noop_term, entry.term)
            results.append(None)
        return results

    def snapshot(self) -> bytes:
        return self.meta.snapshot()

    def restore(self, data: bytes) -> None:
        self.meta.restore(data)
        self._on_restored()
