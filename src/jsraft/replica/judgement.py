"""`Judgement`: what a stream replica knows of its own store against the group's, from its repairs and
the audits' verdicts, kept durably where it matters (layer L3½).

Owns: whether this replica's store is *unjudged* — it awaits an audit's confirmation — and since which
index; the durable mark that carries that across a restart (`install_mark.AuditMark`, file
`audit_pending` beside the store); the index of the last repair this replica finished (a verdict about the store before it is
stale). Production's `StreamAdapter` holds one; the repair decisions (`replica.stream_repair`), the
adapter's snapshot decision, production's `AuditRunner` and the simulator read and feed it.

A store becomes unjudged when a repair ends that its session could not verify (DESIGN §8 leaves it to the
next audit: the source moved while it served) or when an audit's verdict says it disagrees with the
majority. It is judged again by a verified repair, or by an audit after that index whose verdict says it
agrees.

Why durable, and why it stops snapshots (simulator `--app consumer` seed 49983): n2 caught up unverified
at index 95 with three messages the group had deleted. As leader it applied the AUDIT at 103 and, in the
same tick, took its own snapshot at 104 — the snapshot's group state was its store's. The verdict then
said it drifted and it stepped down; after a crash its own snapshot and its store agreed, so the drift was
forgotten (the standing lived in memory). It led again, sent that snapshot to two peers, and served their
catch-ups, which verified against it: three replicas then held messages the group had deleted. So, while
a store is unjudged:
  - the replica takes no snapshot of its own (`StreamAdapter.snapshot_ready`): a snapshot states the
    group's state, and peers install it and verify their catch-ups against it;
  - it serves no repair (`source_refusal`);
  - it keeps asking for an audit (`AuditRunner`), and the leader tells it the agreeing verdict.

Invariants:
  1. The mark is durable before `repaired` or `verdict` returns (`Disk.write_atomic`): the callers make
     those calls before anything after that index is applied or snapshotted.
  2. A verdict at or below the index of the last repair this replica finished is about the store before
     that repair: it changes nothing (`verdict` returns False).
  3. Only an agreeing verdict above the unjudged index judges the store: an audit at or below it may
     predate the repair or the disagreement.
  4. A mark that does not read counts as set (at index 0, so any later agreeing verdict clears it): the
     safe side is a replica that waits one audit.
  5. Without a disk (`mark` None: tests, memory-only), the same rules hold in memory.

Imports: stdlib, replica sibling (`install_mark`). Never trio, time or the server layer.
"""

from __future__ import annotations

from jsraft.replica.install_mark import IndexMark


class Judgement:
    def __init__(self, mark: IndexMark | None = None) -> None:
        self._mark = mark
        self.awaiting: int | None = mark.pending(damaged=0) if mark is not None else None  # invariant 4
        self.disagreed = False  # the latest reason to await is a disagreeing verdict (in memory only)
        self.repaired_at = 0  # the index of the last repair this replica finished (invariant 2)

    @property
    def unjudged(self) -> bool:
        return self.awaiting is not None

    def repaired(self, index: int, *, verified: bool) -> None:
        """A repair brought the store to the group's state at `index`, verified or left to an audit."""
        self.repaired_at = max(self.repaired_at, index)
        self.disagreed = False
        if verified:
            self._clear()
        else:
            self._await(index)

    def verdict(self, index: int, agreed: bool) -> bool:
        """An audit at `index` judged this store; False when the verdict is stale (invariant 2)."""
        if index <= self.repaired_at:
            return False
        if not agreed:
            self.disagreed = True
            self._await(max(index, self.awaiting or 0))
        elif self.awaiting is not None and index > self.awaiting:  # invariant 3
            self.disagreed = False
            self._clear()
        return True

    def _await(self, index: int) -> None:
        if self.awaiting != index:
            if self._mark is not None:
                self._mark.set(max(index, 1))  # invariant 1 (0 reads as "none")
            self.awaiting = index

    def _clear(self) -> None:
        if self.awaiting is not None:
            if self._mark is not None:
                self._mark.clear()
            self.awaiting = None
