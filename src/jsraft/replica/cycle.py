"""`GroupCycle`: one Raft group's synchronous Ready cycle — persist → send → apply, written once (layer L3½);
a leader sends first and persists while its messages travel.

Owns: what a node does with one group's `Ready`, in the order the `Ready` contract (raft/ready.py) and
DESIGN §2/§4 demand, for every driver: the production runtime (a trio shell that runs `persist` on a
worker thread and many groups per fsync) and the simulator (inline, on `SimDisk`, with a seeded clock
and network) drive these same objects. One cycle:

  1. `take()` — on the driving thread: the core's `Ready` (if any) and, when due, our own snapshot to save
     and compact through; the hard state to save (a commit-hint-only change is deferred to the next
     fsync: it is a restart hint, safe to lose); the group marker (and `on_started`, the node's record of
     started groups) on the first durable cycle. A leader's
     snapshot in the `Ready` is announced to the state machine first (`prepare_install`, optional): the
     WAL is about to drop the entries it covers.
  2. `send_first()` — a leader's messages (`Ready.send_first`: they depend on nothing this cycle persists)
     leave now, so the followers write and fsync while the leader does (etcd's pipelining).
     Then `persist.write_work` and `persist.sync_work` (module `persist`: writes, fsync, hard state, marker).
  3. `send()` — only after step 2 returned: every other `Ready`'s messages (votes, acknowledgements).
  4. `finish()` — install the leader's snapshot in the state machine, apply the committed entries, tell the
     proposal owner (`on_snapshot`, `on_applied`), `advance()`; then our own compaction reaches the core.
`run()` does 1–4 inline, for drivers without worker threads (the simulator).

Invariants:
  1. At most one cycle is outstanding: `take()` is not called again before `finish()` of the previous
     cycle (the core's own `ready()`/`advance()` invariant, checked there). The driver keeps every other
     input (steps, ticks, proposals) away from the core meanwhile (runtime `group` invariant 1).
  2. A message leaves before the work's persistence returned only if the core said it may
     (`Ready.send_first`, a leader's); every other one only after (`send`), and `finish` only after both
     (the Ready contract: a message may depend on what this cycle made durable). The leader's own copy
     counts toward commit only in `finish` (`advance()`, after the fsync): a majority still means a
     majority of fsynced copies.
  3. The state machine's `applied_index` equals the core's after every `advance()` (checked).
  4. Our own snapshot is taken only of applied, durable entries whose membership changes the core has
     applied, and only when the state machine can vouch for its state (`snapshot_ready()`, optional).
  5. A `snapshot()` that raises `SnapshotUnavailable` (the machine found, while building it, that it cannot
     vouch for its state — a read-time flip in a stream store) skips that compaction: nothing is saved or
     compacted, the log keeps every entry, and the group goes on; the cycle asks again once more is
     applied (or a snapshot is requested). Compaction is an optimisation, never a reason to stop a group.

Imports: L0, L1 (`raft`, `disk`), L2 (`wal`), siblings. Never trio, `runtime` or `server`.
Reference: etcd-io/raft `rawnode.go` usage; DESIGN §2, §4.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from jsraft.disk.base import Disk
from jsraft.errors import invariant
from jsraft.raft import membership
from jsraft.raft.core import RaftNode
from jsraft.raft.messages import Message
from jsraft.raft.ready import Ready, Snapshot
from jsraft.raft.types import Entry, HardState, SnapshotMeta
from jsraft.replica import persist
from jsraft.replica.persist import Work
from jsraft.replica.state_machine import SnapshotUnavailable, StateMachine
from jsraft.wal import Wal

# send(to_id, group_name, message) -> accepted. A refused message is lost; Raft retransmits.
SendFn = Callable[[str, str, Message], bool]
AppliedFn = Callable[[Sequence[Entry], Sequence[object]], None]

log = logging.getLogger("jsraft.replica.cycle")


def _ignore(*_args: object) -> None:
    return None


class GroupCycle:
    """One group's core, WAL and state machine, and the cycle that joins them (module docstring)."""

    def __init__(self, *, name: str, node: RaftNode, wal: Wal, disk: Disk, state_machine: StateMachine,
                 marker: bytes | None, snapshot_every_entries: int | None,
                 on_snapshot: Callable[[int], None] = _ignore, on_applied: AppliedFn = _ignore,
                 on_started: Callable[[int], None] | None = None,
                 on_term: Callable[[int], None] | None = None) -> None:
        invariant(snapshot_every_entries is None or snapshot_every_entries >= 1, "snapshot interval >= 1")
        invariant(state_machine.applied_index == node.log.applied_index,
                  "the state machine starts where the core thinks it is (invariant 3)")
        self.name = name
        self.node = node
        self.wal = wal
        self.disk = disk
        self.state_machine = state_machine
        self.snapshot_every_entries = snapshot_every_entries
        self.on_snapshot = on_snapshot  # a leader's snapshot through this index was installed
        self.on_applied = on_applied  # these entries were applied, with these results
        self._marker = marker  # written with the first durable cycle, then None
        # Records the group as started, with the marker (`persist` step 3); None: no node record.
        self._on_started = on_started if marker is not None else None
        # Raises the record's vote-term ceiling above a cycle's hard state (`persist` step 3); None: none.
        self._on_term = on_term
        self._unsaved_hard_state: HardState | None = None
        self._snapshot_requested = False
        self._refused_at: int | None = None  # the applied index whose snapshot the machine refused
        self.snapshots_refused = 0

    def request_snapshot(self) -> None:
        self._snapshot_requested = True
        self._refused_at = None

    # --- One cycle ------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return self.node.has_ready() or self._compaction_index() is not None

    def take(self) -> Work:
        """Step 1: this cycle's work out of the core (and our own snapshot, when due)."""
        compaction = self._compaction()
        rd = self.node.ready() if self.node.has_ready() else None
        hard_state = None
        if rd is not None and rd.must_sync:
            hard_state = rd.hard_state if rd.hard_state is not None else self._unsaved_hard_state
            self._unsaved_hard_state = None
        elif rd is not None and rd.hard_state is not None:
            # Only the commit hint changed (must_sync covers every durable field). It is safe to lose, so
            # it rides along with the next fsync instead of costing one of its own.
            self._unsaved_hard_state = rd.hard_state
        marker = started = None
        if self._marker is not None and rd is not None and rd.must_sync:
            marker, self._marker = self._marker, None
            started, self._on_started = self._on_started, None
        if rd is not None and rd.snapshot is not None:
            prepare = getattr(self.state_machine, "prepare_install", None)
            if prepare is not None:
                prepare(rd.snapshot.meta)  # before the WAL drops the entries the snapshot covers
        cover_term = self._on_term if hard_state is not None else None
        return Work(ready=rd, hard_state=hard_state, compaction=compaction, marker=marker, started=started,
                    cover_term=cover_term)

    def send_first(self, work: Work, send: SendFn) -> None:
        """Step 2's first half: a leader's messages, before its persistence (invariant 2)."""
        if work.ready is not None and work.ready.send_first:
            self._send_all(work.ready, send)

    def send(self, work: Work, send: SendFn) -> None:
        """Step 3; call only once the work is durable (invariant 2). Messages `send_first` sent are not
        sent again."""
        if work.ready is not None and not work.ready.send_first:
            self._send_all(work.ready, send)

    def _send_all(self, ready: Ready, send: SendFn) -> None:
        name = self.name
        for message in ready.messages:
            # A full link drops the message; Raft's retransmission and heartbeats cover the loss.
            send(message.to_id, name, message)

    def finish(self, work: Work) -> None:
        """Step 4 and `advance()`. Exceptions from the state machine propagate: the caller stops the
        group (its core is left mid-Ready and is never used again)."""
        rd = work.ready
        if rd is not None:
            self._apply(rd)
            self.node.advance(rd)
            invariant(self.state_machine.applied_index == self.node.log.applied_index,
                      f"state machine ({self.state_machine.applied_index}) and core "
                      f"({self.node.log.applied_index}) agree on the applied index (invariant 3)")
        if work.compaction is not None:
            self.node.compact(work.compaction.meta.index, work.compaction.data)

    def run(self, send: SendFn, persisted: Callable[[Work], None] = _ignore) -> Work:
        """One whole cycle inline (steps 1–4), for a driver without worker threads. `persisted(work)` is
        called right after the fsync (an observer: the simulator's checkers)."""
        return self.run_taken(self.take(), send, persisted)

    def run_taken(self, work: Work, send: SendFn, persisted: Callable[[Work], None] = _ignore) -> Work:
        """Steps 2–4 of `run` for work already taken."""
        self.send_first(work, send)
        persist.write_work(self.wal, self.disk, work)
        persist.sync_work(self.wal, self.disk, work)
        persisted(work)
        self.send(work, send)
        self.finish(work)
        return work

    def _apply(self, rd: Ready) -> None:
        sm = self.state_machine
        if rd.snapshot is not None:
            meta = rd.snapshot.meta
            if meta.index > sm.applied_index:  # a machine with durable state may already hold it
                sm.restore(rd.snapshot.data)
                invariant(sm.applied_index == meta.index, f"restore() reached snapshot index {meta.index}")
            self.on_snapshot(meta.index)
        entries = rd.committed_entries
        start = 0
        while start < len(entries) and entries[start].index <= sm.applied_index:
            start += 1  # covered by the snapshot installed just above
        if start == len(entries):
            return
        if start:
            entries = entries[start:]
        invariant(entries[0].index == sm.applied_index + 1, f"apply continues at {sm.applied_index + 1}, "
                  f"not {entries[0].index}")
        results = sm.apply(entries)
        invariant(len(results) == len(entries), "apply() returns one result per entry")
        invariant(sm.applied_index == entries[-1].index, f"apply() reached index {entries[-1].index}")
        self.on_applied(entries, results)

    # --- Own snapshots --------------------------------------------------------------------------

    def _compaction_index(self) -> int | None:
        """The applied index to snapshot and compact through now, or None (not due, or not possible)."""
        node, log_ = self.node, self.node.log
        index = self.state_machine.applied_index
        if index <= log_.snapshot_index or index == self._refused_at:
            return None  # (refused: asked again once more is applied, or on request — invariant 5)
        every = self.snapshot_every_entries
        if not self._snapshot_requested and (every is None or index - log_.snapshot_index < every):
            return None
        # The core compacts only applied, durable entries whose membership changes it has applied.
        if index != log_.applied_index or index > log_.stable_index or index > node.conf_applied_index:
            return None
        if log_.term_at(index) is None or not self._machine_can_snapshot():
            return None
        return index

    def _machine_can_snapshot(self) -> bool:
        """A state machine may say it cannot snapshot now, through an optional `snapshot_ready()`: a
        stream replica under repair holds no state it could vouch for, and a `snapshot()` that raised
        would stop the group. Asked last, after the cheap checks, because it may look at storage."""
        ready = getattr(self.state_machine, "snapshot_ready", None)
        return ready is None or bool(ready())

    def _compaction(self) -> Snapshot | None:
        index = self._compaction_index()
        if index is None:
            return None
        term = self.node.log.term_at(index)
        invariant(term is not None, "a compaction point has a known term")
        meta = SnapshotMeta(index=index, term=term or 0, conf=membership.conf_at(self.node, index))
        try:
            data = self.state_machine.snapshot()
        except SnapshotUnavailable as error:  # invariant 5: skip it, the log keeps every entry
            self._refused_at = index
            self.snapshots_refused += 1
            log.warning("group %s: no snapshot at %d, compaction skipped: %s", self.name, index, error.description)
            return None
        self._snapshot_requested = False
        return Snapshot(meta=meta, data=data)
