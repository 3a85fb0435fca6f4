"""Group commit, backpressure, cancellation and shutdown of the runtime.

Method: group commit and everything that needs a proposal to be stuck inside a real fsync run with real
worker threads and trio's real clock (a `RecordingDisk` whose fsyncs sleep, or wait on a gate the test
opens); the rest runs under `autojump_clock` with the harness's virtual-latency worker. Bounds are read
from two sides: the runtime's own counters (`GroupStatus`) and the Raft core's log (entries appended but
not yet applied), sampled at every message the leader sends.
"""

from __future__ import annotations

import threading

import pytest
import trio

from runtime_harness import GROUP, Cluster, ListMachine, eventually

from jsraft.raft import NotLeader
from jsraft.runtime import GroupClosed

THREADS = {"run_in_worker": trio.to_thread.run_sync}


class CountingWorker:
    """Real worker threads, counting the calls: one per cycle that writes (one group per node here)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, fn, *args):
        self.calls += 1
        return await trio.to_thread.run_sync(fn, *args)


async def test_group_commit_many_concurrent_proposals_share_few_fsyncs():
    proposers, each = 30, 10
    workers = {n: CountingWorker() for n in ("n1", "n2", "n3")}
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, node_options={n: {"run_in_worker": w} for n, w in workers.items()})
        for disk in cluster.disks.values():
            disk.shared.fsync_delay_s = 0.002  # type: ignore[attr-defined]  # a real fsync's latency
        await cluster.start_all()
        leader = await cluster.wait_leader()
        before = {n: d.wal_fsyncs() for n, d in cluster.disks.items()}  # type: ignore[attr-defined]

        async def proposer(p: int) -> None:
            for i in range(each):
                await cluster.runtimes[leader].propose(GROUP, f"{p}-{i}".encode())
        with trio.fail_after(20):
            async with trio.open_nursery() as tasks:
                for p in range(proposers):
                    tasks.start_soon(proposer, p)
        total = proposers * each
        await eventually(lambda: all(len(m.values) == total for m in cluster.machines.values()), 10)
        disks = cluster.disks
        fsyncs = {n: d.wal_fsyncs() - before[n] for n, d in disks.items()}  # type: ignore[attr-defined]
        per_file = {n: d.shared.fsyncs for n, d in cluster.disks.items()}  # type: ignore[attr-defined]
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
    # One fsync per touched file per cycle: no file was fsynced more often than there were cycles.
    for node_id, counts in per_file.items():
        assert max(counts.values()) <= workers[node_id].calls, (node_id, counts, workers[node_id].calls)
    # Every node fsyncs its WAL once per cycle, and a cycle carries what accumulated during the last.
    assert fsyncs[leader] * 5 <= total, f"{fsyncs} WAL fsyncs for {total} proposals"
    assert all(count * 3 <= total for count in fsyncs.values()), f"{fsyncs} WAL fsyncs for {total} proposals"


async def test_backpressure_bounds_proposals_in_flight(autojump_clock):
    bound = 4
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery)
        await cluster.start_all(proposals_in_flight_max=bound)
        leader = await cluster.wait_leader()
        runtime = cluster.runtimes[leader]
        seen: list[tuple[int, int]] = []

        def sample(from_node, to_node, group, message) -> None:
            if from_node == leader and leader in cluster.router.runtimes:
                status = runtime.status(GROUP)
                seen.append((status.proposals_in_flight, status.raft.last_index - status.raft.applied_index))
        cluster.router.on_send.append(sample)
        async with trio.open_nursery() as proposers:
            for i in range(40):
                proposers.start_soon(runtime.propose, GROUP, f"b{i}".encode())
        assert len(cluster.machines[leader].values) == 40
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
    assert max(in_flight for in_flight, _ in seen) == bound  # the bound was reached, and held
    # The core's log agrees: never more unapplied entries than the bound (plus a leader's no-op).
    assert max(unapplied for _, unapplied in seen) <= bound + 1


async def test_cancelled_proposal_keeps_its_slot_until_its_entry_is_known_lost(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery)
        await cluster.start_all()
        old = await cluster.wait_leader()
        others = {n for n in cluster.ids if n != old}
        cluster.router.partition = [{old}, others]
        runtime = cluster.runtimes[old]
        outcome: list[BaseException] = []

        async def stranded() -> None:
            try:
                await runtime.propose(GROUP, b"stranded")
            except NotLeader as error:
                outcome.append(error)
        nursery.start_soon(stranded)
        with trio.move_on_after(0.05) as waited:
            await runtime.propose(GROUP, b"cancelled")
        assert waited.cancelled_caught
        # Both entries are in the old leader's log: the cancelled one keeps its slot (its entry exists).
        assert runtime.status(GROUP).proposals_in_flight == 2
        await eventually(lambda: len([n for n in cluster.leaders() if n in others]) == 1)
        new = next(n for n in cluster.leaders() if n in others)
        await cluster.runtimes[new].propose(GROUP, b"new term")
        cluster.router.partition = None
        # The new leader's entries replace the stranded ones: the waiting proposer learns who leads.
        await eventually(lambda: bool(outcome))
        assert outcome[0].leader_id == new  # type: ignore[attr-defined]
        await eventually(lambda: runtime.status(GROUP).proposals_in_flight == 0)
        assert not {b"stranded", b"cancelled"} & set(cluster.machines[old].values)
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def _stuck_in_fsync(cluster: Cluster, nursery: trio.Nursery) -> tuple[threading.Event, list]:
    """A single-node group whose next fsync waits on a gate; a proposal is inside that fsync."""
    await cluster.start("n1")
    await cluster.wait_leader()
    gate = threading.Event()
    cluster.disks["n1"].shared.gate = gate  # type: ignore[attr-defined]
    runtime = cluster.runtimes["n1"]
    outcomes: list = []

    async def first() -> None:
        try:
            outcomes.append(await runtime.propose(GROUP, b"first"))
        except GroupClosed as error:
            outcomes.append(error)
    nursery.start_soon(first)
    await eventually(lambda: runtime.status(GROUP).busy and runtime.status(GROUP).proposals_in_flight == 1, 5)
    return gate, outcomes


async def test_cancelling_a_queued_proposal_frees_its_slot_at_once():
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1, runtime_options=THREADS)
        gate, outcomes = await _stuck_in_fsync(cluster, nursery)
        runtime = cluster.runtimes["n1"]
        with trio.move_on_after(0.05) as waited:
            await runtime.propose(GROUP, b"queued")  # the group is busy: this waits in its inbox
        assert waited.cancelled_caught
        assert runtime.status(GROUP).proposals_in_flight == 1  # withdrawn: it never reached the core
        gate.set()
        await eventually(lambda: bool(outcomes), 5)
        assert outcomes[0][1] == b"first"
        assert cluster.machines["n1"].values == [b"first"]
        assert runtime.status(GROUP).proposals_in_flight == 0
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_shutdown_waits_for_the_fsync_in_progress_then_closes():
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1, runtime_options=THREADS)
        gate, outcomes = await _stuck_in_fsync(cluster, nursery)
        runtime = cluster.runtimes["n1"]
        stopped = trio.Event()

        async def stop() -> None:
            await cluster.stop("n1")
            stopped.set()
        nursery.start_soon(stop)
        await trio.sleep(0.1)
        assert not stopped.is_set(), "shutdown must not abandon the fsync in progress"
        gate.set()
        with trio.fail_after(5):
            await stopped.wait()
        # The fsync finished and the entry is durable. Its proposer got the real outcome (the cycle holding
        # the fsync completed) or GroupClosed (outcome unknown); never a result for a lost entry.
        assert isinstance(outcomes[0], GroupClosed) or outcomes[0][1] == b"first"
        held = [e.data for e in cluster.disks["n1"].durable_recovered().entries]  # type: ignore[attr-defined]
        assert b"first" in held
        with pytest.raises(GroupClosed):
            await runtime.propose(GROUP, b"late")
        nursery.cancel_scope.cancel()


async def test_close_group_settles_proposals_and_keeps_other_groups_running(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1)
        runtime = await cluster.start("n1")
        other = ListMachine()
        await runtime.open_group("other", voters=["n1"], state_machine=other)
        await cluster.wait_leader()
        await cluster.wait_leader("other")
        await runtime.close_group(GROUP)
        assert runtime.group_names() == ["other"]
        assert await runtime.propose("other", b"still here") == (other.applied_index, b"still here")
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


class ExplodingMachine(ListMachine):
    def apply(self, entries):
        if any(entry.data == b"boom" for entry in entries):
            raise ValueError("cannot apply boom")
        return super().apply(entries)


async def test_a_failing_state_machine_or_disk_stops_only_its_own_group(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1)
        runtime = await cluster.start("n1")
        await runtime.open_group("explodes", voters=["n1"], state_machine=ExplodingMachine())
        await runtime.open_group("bad-disk", voters=["n1"], state_machine=ListMachine())
        for group in (GROUP, "explodes", "bad-disk"):
            await cluster.wait_leader(group)
        with pytest.raises(GroupClosed):
            await runtime.propose("explodes", b"boom")
        assert "state machine failed" in (runtime.status("explodes").closed_reason or "")
        cluster.disks["n1"].shared.failing_path_part = "groups/bad-disk/"  # type: ignore[attr-defined]
        with pytest.raises(GroupClosed):
            await runtime.propose("bad-disk", b"lost disk")
        assert "storage failed" in (runtime.status("bad-disk").closed_reason or "")
        # The node's other group is untouched.
        assert (await runtime.propose(GROUP, b"fine"))[1] == b"fine"  # type: ignore[index]
        await runtime.close_group("explodes")
        assert runtime.group_names() == ["bad-disk", GROUP]
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
