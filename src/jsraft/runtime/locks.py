"""`FastLock`: a trio lock whose free acquire is not a scheduling point (layer L4).

Owns: `FastLock`, used where a lock sits on every publish's path and is almost always free (a stream
replica's proposal lock, `server.groups.stream_replica` invariant 2). `trio.Lock.acquire` yields to the
scheduler even when the lock is free — a pass of the event loop (an epoll poll and a run-queue round) per
publish with nothing to wait for (bench/README.md, "The sync publish path"). Here a free lock is taken
at once; a held one is waited for in trio's own fair queue.

Invariants:
  1. Mutual exclusion and fairness are `trio.Lock`'s: this only skips the scheduling point of a free
     acquire (which trio's own `acquire_nowait` does too). A task that acquires a free lock is therefore
     not a checkpoint there: a loop that must yield checkpoints elsewhere.

Imports: trio. Reference: trio `Lock`.
"""

from __future__ import annotations

from types import TracebackType

import trio


class FastLock:
    """A `trio.Lock` for `async with` (module docstring)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = trio.Lock()

    def locked(self) -> bool:
        return self._lock.locked()

    async def acquire(self) -> None:
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()

    def release(self) -> None:
        self._lock.release()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._lock.release()
