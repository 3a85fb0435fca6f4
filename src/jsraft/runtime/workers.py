"""`WorkerThreads`: the node's persistent fsync threads, each fed by a queue (layer L4).

Owns: at most `threads_max` daemon threads, started on first use and stopped by `close()`, that run the
blocking half of the ready loop's cycles (`runtime.persist.persist_jobs`) for the trio thread; `run`,
the awaitable hand-off to one of them; `run_shares` (a batch split over several threads at once); and
`let_writers_run` (the ready loop's yield between a cycle's sends and its applies). `NodeRuntime` uses it (unless a test injects its own
`run_in_worker`) instead of `trio.to_thread.run_sync`, which per call takes a capacity-limiter permit (a
scheduling point), copies the context, renames the OS thread and wraps the result in an `outcome` before
it reports back — about a third of the hand-off's cost on a sync publish's path (bench/README.md, "The
sync publish path"). Here a call is one queue put, the thread's wake-up, and one `run_sync_soon` back.

Invariants:
  1. A thread runs one call at a time, and a call is given only to an idle thread: `run` is awaited by
     at most `threads_max` tasks at once (the ready loop's shares, `fsync_threads_max`), so a call never
     waits behind another one's fsync.
  2. `run` cannot be cancelled while its call runs (like `trio.to_thread.run_sync` without
     `abandon_on_cancel`): the caller resumes only when the call returned, so a thread never writes to a
     WAL whose group the trio thread has moved on from. A cancellation takes effect at the caller's next
     checkpoint.
  3. Whatever the call raises (`BaseException` included) is raised in the caller; the thread goes on.
  4. After `close()` no call is accepted (`RuntimeError`) and every thread ends once idle.
  5. `store_jobs()` is one process-wide `BackgroundJobs` thread for the stores' deferred block rolls
     (store/fs_append.py invariant 3): its jobs run one at a time in submission order, and `submit`
     returns the blocking wait the store calls before anything that vouches for the job's work. It is
     not a trio hand-off: the store is synchronous, and it waits (rarely: a snapshot, the next roll)
     only for a job that has not finished.

Imports: stdlib, trio. Reference: trio `to_thread.run_sync`, `lowlevel.TrioToken.run_sync_soon`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import trio

from jsraft.errors import invariant

_STOP = None  # put on a thread's queue: the thread ends


class _Thread:
    """One worker thread and its queue of (call, report) pairs."""

    def __init__(self, name: str) -> None:
        self.calls: queue.SimpleQueue[tuple[Callable[[], None], Callable[[], None]] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            item = self.calls.get()
            if item is _STOP:
                return
            call, report = item
            call()
            report()


class WorkerThreads:
    """Up to `threads_max` persistent threads (module docstring); use from one trio run."""

    def __init__(self, name: str, threads_max: int) -> None:
        invariant(threads_max >= 1, "at least one worker thread")
        self.name = name
        self.threads_max = threads_max
        self._idle: list[_Thread] = []
        self._started = 0
        self._closed = False

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on an idle worker thread; its result, or raise what it raised (invariants 2, 3)."""
        if self._closed:
            raise RuntimeError(f"worker threads {self.name!r} are closed")
        worker = self._take()
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        box: list[Any] = [None, None]  # [result, error]

        def call() -> None:
            try:
                box[0] = fn(*args)
            except BaseException as error:  # invariant 3: handed to the caller, the thread goes on
                box[1] = error

        def report() -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task)

        worker.calls.put((call, report))
        try:
            await trio.lowlevel.wait_task_rescheduled(lambda _raise_cancel: trio.lowlevel.Abort.FAILED)
        finally:
            self._give_back(worker)
        if box[1] is not None:
            error, box[1] = box[1], None
            raise error
        return box[0]

    def _take(self) -> _Thread:
        if self._idle:
            return self._idle.pop()
        invariant(self._started < self.threads_max, "a call is given only to an idle thread (invariant 1)")
        self._started += 1
        return _Thread(f"{self.name}-{self._started}")

    def _give_back(self, worker: _Thread) -> None:
        if self._closed:
            worker.calls.put(_STOP)
        else:
            self._idle.append(worker)

    def close(self) -> None:
        """Invariant 4: no further calls; idle threads end now, busy ones once their call returned."""
        self._closed = True
        idle, self._idle = self._idle, []
        for worker in idle:
            worker.calls.put(_STOP)


class BackgroundJobs:
    """One daemon thread running submitted jobs in order (invariant 5); thread-safe `submit`."""

    def __init__(self, name: str) -> None:
        self._thread = _Thread(name)

    def submit(self, job: Callable[[], None]) -> Callable[[], None]:
        """Queue `job`; return a call that waits for it and raises what it raised."""
        done = threading.Event()
        box: list[BaseException | None] = [None]

        def call() -> None:
            try:
                job()
            except BaseException as error:  # handed to the waiter, the thread goes on
                box[0] = error

        def wait() -> None:
            done.wait()
            if box[0] is not None:
                raise box[0]

        self._thread.calls.put((call, done.set))
        return wait


_store_jobs: BackgroundJobs | None = None
_store_jobs_lock = threading.Lock()


def store_jobs() -> BackgroundJobs:
    """The process's thread for the stores' deferred block rolls (invariant 5), started on first use."""
    global _store_jobs
    with _store_jobs_lock:
        if _store_jobs is None:
            _store_jobs = BackgroundJobs("jsraft-store-roll")
        return _store_jobs


async def run_shares(run: Callable[..., Any], fn: Callable[[list[Any]], Any], jobs: list[Any], shares_max: int) -> None:
    """`fn` over `jobs` through `run` (a worker hand-off), split into at most `shares_max` shares run at
    once (one thread each, invariant 1): the ready loop's group commit over many groups."""
    shares = min(shares_max, len(jobs))
    if shares == 1:
        await run(fn, jobs)
        return
    async with trio.open_nursery() as nursery:
        for share in range(shares):
            nursery.start_soon(run, fn, jobs[share::shares])


async def let_writers_run() -> None:
    """Two passes of the event loop, shielded from cancellation: a task woken before the call (a transport
    link's writer, woken by a send) has run its next step when this returns — it runs in the next pass,
    but trio orders each pass's tasks at random, hence two. Shielded: the ready loop calls it between a
    cycle's sends and its applies, and a cycle whose persistence completed is finished (shutdown's promise)."""
    for _ in range(2):
        await trio.lowlevel.cancel_shielded_checkpoint()
