"""Making one cycle's work durable: step 1 of the Ready contract, written once (layer L3½).

Owns: `Work` (what one group must make durable in one cycle: its `Ready`, the hard state to save, an
own snapshot to save and compact to, the group marker), `write_work`, `seal_work` and `sync_work`. Nothing
here touches a `RaftNode` or a state machine: `cycle.GroupCycle` builds a `Work`, these functions write it
(the production runtime runs them on a worker thread, the simulator inline), then the cycle sends, applies
and advances.

Order within one group's work, and why (DESIGN §2, §4):
  1. `write_work` — writes to the page cache: our own snapshot and the log compaction it allows; before a
     cut, the WAL's hard state told what the core knows (a commit hint that went down, a repairing flag
     that went up: the WAL refuses to truncate below its stored commit hint unless it knows the replica
     is repairing, DESIGN §4 "never truncate a committed entry"); the truncation (a leader's snapshot
     that conflicts with the log truncates it first); the leader's snapshot; on a new group's first cycle
     its term and vote (invariant 5); the appended entries; the
     rewritten faulty entries (`wal.repaired.put_repaired`).
  2. `sync_work` — the hard state is appended to the WAL *after* the entries (its acked watermark vouches
     for them), then `Wal.sync()`: one fsync of the segment makes entries and hard-state record durable
     together, and then a second fsync makes the same hard state durable in the WAL's witness file. A
     crash before the first returns tears or loses both, and recovery cuts the torn tail and falls back to
     the previous cycle's hard state, which vouches for nothing the torn cycle wrote; the witness, written
     only after the entries are durable, is what still tells when damage at rest takes the tail away
     (`wal.hardstate`: why one fsync cannot do both; DESIGN §2's "one fsync per Ready cycle" is not
     reached, issue #18). Term and vote are durable before any message is sent (the cycle sends only
     after `sync_work` returned).
  3. The group marker, once, after the first durable cycle: from then on an empty WAL means lost data,
     not a new group (`restore`). With it `Work.started`, once: the driver's call that puts the group on
     the node's record of started groups (`runtime.group_record` decision 5), which outlives the group's
     directory. Each needs only the fsync before it, not the other, so the driver may run the two side
     by side (`together`: the production runtime does, so their fsyncs share the file system's journal
     commits instead of queueing — a new stream's first cycle had them one after the other, four fsyncs
     in series; the simulator runs them one after the other, deterministically). A crash between them
     leaves the marker without the record (the next open records the group: it has durable state,
     `group_record` decision 4) or the record without the marker (the WAL holds the cycle, and the record
     says the group started: decision 1) — neither a new group. Both are durable before the cycle sends
     (the driver sends after `sync_work` returned, and `together` returns only once both did), so no
     vote or acknowledgement leaves a group that is not on the record, and a group cut off before this
     point has sent nothing a peer counts on: it may bootstrap again. (A leader's `send_first` cycle is
     never a group's first durable cycle when it has peers: it won an election, and its candidate cycle
     was durable.) `Work.started` gets the hard state's term, and on every later cycle with a hard state
     `Work.cover_term` does (run by `together` as well): the record's vote-term ceiling is raised above it
     before the cycle sends (`runtime.group_record` decision 6), so a lost group directory restores
     fenced through every term this member may have voted in. On the first durable cycle the witness
     write of step 2 runs in `together` too (invariant 4).

Why the hard state goes after the entries (issue #13): saved before them, a crash in between would leave a
durable watermark above a shorter log, a false "lost acknowledged data" finding (DESIGN §4, acked
watermark). In one segment write this is the record order; the old separate slot file made it the order
of two fsyncs. Before a cut both facts the WAL's guard reads are recorded, which covers both drivers'
cases (a repairing replica whose hint covers stale copies, and one that just became repairing). Both
guards only ever make the WAL more conservative: the flag is only raised here, the hint only lowered.

The simulator runs `seal_work` with `write_work` for a pipelining leader's cycle and `sync_work(sealed=True)`
when its fsync completes, so a crash in between finds every write of the cycle, hard state included, in
the page cache and none of it durable — a crash inside the cycle's fsync.

A runtime that batches groups does step 1 of every group before step 2 of any (group commit: one fsync
per touched file per cycle); within one group the order above always holds.

Invariants:
  1. Only one thread touches a group's `Wal` while its work is written (the cycle is busy until `finish`).
  2. `sync_work` runs only after `write_work` of the same `Work` returned.
  3. `sync_work` returns only once every step it ran returned (`together` included), and raises if any
     failed: the driver sends only after it returned.
  4. On a group's first durable cycle (the one with the marker) the WAL's witness write runs in
     `together` with the marker and the record, after the segment's fsync (`Wal.sync_log`): each of the
     three needs only the cycle's log records durable, not the others. A crash after the marker and
     before the witness leaves a witness older than the log's newest hard-state record, which recovery
     uses (`wal.recovery` decision 2), as after any crash between a cycle's two fsyncs; a marker never
     stands over a log that lacks the cycle, since the log was durable first. The witness is the first
     step, so `one_after_another` (the simulator) keeps the order of a plain `Wal.sync` then step 3.
     Later cycles keep `Wal.sync` whole before `together`: their step 3 (`cover_term`) is usually no
     write at all, and a side-by-side run would cost a thread hand-off on every cycle.
  5. On any cycle with entries whose hard state raises the term above the stored one (a new group: from
     0 to its bootstrap term, or to its first election's; a follower of a new leader; a leader's first
     cycle of its term), step 1 writes a hard-state record with the new term and vote (and the stored
     watermark and commit hint, so it vouches for no entry) before the entries. A crash inside the
     cycle's fsync may keep a prefix of the appended bytes (the first segment of a new stream is made
     with its directory, `stream_format` invariant 8, so even a first cycle's file survives), and entries
     of a term no surviving hard state names would read as "term raised (seen in the log)", a damage
     finding that makes the replica repairing (an R1 group would then halt) after an ordinary crash.
     Term and vote in the log before they are needed only adds what a record after the entries would
     have said; the watermark still follows the entries. It costs one small record per term change.

Imports: L0, L1 (`raft`, `disk`), L2 (`wal`), attrs. Never trio. Reference: etcd-io/raft `Ready`
handling; DESIGN §2, §4.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence

import attrs

from jsraft.disk.base import Disk
from jsraft.raft.ready import Ready, Snapshot
from jsraft.raft.types import HardState
from jsraft.wal import Wal
from jsraft.wal.repaired import put_repaired

# Written in a group's directory after its first durable cycle (see `restore`).
GROUP_MARKER = "group.json"

Steps = Sequence[Callable[[], None]]


def one_after_another(steps: Steps) -> None:
    """The default way to run step 3's writes: in order, on the calling thread (deterministic)."""
    for step in steps:
        step()


