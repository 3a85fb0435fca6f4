"""Running a cycle's persistence for a batch of groups on a worker thread, and opening a group's
storage there (layer L4).

Owns: `Job` (a group's storage and its `Work`, handed to a worker thread), `CyclePersister` (the ready
loop's call: a cycle's jobs inline on the trio thread when the node has nothing else to do, else
`persist_batch`, split over the worker threads), and `persist_jobs`, which a worker thread (or, inline,
the trio thread) runs for a batch of groups: step 1 (`replica.persist.write_work`) of every job, then steps
2–3 (`replica.persist.sync_work`) of every job that did not fail — group commit, so the fsyncs of a cycle
come after all of its writes, one fsync per touched file per cycle. What a step writes, and in which
order, is `replica.persist`'s (written once, shared with the simulator); this module only batches it.

Invariants:
  1. A job runs on one thread — a worker thread while the trio thread leaves its `Wal` alone (the group
     is busy), or the trio thread itself, inline (invariant 6).
  2. An operating error (`OSError`, `CorruptRecord`, ...) is returned for its group alone and fails only
     that group; an `InvariantViolation` propagates (a bug: the process stops).
  3. The steps are looked up on `replica.persist` at every call (a chaos mutant patches them there).
  4. `open_storage` asks the node's `GroupRecord` whenever a group's marker is missing: a lost group
     directory took the marker with it, and only the record tells that from a group never started. It
     records a group with durable state at once; one with nothing durable is recorded by the cycle after
     its first durable cycle (`started_fn`, `group_record` decisions 4, 5). It also covers the recovered
     hard state's term with the record's vote-term ceiling before the group opens (`group_record`
     decision 6: a crash between a WAL fsync and the ceiling's write, or a version-1 record). If the
     record fails, the WAL it opened is closed before the error goes on: a caller gets nothing to close.
  5. Step 3's writes of a group's first durable cycle — its WAL's witness, its marker and its entry on
     the node's record of started groups — run side by side (`side_by_side`, `replica.persist` step 3
     and invariant 4), the witness on the job's thread and the others on kept threads (no thread is
     started per group); the job goes on only once all returned, and fails if any failed.
  6. `CyclePersister` runs a cycle inline only when it is one group's with at most `INLINE_ENTRIES_MAX`
     entries (a one-at-a-time workload's), no other task is runnable and no thread's report is queued
     (nothing would run during the fsync, so the trio thread loses nothing by blocking and saves the two
     thread wake-ups; a leader that sent its AppendEntries first has woken the transport's writers, so
     it is never inline: its followers' acknowledgements are stepped during its fsync), and only if the
     ready loop yielded since the last inline cycle (`yielded()`). The cycle right after an inline one
     (R1: the apply of the entry its fsync committed) skips the yield an empty persistence makes; every
     other cycle yields, so sockets are polled between inline fsyncs however busy the node is. The
     writes, fsyncs and sends are the same, in the same order, on either path.

Imports: L0, L1 (`disk`), L2 (`wal`), L3½ (`replica.persist`), sibling `workers`, attrs, trio.
Reference: DESIGN §2, §12; bench/README.md "The sync publish path" (what the inline path saves).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from jsraft.disk.base import Disk
from jsraft.disk.os_disk import run_concurrently
from jsraft.errors import InvariantViolation
from jsraft.replica import persist
from jsraft.replica.persist import GROUP_MARKER, Work
from jsraft.replica.restore import recovered_empty
from jsraft.runtime.group_record import GroupRecord
from jsraft.runtime.workers import let_writers_run, run_shares
from jsraft.wal import Recovered, Wal


@attrs.define
class Job:
    """A group's storage and work, handed to a worker thread."""

    wal: Wal
    disk: Disk
    work: Work
    error: Exception | None = None


async def persist_batch(run: Callable[..., Awaitable[Any]], batch: list[tuple[Wal, Disk, Work]],
                        shares_max: int) -> list[Exception | None]:
    """Steps 1–2 of a cycle for `batch` on worker threads (`run`, in at most `shares_max` shares at once);
    one error (or None) per entry of the batch."""
    if not batch:
        await trio.lowlevel.checkpoint()  # nothing to write: still let proposers and peers run
        return []
    jobs = [Job(wal, disk, work) for wal, disk, work in batch]
    await run_shares(run, persist_jobs, jobs, shares_max)
    return [job.error for job in jobs]


# The most entries a cycle persisted inline may carry (`_one_at_a_time`).
INLINE_ENTRIES_MAX = 1


