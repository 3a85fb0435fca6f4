"""Persisting one cycle's work for a group: the worker-thread half of the Ready contract (layer L4).

Owns: `Work` (what one group must make durable in one cycle: its `Ready`, the hard state to save, an
own snapshot to save and compact to, the group marker) and `persist_jobs`, which a worker thread runs
for a batch of groups. Nothing here touches a `RaftNode`, a state machine or trio: the trio thread
builds a `Work`, a worker thread writes it, the trio thread then sends, applies and advances.

Order within one job, and why (DESIGN §2, §4):
  1. Writes to the page cache: our own snapshot and the log compaction it allows; the commit hint lowered
     first if it went down (the WAL refuses to truncate below its stored commit); the truncation (a
     leader's snapshot that conflicts with the log truncates it first); the leader's snapshot; the
     appended entries; the rewritten faulty entries.
  2. `Wal.sync()`: one fsync per touched segment, then the directory if a segment was created.
  3. The hard state (its own fsync) — after the entries, because its acked watermark vouches for them:
     saved first, a crash in between would leave a durable watermark above a shorter log, which the
     next restart must treat as lost data (repairing).
  4. The group marker, once, after the first durable cycle: from then on an empty WAL means lost data,
     not a new group (see `restore`).
All jobs of a batch do step 1 before any does step 2, so the fsyncs of a cycle come after all of its
writes: group commit, one fsync per touched file per cycle.

Invariants:
  1. A job runs on one worker thread while the trio thread leaves its `Wal` alone (the group is busy).
  2. An operating error (`OSError`, `CorruptRecord`, ...) is returned for its group alone and fails only
     that group; an `InvariantViolation` propagates (a bug: the process stops).

Imports: L0, L1 (`raft`, `disk`), L2 (`wal`), attrs. Reference: etcd-io/raft `Ready` handling; DESIGN §2.
"""

from __future__ import annotations

import json

import attrs

from jsraft.disk.base import Disk
from jsraft.errors import InvariantViolation
from jsraft.raft.ready import Ready, Snapshot
from jsraft.raft.types import HardState
from jsraft.wal import Wal
from jsraft.wal.repaired import put_repaired

# Written in a group's directory after its first durable cycle (see `restore`).
GROUP_MARKER = "group.json"


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

    @property
    def must_sync(self) -> bool:
        return self.ready is not None and self.ready.must_sync

    @property
    def needs_disk(self) -> bool:
        """Does this work touch storage at all? If not, the cycle skips the worker thread for it."""
        rd = self.ready
        writes = rd is not None and bool(rd.entries or rd.repaired_entries or rd.snapshot is not None
                                         or rd.truncate_from is not None)
        return (writes or self.must_sync or self.hard_state is not None or self.compaction is not None
                or self.marker is not None)


def marker_contents(group_name: str, node_id: str) -> bytes:
    return json.dumps({"group": group_name, "node": node_id}, sort_keys=True).encode()


@attrs.define
class Job:
    """A group's storage and work, handed to a worker thread."""

    wal: Wal
    disk: Disk
    work: Work
    error: Exception | None = None


def persist_jobs(jobs: list[Job]) -> list[Job]:
    """Run in a worker thread: step 1 for every job, then steps 2–4 (module docstring)."""
    for job in jobs:
        _guarded(job, write_work)
    for job in jobs:
        if job.error is None:
            _guarded(job, sync_work)
    return jobs


def _guarded(job: Job, step) -> None:
    try:
        step(job.wal, job.disk, job.work)
    except InvariantViolation:
        raise
    except Exception as error:  # an operating error fails this group only (invariant 2)
        job.error = error


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
    if hard_state is not None and hard_state.commit_index < wal.hard_state.commit_index:
        # The commit hint went down (a repairing replica found stale copies): record that before a
        # truncation below the old hint, which the WAL would otherwise refuse as a committed entry.
        wal.save_hard_state(attrs.evolve(wal.hard_state, commit_index=hard_state.commit_index))
    truncate_from = rd.truncate_from
    if rd.snapshot is not None:
        meta = rd.snapshot.meta
        known = wal.term(meta.index) if meta.index <= wal.last_index() else None
        if known is not None and known != meta.term:
            truncate_from = meta.index if truncate_from is None else min(truncate_from, meta.index)
    if truncate_from is not None and wal.first_index() <= truncate_from <= wal.last_index():
        wal.truncate_from(truncate_from)
    if rd.snapshot is not None:
        wal.save_snapshot(rd.snapshot.meta, rd.snapshot.data)
        wal.compact(rd.snapshot.meta.index)
    if rd.entries:
        wal.append(list(rd.entries))
    if rd.repaired_entries:
        repairing = hard_state.repairing if hard_state is not None else wal.hard_state.repairing
        put_repaired(wal, rd.repaired_entries, repairing=repairing)


def sync_work(wal: Wal, disk: Disk, work: Work) -> None:
    """Steps 2–4: the fsyncs, the hard state, the marker."""
    if work.must_sync:
        wal.sync()
    if work.hard_state is not None:
        wal.save_hard_state(work.hard_state)
    if work.marker is not None:
        disk.write_atomic(GROUP_MARKER, work.marker)