@attrs.frozen(kw_only=True)
class Work:
    """One group's share of a cycle. One per group per cycle, so attrs' cost does not matter here."""

    ready: Ready | None
    # The hard state to save with this cycle's fsync: the Ready's, or a commit hint deferred earlier.
    hard_state: HardState | None = None
    # Our own state machine snapshot, to save before the Ready and compact the WAL through.
    compaction: Snapshot | None = None
    # Contents of `GROUP_MARKER`, on the group's first durable cycle.
    marker: bytes | None = None
    # With the marker: records the group as started on the node's record (step 3), before any send; told
    # the hard state's term (the record's vote-term ceiling covers it, `runtime.group_record` decision 6).
    started: Callable[[int], None] | None = None
    # With a hard state on later cycles: the record's ceiling covers its term before any send (step 3).
    cover_term: Callable[[int], None] | None = None

    @property
    def must_sync(self) -> bool:
        return self.ready is not None and self.ready.must_sync

    @property
    def needs_disk(self) -> bool:
        """Does this work touch storage at all? If not, a runtime may skip the worker thread for it."""
        rd = self.ready
        writes = rd is not None and bool(rd.entries or rd.repaired_entries or rd.snapshot is not None
                                         or rd.truncate_from is not None)
        return (writes or self.must_sync or self.hard_state is not None or self.compaction is not None
                or self.marker is not None)


def marker_contents(group_name: str, node_id: str) -> bytes:
    return json.dumps({"group": group_name, "node": node_id}, sort_keys=True).encode()


