"""`OsDisk`'s cheap paths: a path that is normal already, and `sync_tree`'s concurrent fsyncs.

Method: `check_relative` is compared with its definition (`posixpath.normpath` plus the root rules) over
every path of up to four components drawn from names that need no change and ones that do (`.`, `..`,
empty, dotted names), with and without a leading or trailing slash: the fast path may only skip work, never
change an answer. `run_concurrently` (what `sync_tree` runs its fsyncs with) is checked with real threads:
its calls run at the same time (a barrier that every call must reach, with a deadline: one after another
it breaks), more calls than kept threads all run, and an error is raised only once every call returned —
the first in the list's order; runs from several threads at once all end. A tree written through an
unsynced view survives a shadow-mode power cut once `sync_tree` ran, and only then.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import threading
from pathlib import Path

import pytest

from jsraft.disk import OsDisk, check_relative, power_cut
from jsraft.disk.os_disk import SYNC_THREADS_MAX, run_concurrently


def _by_definition(path: str) -> str:
    if path.startswith("/"):
        raise ValueError(path)
    normal = posixpath.normpath(path) if path else "."
    if normal == ".." or normal.startswith("../"):
        raise ValueError(path)
    return "" if normal == "." else normal


def test_check_relative_answers_as_its_definition_for_every_short_path() -> None:
    names = ["a", "b.c", "x.", ".x", ".", "..", ""]
    checked = 0
    for count in range(1, 5):
        for parts in itertools.product(names, repeat=count):
            for lead, trail in itertools.product(("", "/"), repeat=2):
                path = lead + "/".join(parts) + trail
                try:
                    expected: str | type[ValueError] = _by_definition(path)
                except ValueError:
                    expected = ValueError
                if expected is ValueError:
                    with pytest.raises(ValueError):
                        check_relative(path)
                else:
                    assert check_relative(path) == expected, path
                checked += 1
    assert checked > 10_000


def test_run_concurrently_runs_every_call_at_once() -> None:
    parties = 6
    barrier = threading.Barrier(parties, timeout=10)  # one after another, the first call would break it
    threads: set[str] = set()

    def call() -> None:
        threads.add(threading.current_thread().name)
        barrier.wait()

    run_concurrently([call] * parties)
    assert len(threads) == parties and threading.current_thread().name in threads


def test_run_concurrently_runs_more_calls_than_kept_threads() -> None:
    done: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        with lock:
            done.append(i)

    run_concurrently([lambda i=i: call(i) for i in range(3 * SYNC_THREADS_MAX)])
    assert sorted(done) == list(range(3 * SYNC_THREADS_MAX))
    run_concurrently([])  # nothing to run: returns


def test_run_concurrently_raises_the_first_error_in_order_after_every_call_returned() -> None:
    slow_may_end = threading.Event()
    ended: list[str] = []

    def fails_late() -> None:
        slow_may_end.wait(10)
        ended.append("late")
        raise OSError("late")

    def fails_first() -> None:
        ended.append("early")
        slow_may_end.set()
        raise ValueError("early")

    with pytest.raises(OSError, match="late"):  # the list's order, not the order they failed in
        run_concurrently([lambda: ended.append("ok"), fails_late, fails_first])
    assert sorted(ended) == ["early", "late", "ok"]


def test_a_tree_survives_a_power_cut_once_sync_tree_ran(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    disk = OsDisk(root, shadow=True)
    disk.makedirs("streams")
    for name, synced in (("T1", True), ("T2", False)):
        view = disk.unsynced()
        for directory in ("", "/msgs", "/raft/wal"):
            view.makedirs(f"streams/{name}{directory}")
        for file in ("config.json", "msgs/1.blk", "raft/wal/1.seg"):
            handle = view.open(f"streams/{name}/{file}", create=True)
            handle.append(file.encode())
            handle.close()
        if synced:
            disk.sync_tree(f"streams/{name}")
    disk.sync_dir("streams")
    power_cut(root, "drop", seed=3)
    for file in ("config.json", "msgs/1.blk", "raft/wal/1.seg"):
        assert Path(root, "streams/T1", file).read_bytes() == file.encode()
        assert not os.path.exists(os.path.join(root, "streams/T2", file))


def test_run_concurrently_from_several_threads_at_once_runs_every_call() -> None:
    """Concurrent trees (several preparations at once) share the kept threads: every call of every run ends."""
    done: list[tuple[int, int]] = []
    lock = threading.Lock()

    def caller(c: int) -> None:
        def call(i: int) -> None:
            with lock:
                done.append((c, i))
        run_concurrently([lambda i=i: call(i) for i in range(SYNC_THREADS_MAX)])

    callers = [threading.Thread(target=caller, args=(c,)) for c in range(6)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in callers)
    assert sorted(done) == [(c, i) for c in range(6) for i in range(SYNC_THREADS_MAX)]
