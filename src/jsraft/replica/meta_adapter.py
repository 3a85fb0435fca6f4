"""`MetaAdapter`: `MetaStateMachine` behind the runtime's `StateMachine` protocol (layer L3½).

Owns: feeding the meta group's committed entries to the meta state machine — NORMAL entries through
`apply(index, data)`, NOOP and CONF_CHANGE entries through `note_applied(index)` — and telling the node
what each applied entry changed (`on_applied`) and which state a restored snapshot replaced
(`on_restored`), so it can open, update, stop or delete stream groups.

Invariants:
  1. Every committed entry reaches the meta state machine exactly once, in order (runtime invariant 1);
     the result of a NORMAL entry is the `Applied` the proposer is answered from.
  2. `noop_term` is the term of the last NOOP applied: a leader whose `current_term` equals it has
     applied every entry of earlier terms, the precondition of `MetaStateMachine.propose_*`.
  3. A malformed entry raises (`MalformedMetaEntry`): the runtime stops the group rather than skip it.
  4. `on_restored` is called only after a restore succeeded, with the `(stream, group)` pairs of the
     state it replaced: the node's evidence for which groups the snapshot proves deleted
     (`meta.reconcile`). A snapshot that does not decode changes nothing and reports nothing.
  5. `snapshot_ready()` is false while the node has applied meta entries it has not acted on yet (stream
     groups to open, directories to remove): compacting the log past an unhandled delete would leave,
     after a crash, a directory no replayed entry removes any more.

Imports: L1 (`raft.types`), L3 (`meta`), stdlib. Reference: meta/machine.py "How the runtime drives it".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jsraft.meta import Applied, MetaStateMachine
from jsraft.raft.types import Entry, EntryType


class MetaAdapter:
    def __init__(self, meta: MetaStateMachine, on_applied: Callable[[Applied], None],
                 on_restored: Callable[[list[tuple[str, str]]], None],
                 snapshot_ready: Callable[[], bool] | None = None) -> None:
        self.meta = meta
        self._on_applied = on_applied
        self._on_restored = on_restored
        self._snapshot_ready = snapshot_ready
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

    def snapshot_ready(self) -> bool:
        """Invariant 5 (asked by the runtime before each own snapshot)."""
        return self._snapshot_ready is None or self._snapshot_ready()

    def snapshot(self) -> bytes:
        return self.meta.snapshot()

    def restore(self, data: bytes) -> None:
        replaced = [(assignment.name, assignment.group) for assignment in self.meta.streams()]
        self.meta.restore(data)
        self._on_restored(replaced)