def write_work(wal: Wal, disk: Disk, work: Work) -> None:
    """Step 1: every write of `work` to the page cache (and the rare ones that are durable at once)."""
    if work.compaction is not None:
        meta = work.compaction.meta
        wal.save_snapshot(meta, work.compaction.data)
        wal.compact(meta.index)
    rd = work.ready
    if rd is None:
        return
    hard_state = work.hard_state
    repairing = hard_state.repairing if hard_state is not None else wal.hard_state.repairing
    truncate_from = rd.truncate_from
    if rd.snapshot is not None:
        meta = rd.snapshot.meta
        known = wal.term(meta.index) if meta.index <= wal.last_index() else None
        if known is not None and known != meta.term:
            truncate_from = meta.index if truncate_from is None else min(truncate_from, meta.index)
    if truncate_from is not None and wal.first_index() <= truncate_from <= wal.last_index():
        _before_cut(wal, hard_state)
        wal.truncate_from(truncate_from)
    if rd.snapshot is not None:
        wal.save_snapshot(rd.snapshot.meta, rd.snapshot.data)
        wal.compact(rd.snapshot.meta.index)
    if rd.entries:
        if hard_state is not None and hard_state.current_term > wal.hard_state.current_term:
            _term_first(wal, hard_state)
        wal.append(list(rd.entries))
    if rd.repaired_entries:
        put_repaired(wal, rd.repaired_entries, repairing=repairing)


def _before_cut(wal: Wal, hard_state: HardState | None) -> None:
    """Tell the WAL, before a cut, the two facts its committed-entry guard reads (module docstring, 1)."""
    if hard_state is None:
        return
    stored = wal.hard_state
    commit_index = min(stored.commit_index, hard_state.commit_index)
    repairing = stored.repairing or hard_state.repairing
    if commit_index != stored.commit_index or repairing != stored.repairing:
        wal.save_hard_state(attrs.evolve(stored, commit_index=commit_index, repairing=repairing))


def _term_first(wal: Wal, hard_state: HardState) -> None:
    """Invariant 5: a term-raising cycle's term and vote, in the log before its entries, vouching for
    nothing new (the stored watermark and commit hint)."""
    stored = wal.hard_state
    wal.save_hard_state(attrs.evolve(stored, current_term=hard_state.current_term, voted_for=hard_state.voted_for,
                                     vote_fence_term=max(stored.vote_fence_term, hard_state.vote_fence_term),
                                     repairing=stored.repairing or hard_state.repairing))


def seal_work(wal: Wal, work: Work) -> None:
    """Step 2's write: the hard state after the entries, to the page cache. With `write_work` it is every
    write the cycle's fsync must cover; `sync_work` does it first unless told it was done (`sealed`)."""
    if work.hard_state is not None:
        wal.save_hard_state(work.hard_state)


def sync_work(wal: Wal, disk: Disk, work: Work, *, sealed: bool = False,
              together: Callable[[Steps], None] = one_after_another) -> None:
    """Steps 2–3: the hard state after the entries (unless `seal_work` ran), the fsyncs, then the marker
    and the record of started groups, run by `together` (module docstring, step 3; invariant 3)."""
    if not sealed:
        seal_work(wal, work)
    syncs = work.must_sync or work.hard_state is not None
    steps: list[Callable[[], None]] = []
    if work.marker is not None:
        steps.append(functools.partial(disk.write_atomic, GROUP_MARKER, work.marker))
    term = vote_term(work.hard_state)
    if work.started is not None:
        steps.append(functools.partial(work.started, term))
    elif work.cover_term is not None and term:
        steps.append(functools.partial(work.cover_term, term))
    if syncs and work.marker is not None:
        # Step 3 on the first durable cycle: the witness beside the marker and the record (invariant 4).
        wal.sync_log()
        together([wal.sync_witness, *steps])
        return
    if syncs:
        wal.sync()
    if steps:
        together(steps)


def vote_term(hard_state: HardState | None) -> int:
    """The highest term `hard_state` may hold a vote in (or fences): what the record's ceiling covers."""
    return 0 if hard_state is None else max(hard_state.current_term, hard_state.vote_fence_term)
