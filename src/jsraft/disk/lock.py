"""The store directory lock: one process at a time on a node's data (layer L1).

Owns: `<store_dir>/LOCK`, an exclusive `flock` taken before a node reads or writes anything in its store
directory and held for the life of the node, and the probe that read-only tools (offline readers) use to
refuse a directory a running node holds. Two processes appending to the same WAL and message blocks
interleave records and lose acknowledged messages without any CRC failing, so this is refused at once,
before anything is written.

Invariants:
  1. `acquire_store_lock` either returns holding an exclusive lock on the directory or raises
     `StoreLocked` naming the directory and the holder's pid; it writes nothing but the LOCK file, and
     writes that only once the lock is held (a refused opener never touches the holder's pid).
  2. The lock is `flock(2)`, tied to the open file description: a second opener in the same process is
     refused like one in another process, and the kernel drops the lock when its holder dies, so a crash
     never leaves a stale lock for an operator to remove.
  3. The LOCK file is never deleted: unlinking it while another opener waits on the old inode would let
     two processes hold "the" lock on two different files.

Imports: stdlib, L0. Reference: DESIGN.md §3 (on-disk layout).
"""

from __future__ import annotations

import errno
import fcntl
import os

from jsraft.errors import StoreLocked

LOCK_FILE = "LOCK"


def _holder(fd: int) -> str:
    """The pid the holder wrote into the LOCK file, for the refusal message ("unknown" if unreadable)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def _refusal(store_dir: str, fd: int) -> StoreLocked:
    return StoreLocked(f"store directory {os.path.abspath(store_dir)} is in use by another process "
                       f"(pid {_holder(fd)}); stop that process first")


class StoreLock:
    """An exclusive lock on one store directory, held until `release()` (or the process ends)."""

    def __init__(self, store_dir: str, fd: int) -> None:
        self.store_dir = store_dir
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock; safe to call more than once."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def acquire_store_lock(store_dir: str) -> StoreLock:
    """Lock `store_dir` (created if missing) for this process, or raise `StoreLocked` (invariant 1)."""
    os.makedirs(store_dir, exist_ok=True)
    fd = os.open(os.path.join(store_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        refusal = _refusal(store_dir, fd)
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise refusal from None
        raise
    # Only the holder writes its pid (invariant 1). Not fsynced: the pid is for a human reading a
    # refusal while this process lives, and means nothing after a crash.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return StoreLock(store_dir, fd)


def ensure_not_locked(store_dir: str) -> None:
    """Raise `StoreLocked` when a live process holds `store_dir`; return when nobody does (a directory
    without a LOCK file was never opened by a node of this version, or is not a node directory)."""
    path = os.path.join(store_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _refusal(store_dir, fd) from None
            raise
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
