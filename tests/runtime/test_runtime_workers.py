"""The node's persistent fsync threads (`runtime.workers.WorkerThreads`) and the runtime running its cycles
on them by default.

Method: real threads and trio's real clock (a worker thread under `autojump_clock` would let virtual time
race ahead). Each test observes the thread side directly — which OS thread ran a call, a gate the call
blocks on, a flag set only after the test opens the gate — instead of timing anything, and polls what it
waits for with a deadline. The runtime tests run a three-node cluster of the harness on `OsDisk`s with no
`run_in_worker` injected (the production default, the inline path turned off: `test_inline_persist.py`
covers it) and record which thread ran each cycle's persistence.
"""

from __future__ import annotations

import threading

import pytest
import trio

from runtime_harness import GROUP, Cluster, eventually, os_disks, record_persist_threads

from jsraft.runtime.workers import WorkerThreads


class Boom(Exception):
    pass


def _alive(prefix: str) -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith(prefix)]


async def test_a_call_runs_on_a_worker_thread_and_returns_its_result():
    workers = WorkerThreads("t-result", 2)
    try:
        idents = [await workers.run(threading.get_ident) for _ in range(5)]
    finally:
        workers.close()
    assert threading.get_ident() not in idents
    assert len(set(idents)) == 1  # one call at a time: the one idle thread is reused, none is started per call
    await eventually(lambda: not _alive("t-result"), 10, 0.01)


async def test_an_error_is_raised_in_the_caller_and_the_thread_goes_on():
    workers = WorkerThreads("t-error", 1)

    def fail() -> None:
        raise Boom("from the worker")
    try:
        with pytest.raises(Boom, match="from the worker"):
            await workers.run(fail)
        assert await workers.run(lambda a, b: a + b, 2, 3) == 5
    finally:
        workers.close()


async def test_concurrent_calls_each_get_their_own_thread():
    workers = WorkerThreads("t-concurrent", 2)
    both_in = threading.Barrier(2, timeout=10)  # breaks (an error) unless the two calls run at the same time
    names: list[str] = []

    def meet() -> None:
        both_in.wait()
        names.append(threading.current_thread().name)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(workers.run, meet)
            nursery.start_soon(workers.run, meet)
    finally:
        workers.close()
    assert sorted(names) == ["t-concurrent-1", "t-concurrent-2"]


async def test_a_running_call_is_not_abandoned_when_its_caller_is_cancelled():
    workers = WorkerThreads("t-cancel", 1)
    started, gate = threading.Event(), threading.Event()
    opened = []  # the test's own record that it opened the gate, appended just before it does
    resumed_after_open = []

    def blocked() -> str:
        started.set()
        gate.wait(10)
        return "done"

    async def caller(scope_box: list) -> None:
        with trio.CancelScope() as scope:
            scope_box.append(scope)
            await workers.run(blocked)
            resumed_after_open.append(bool(opened))
            await trio.lowlevel.checkpoint()  # the cancellation lands here, after the call returned
            resumed_after_open.append("not cancelled")
    try:
        async with trio.open_nursery() as nursery:
            box: list = []
            nursery.start_soon(caller, box)
            await eventually(started.is_set, 10, 0.005)
            box[0].cancel()
            for _ in range(5):  # scheduling rounds in which a wrongly abandoned call's caller would resume
                await trio.lowlevel.checkpoint()
            assert resumed_after_open == []
            opened.append(True)
            gate.set()
    finally:
        workers.close()
    assert resumed_after_open == [True]  # resumed only after the call returned, and then cancelled


async def test_close_ends_the_threads_and_refuses_calls():
    workers = WorkerThreads("t-close", 2)
    await workers.run(lambda: None)
    assert _alive("t-close") == ["t-close-1"]
    workers.close()
    await eventually(lambda: not _alive("t-close"), 10, 0.01)
    with pytest.raises(RuntimeError, match="closed"):
        await workers.run(lambda: None)


async def test_the_runtime_persists_its_cycles_on_its_own_threads_by_default(tmp_path, monkeypatch):
    threads = record_persist_threads(monkeypatch)
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, disks=os_disks(tmp_path, ["n1", "n2", "n3"]),
                          runtime_options={"run_in_worker": None, "inline_persist": False})
        await cluster.start_all()
        leader = await cluster.wait_leader()
        with trio.fail_after(30):
            for i in range(20):
                await cluster.runtimes[leader].propose(GROUP, b"m%d" % i)
        await eventually(lambda: all(len(m.values) == 20 for m in cluster.machines.values()), 30, 0.01)
        assert threads and all(name.startswith("jsraft-fsync-n") for name in threads), threads
        assert {name.rsplit("-", 1)[0] for name in threads} == {"jsraft-fsync-n1", "jsraft-fsync-n2",
                                                                "jsraft-fsync-n3"}
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
    await eventually(lambda: not _alive("jsraft-fsync-"), 10, 0.01)