class CyclePersister:
    """Runs the persistence of the ready loop's cycles inline or on worker threads (invariant 6)."""

    def __init__(self, run: Callable[..., Awaitable[Any]], shares_max: int, *, inline: bool) -> None:
        self._run, self._shares_max, self._inline = run, shares_max, inline
        self._unyielded = 0  # since the ready loop last yielded: 1 after an inline cycle, 2 after its apply
        self.inline_cycles = 0  # how many ran inline (for tests and benchmarks)

    def yielded(self) -> None:
        """The ready loop passed a checkpoint: sockets and other tasks had their turn."""
        self._unyielded = 0

    async def let_writers_run(self) -> None:
        """`workers.let_writers_run`, which yields (the ready loop's step 3 on a follower)."""
        await let_writers_run()
        self._unyielded = 0

    async def persist(self, batch: list[tuple[Wal, Disk, Work]]) -> list[Exception | None]:
        """Steps 1–2 of a cycle for `batch`; one error (or None) per entry of the batch."""
        if not batch and self._unyielded == 1:  # the cycle after an inline one, applying what it made durable
            self._unyielded = 2
            return []
        if self._inline and self._unyielded == 0 and len(batch) == 1 and _one_at_a_time(batch[0][2]) \
                and _nothing_else_to_run():
            self._unyielded = 1
            self.inline_cycles += 1
            jobs = persist_jobs([Job(wal, disk, work) for wal, disk, work in batch])
            return [job.error for job in jobs]
        self._unyielded = 0
        return await persist_batch(self._run, batch, self._shares_max)  # yields, even with nothing to write


def _one_at_a_time(work: Work) -> bool:
    """Whether `work` looks like a one-at-a-time workload's (at most `INLINE_ENTRIES_MAX` entries). A
    streaming one's carries more, and its node is then rarely idle for long: bytes keep arriving, which no
    task is runnable for yet, and an inline fsync would leave them unread (smaller batches, more cycles)."""
    rd = work.ready
    return rd is None or len(rd.entries) <= INLINE_ENTRIES_MAX


def _nothing_else_to_run() -> bool:
    stats = trio.lowlevel.current_statistics()
    return stats.tasks_runnable == 0 and stats.run_sync_soon_queue_size == 0


def side_by_side(steps: persist.Steps) -> None:
    """Run `steps` concurrently — the first on this thread, each other one on a kept thread (a group's
    first cycle has three: its witness, its marker and its record, once in the group's life; a new
    stream's `stream_format.format_and_open` two: its opens and the `streams/` fsync) — and return
    once every one returned (invariant 5); raise the first error, an `InvariantViolation` before any
    other. The kept threads are `disk.os_disk.run_concurrently`'s: they only run such steps and
    `sync_tree`'s fsyncs, none of which waits for another, so a full set only delays them."""
    errors: list[BaseException] = []

    def run(step: Callable[[], None]) -> None:
        try:
            step()
        except BaseException as error:  # re-raised on the calling thread below, once every step ended
            errors.append(error)
    run_concurrently([functools.partial(run, step) for step in steps])
    if errors:
        raise next((error for error in errors if isinstance(error, InvariantViolation)), errors[0])


def _sync_work(wal: Wal, disk: Disk, work: Work) -> None:
    # Looked up on `replica.persist` at every call (invariant 3).
    persist.sync_work(wal, disk, work, together=side_by_side)


def persist_jobs(jobs: list[Job]) -> list[Job]:
    """Run in a worker thread: step 1 for every job, then steps 2–3 (`replica.persist`)."""
    for job in jobs:
        _guarded(job, persist.write_work)
    for job in jobs:
        if job.error is None:
            _guarded(job, _sync_work)
    return jobs


def sends_after_persist(work: Work) -> bool:
    """Whether the cycle's `send_messages` sends anything for `work` (a leader's went before persisting)."""
    rd = work.ready
    return rd is not None and not rd.send_first and bool(rd.messages)


def _guarded(job: Job, step) -> None:
    try:
        step(job.wal, job.disk, job.work)
    except InvariantViolation:
        raise
    except Exception as error:  # an operating error fails this group only (invariant 2)
        job.error = error


def open_storage(disk: Disk, name: str, segment_bytes: int, record: GroupRecord | None,
                 assigned_index: int | None) -> tuple[Wal, Recovered, bool]:
    """Run in a worker thread: recover group `name`'s WAL under `disk`; also whether the group was
    durably started here (`restore`'s `formatted`: its marker, or the node's record, invariant 4)."""
    wal, recovered = Wal.open(disk, segment_bytes=segment_bytes)
    try:
        formatted = disk.exists(GROUP_MARKER)
        if record is not None:
            formatted = record.on_open(name, formatted=formatted, empty=recovered_empty(recovered),
                                       assigned_index=assigned_index)
            record.cover_term(name, persist.vote_term(recovered.hard_state))
    except BaseException:  # the record's write failed (out of descriptors, say): nothing stays open
        wal.close()
        raise
    return wal, recovered, formatted


def started_fn(record: GroupRecord | None, name: str) -> Callable[[int], None] | None:
    """What the cycle calls after group `name`'s first durable cycle, before it sends (invariant 4)."""
    if record is None:
        return None
    return functools.partial(record.started, name)


def ceiling_fn(record: GroupRecord | None, name: str) -> Callable[[int], None] | None:
    """What the cycle calls with a durable hard state's term, before it sends (`group_record` decision 6)."""
    if record is None:
        return None
    return functools.partial(record.cover_term, name)


def vote_ceiling(record: GroupRecord | None, name: str) -> int:
    """Group `name`'s recorded vote-term ceiling, for a restore that lost its storage (0: none)."""
    return 0 if record is None else record.vote_ceiling(name)
