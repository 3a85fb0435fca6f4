"""`OsDisk`: the real file system, with fsync of files and directories.

`unsynced()` gives a view whose file and directory syncs are skipped, for formatting a new directory tree
that one `sync_tree()` then makes durable: one fsync per file and per directory, run concurrently so the
journal commits them together, instead of one after another for every file written and every name created (most of a stream create's fsyncs were directory syncs after each
step). Nothing written through such a view is durable before that `sync_tree()`.

When shadow mode is on (constructor argument, or `JSRAFT_TEST_SHADOW_DISK=1` in the environment), every
namespace change, write and fsync is also reported to a `ShadowTracker`, which records what is durable so
that `power_cut()` can later roll the directory back to it. Shadow mode is for tests only; it costs a
copy of each synced byte range.
"""

from __future__ import annotations

import functools
import os
import queue
import shutil
import threading
from collections.abc import Callable

from jsraft.disk.base import IOV_PARTS_MAX, check_relative
from jsraft.errors import invariant
from jsraft.disk.shadow import ShadowTracker, tracker_for

SYNC_THREADS_MAX = 16  # `sync_tree`'s concurrent fsyncs
_SYNC_JOBS: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_SYNC_THREADS: list[threading.Thread] = []  # kept for the process's life, started as many as were needed
_SYNC_THREADS_LOCK = threading.Lock()


def _sync_thread() -> None:
    while True:
        _SYNC_JOBS.get()()  # a job never raises (`run_concurrently` keeps its error)


def run_concurrently(calls: list[Callable[[], None]]) -> None:
    """Run `calls` at once — the first on this thread, the others on the process's kept sync threads (at
    most `SYNC_THREADS_MAX`; more wait their turn) — and return once every one returned; raise the error
    of the first that failed, in the list's order. One lock per run, no future per call: a new stream's
    tree is eleven fsyncs, and a thread pool's futures cost it more CPU than the fsyncs' own Python. The
    kept threads are shared (`runtime.persist.side_by_side` runs its steps here too): a call run this way
    must never wait for another one, or a full set of threads could wait for calls queued behind them."""
    if not calls:
        return
    errors: list[BaseException | None] = [None] * len(calls)
    left = [len(calls) - 1]
    count_lock, all_done = threading.Lock(), threading.Lock()
    all_done.acquire()

    def call(i: int) -> None:
        try:
            calls[i]()
        except BaseException as error:  # raised on the calling thread, once every call returned
            errors[i] = error

    def other(i: int) -> None:
        call(i)
        with count_lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            all_done.release()

    with _SYNC_THREADS_LOCK:
        while len(_SYNC_THREADS) < min(len(calls) - 1, SYNC_THREADS_MAX):
            thread = threading.Thread(target=_sync_thread, name=f"jsraft-sync-tree_{len(_SYNC_THREADS)}", daemon=True)
            thread.start()
            _SYNC_THREADS.append(thread)
    for i in range(1, len(calls)):
        _SYNC_JOBS.put(functools.partial(other, i))
    call(0)
    if len(calls) > 1:
        all_done.acquire()
    for error in errors:
        if error is not None:
            raise error


def _shadow_from_env() -> bool:
    return os.environ.get("JSRAFT_TEST_SHADOW_DISK", "") not in ("", "0")


