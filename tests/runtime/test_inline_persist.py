"""The ready loop persists a cycle inline on the trio thread when it is the node's only work
(`runtime.persist.CyclePersister`, invariant 6), and on the worker threads otherwise.

Method: the decision is tested on `CyclePersister` directly, with `persist_jobs` replaced by a recorder of
the thread that ran it and `run` by a recorder of hand-offs, in a real trio run: a task made runnable
just before the call (`nursery.start_soon`) is the "other work" the decision must see, and a call made in
a cancelled scope tells whether it passed a checkpoint. Then one real node
(`NodeRuntime` of the harness on an `OsDisk`, no `run_in_worker` injected) proposes one entry at a time —
a sync publisher — and the test records which threads ran its cycles' persistence; three nodes do the
same and their entries must be identical. Nothing is timed; waits poll with a deadline.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import trio

from runtime_harness import GROUP, Cluster, eventually, os_disks, record_persist_threads

from jsraft.runtime import persist
from jsraft.runtime.persist import INLINE_ENTRIES_MAX, CyclePersister, Job


class Recorder:
    """Stands in for `persist_jobs` and for the worker hand-off; records where each batch ran."""

    def __init__(self) -> None:
        self.inline: list[str] = []
        self.handed_off = 0

    def persist_jobs(self, jobs: list[Job]) -> list[Job]:
        self.inline.append(threading.current_thread().name)
        return jobs

    async def run(self, fn, jobs):
        self.handed_off += 1
        await trio.lowlevel.checkpoint()
        return jobs


def _batch(groups: int, work: object = None) -> list:
    return [(f"wal{i}", f"disk{i}", work or SimpleNamespace(ready=None)) for i in range(groups)]


def _leader_work(*peers: str) -> SimpleNamespace:
    """A leader's work of one entry that sent its AppendEntries before persisting (`Ready.send_first`)."""
    messages = [SimpleNamespace(to_id=peer) for peer in peers]
    return SimpleNamespace(ready=SimpleNamespace(send_first=True, messages=messages, entries=["e1"]))


async def test_one_group_and_nothing_else_to_run_persists_inline(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(persist, "persist_jobs", recorder.persist_jobs)
    persister = CyclePersister(recorder.run, 4, inline=True)
    assert await persister.persist(_batch(1)) == [None]
    assert recorder.inline == [threading.current_thread().name] and recorder.handed_off == 0
    assert persister.inline_cycles == 1


async def test_several_groups_go_to_the_worker_threads(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(persist, "persist_jobs", recorder.persist_jobs)
    persister = CyclePersister(recorder.run, 4, inline=True)
    assert await persister.persist(_batch(3)) == [None, None, None]
    assert recorder.inline == [] and recorder.handed_off == 3  # one share per group, fsyncs in parallel


async def test_a_runnable_task_sends_the_cycle_to_a_worker_thread(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(persist, "persist_jobs", recorder.persist_jobs)
    persister = CyclePersister(recorder.run, 4, inline=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.lowlevel.checkpoint)  # runnable now: it would wait out an inline fsync
        await persister.persist(_batch(1))
    assert recorder.inline == [] and recorder.handed_off == 1


async def test_a_leader_whose_sends_woke_its_writers_hands_off(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(persist, "persist_jobs", recorder.persist_jobs)
    persister = CyclePersister(recorder.run, 4, inline=True)

    async def writer() -> None:  # runnable now, like a transport link's writer woken by a send
        await trio.lowlevel.checkpoint()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        nursery.start_soon(writer)
        await persister.persist(_batch(1, _leader_work("n2", "n3")))
    # Its followers' acknowledgements are stepped while a worker thread fsyncs (runtime invariant 1).
    assert recorder.inline == [] and recorder.handed_off == 1


async def _yields(call) -> bool:
    """Whether `await call()` passed a checkpoint: in a cancelled scope, a checkpoint raises `Cancelled`."""
    with trio.CancelScope() as scope:
        scope.cancel()
        await call()
    return scope.cancelled_caught


async def test_inline_cycles_need_a_yield_between_them_and_only_their_apply_skips_one(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(persist, "persist_jobs", recorder.persist_jobs)
    persister = CyclePersister(recorder.run, 4, inline=True)
    await persister.persist(_batch(1))
    assert len(recorder.inline) == 1
    # The apply of the inline cycle's commit: no yield (R1's second cycle).
    assert not await _yields(lambda: persister.persist([]))
    await persister.persist(_batch(1))  # no yield since the last inline cycle: handed off (a yield)
    assert len(recorder.inline) == 1 and recorder.handed_off == 1
    await persister.persist(_batch(1))  # the hand-off yielded: inline again
    assert len(recorder.inline) == 2
    persister.yielded()
    assert await persister.persist(_batch(1)) == [None] and len(recorder.inline) == 3
    persister.yielded()
    assert await _yields(lambda: persister.persist([]))  # not right after an inline cycle: it yields
    assert recorder.handed_off == 1


async def test_a_cycle_of_many_entries_goes_to_the_worker_threads(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(persist, "persist_jobs", recorder.persist_jobs)
    persister = CyclePersister(recorder.run, 4, inline=True)
    streaming = SimpleNamespace(ready=SimpleNamespace(send_first=False, messages=[],
                                                      entries=["e"] * (INLINE_ENTRIES_MAX + 1)))
    await persister.persist(_batch(1, streaming))  # nothing runnable, but bytes of the stream may be arriving
    assert recorder.inline == [] and recorder.handed_off == 1


async def test_inline_off_always_hands_off(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(persist, "persist_jobs", recorder.persist_jobs)
    persister = CyclePersister(recorder.run, 4, inline=False)
    await persister.persist(_batch(1))
    assert recorder.inline == [] and recorder.handed_off == 1


async def _propose_one_at_a_time(tmp_path, monkeypatch, size: int) -> tuple[set[str], Cluster]:
    threads = record_persist_threads(monkeypatch)
    ids = [f"n{i}" for i in range(1, size + 1)]
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=size, disks=os_disks(tmp_path, ids), runtime_options={"run_in_worker": None})
        await cluster.start_all()
        leader = await cluster.wait_leader()
        with trio.fail_after(60):
            for i in range(30):
                await cluster.runtimes[leader].propose(GROUP, b"m%d" % i)
        await eventually(lambda: all(len(m.values) == 30 for m in cluster.machines.values()), 30, 0.01)
        values = [m.values for m in cluster.machines.values()]
        assert all(v == values[0] for v in values) and values[0][-1] == b"m29"
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
    return threads, cluster


async def test_a_single_node_publishing_one_at_a_time_persists_on_the_trio_thread(tmp_path, monkeypatch):
    threads, _ = await _propose_one_at_a_time(tmp_path, monkeypatch, 1)
    assert threading.current_thread().name in threads, threads


async def test_three_nodes_agree_with_inline_and_threaded_cycles_mixed(tmp_path, monkeypatch):
    threads, _ = await _propose_one_at_a_time(tmp_path, monkeypatch, 3)
    assert threads, "every cycle was persisted somewhere"