class OsFile:
    """An open file: positional reads and writes on a raw descriptor, size tracked in memory."""

    __slots__ = ("path", "_fd", "_size", "_shadow", "_number", "_unsynced")

    def __init__(self, full_path: str, number: int | None, fd: int, shadow: ShadowTracker | None,
                 unsynced: bool = False) -> None:
        self.path = full_path
        # The shadow tracker's number for this file, fixed at open: like a descriptor, the handle
        # keeps writing to the same file when its name is renamed or removed.
        self._number = number
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._shadow = shadow
        self._unsynced = unsynced  # opened through an `unsynced()` view: its `sync_tree()` syncs it

    def size(self) -> int:
        return self._size

    def pread(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def pwrite(self, offset: int, data: bytes) -> None:
        written = os.pwrite(self._fd, data, offset)
        while written < len(data):  # a short write is legal; finish it rather than lose the tail
            written += os.pwrite(self._fd, memoryview(data)[written:], offset + written)
        self._size = max(self._size, offset + len(data))
        if self._shadow is not None:
            self._shadow.on_write(self._number, offset, offset + len(data))

    def append(self, data: bytes) -> int:
        offset = self._size
        self.pwrite(offset, data)
        return offset

    def append_parts(self, parts: list, length: int) -> int:
        """`append(b"".join(parts))` (`length`: their total) without the join: one vectored write (at most
        `IOV_PARTS_MAX` parts)."""
        invariant(len(parts) <= IOV_PARTS_MAX, "a vectored write takes at most IOV_PARTS_MAX parts")
        offset = self._size
        written = os.pwritev(self._fd, parts, offset)
        if written < length:  # a short write is legal; finish it rather than lose the tail
            self.pwrite(offset + written, memoryview(b"".join(parts))[written:])
        self._size = max(self._size, offset + length)
        if self._shadow is not None:
            self._shadow.on_write(self._number, offset, offset + length)
        return offset

    def truncate(self, length: int) -> None:
        os.ftruncate(self._fd, length)
        self._size = length
        if self._shadow is not None:
            self._shadow.on_write(self._number, length, length)

    def sync(self) -> None:
        if self._unsynced:
            return
        os.fsync(self._fd)
        if self._shadow is not None:
            # The file's size now, not this handle's: the fsync covers what every descriptor wrote (a block
            # roll's job syncs the new block through its own handle while the store appends through another).
            self._shadow.on_sync(self._number, self._fd, os.fstat(self._fd).st_size)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsDisk:
    """The real disk under `root`. `sub()` views a subdirectory and shares the shadow tracker."""

    def __init__(self, root: str, *, shadow: bool | None = None, read_only: bool = False) -> None:
        self.root = os.path.abspath(root)
        self._top = self.root
        self._prefix = ""
        self.read_only = read_only
        self._unsynced = False
        if read_only:
            if not os.path.isdir(self.root):
                raise FileNotFoundError(f"no such directory: {self.root}")
            self._shadow: ShadowTracker | None = None
            return
        os.makedirs(self.root, exist_ok=True)
        enabled = _shadow_from_env() if shadow is None else shadow
        self._shadow: ShadowTracker | None = tracker_for(self.root) if enabled else None

    @property
    def shadow(self) -> ShadowTracker | None:
        return self._shadow

    def _rel(self, path: str) -> str:
        """`path` relative to the top-level root (what the shadow tracker keys on)."""
        rel = check_relative(path)
        if not self._prefix:
            return rel
        return f"{self._prefix}/{rel}" if rel else self._prefix

    def _full(self, path: str) -> str:
        rel = self._rel(path)
        # `_top` is absolute and normal, `rel` relative and normal: `os.path.join` without its checks.
        return (f"{self._top}/{rel}" if self._top != "/" else f"/{rel}") if rel else self._top

    def sub(self, path: str) -> "OsDisk":
        if not self.read_only:
            self.makedirs(path)
        return self._view(path, self._unsynced)

    def _view(self, path: str, unsynced: bool) -> "OsDisk":
        view = object.__new__(OsDisk)
        view._top = self._top
        view._prefix = self._rel(path)
        view.root = self._full(path)
        view._shadow = self._shadow
        view.read_only = self.read_only
        view._unsynced = unsynced
        return view

    def unsynced(self) -> "OsDisk":
        """This disk with every file and directory sync skipped, its `sub()` views too (module docstring):
        for a tree that `sync_tree` makes durable before anything depends on it."""
        return self._view("", True)

    def sync_tree(self, path: str) -> None:
        """Make everything under `path` durable: an fsync of each file and each directory, `path` included
        (the name of `path` in its parent is the caller's to sync). The fsyncs run concurrently: the file
        system's journal then commits them together (on ext4, 5–9× faster than one after another on a
        loaded disk); this returns once every one returned, and raises the first that failed."""
        jobs: list[Callable[[], None]] = []
        for directory, _, files in os.walk(self._full(path)):
            jobs += [functools.partial(self._fsync_path, f"{directory}/{name}", False) for name in files]
            jobs.append(functools.partial(self._fsync_path, directory, True))
        run_concurrently(jobs)

    def _fsync_path(self, full: str, is_dir: bool) -> None:
        if is_dir:
            self._fsync_dir(full)
            return
        fd = os.open(full, os.O_RDONLY)
        try:
            os.fsync(fd)
            if self._shadow is not None:
                number = self._shadow.number_of(os.path.relpath(full, self._top))
                self._shadow.on_sync(number, fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    def _fsync_dir(self, full: str) -> None:
        fd = os.open(full, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if self._shadow is not None:
            rel = os.path.relpath(full, self._top)
            self._shadow.on_sync_dir("" if rel == "." else rel)

    def open(self, path: str, *, create: bool = False) -> OsFile:
        full = self._full(path)
        existed = self._shadow is not None and os.path.exists(full)  # only the shadow tracker asks
        if self.read_only:
            if create:
                raise PermissionError(f"read-only disk: cannot create {path}")
            return OsFile(full, None, os.open(full, os.O_RDONLY), None)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(full, flags, 0o644)
        number = None
        if self._shadow is not None:
            rel = self._rel(path)
            number = self._shadow.number_of(rel) if existed else self._shadow.on_create(rel)
        return OsFile(full, number, fd, self._shadow, self._unsynced)

    def read_file(self, path: str) -> bytes:
        with open(self._full(path), "rb") as handle:
            return handle.read()

    def write_atomic(self, path: str, data: bytes) -> None:
        rel = check_relative(path)
        parent = os.path.dirname(rel)
        temp = f"{rel}.tmp"
        handle = self.open(temp, create=True)
        try:
            handle.truncate(0)
            handle.pwrite(0, data)
            handle.sync()
        finally:
            handle.close()
        self.rename(temp, rel)
        self.sync_dir(parent)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._full(path))

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self._full(path))

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self._full(path)))

    def makedirs(self, path: str) -> None:
        rel = check_relative(path)
        if not rel or self.is_dir(rel):
            return
        parent = os.path.dirname(rel)
        self.makedirs(parent)
        os.mkdir(self._full(rel))
        if self._shadow is not None:
            self._shadow.on_mkdir(self._rel(rel))
        # The new directory's name lives in its parent: it is durable only once the parent is synced.
        self.sync_dir(parent)

    def remove(self, path: str) -> None:
        os.remove(self._full(path))
        if self._shadow is not None:
            self._shadow.on_remove(self._rel(path))

    def remove_tree(self, path: str) -> None:
        full = self._full(path)
        if os.path.isdir(full):
            shutil.rmtree(full)
        elif os.path.exists(full):
            os.remove(full)
        if self._shadow is not None:
            self._shadow.on_remove(self._rel(path))

    def rename(self, src: str, dst: str) -> None:
        os.replace(self._full(src), self._full(dst))
        if self._shadow is not None:
            self._shadow.on_rename(self._rel(src), self._rel(dst))

    def sync_dir(self, path: str) -> None:
        if not self._unsynced:
            self._fsync_dir(self._full(path))

    def file_size(self, path: str) -> int:
        return os.path.getsize(self._full(path))
