"""Leader pipelining in the runtime: a slow leader fsync does not hold back a commit its followers made durable.

Method: three runtimes on `RecordingDisk`s (exact model of what a power cut leaves); n1 leads and its fsync
worker is switched to 50 ms of trio time for the proposal (`virtual_worker`), its followers' take 1 ms
(less than an election timeout, 100–200 ms, so n1 keeps leading). A proposal at n1 must commit
while n1's own cycle is still persisting — its AppendEntries left before its fsync, its followers'
acknowledgements were stepped while it was busy — and at that moment both followers' durable images
hold the entry while n1's does not: the commit rests on a majority of fsynced copies, n1's not among
them. The proposal still returns only after n1's cycle finished. A deposed leader's half is in
tests/raft/test_raft_pipelining.py (the core decides it; the runtime never steps a higher term while busy).
"""

from __future__ import annotations

import trio

from runtime_harness import GROUP, Cluster, eventually, virtual_worker

SLOW_FSYNC_S = 0.05


class SwitchableWorker:
    """`virtual_worker` whose latency can be changed while the runtime runs."""

    def __init__(self) -> None:
        self.latency_s = 0.001

    async def __call__(self, fn, *args):
        return await virtual_worker(self.latency_s)(fn, *args)


def _durably_holds(cluster: Cluster, node_id: str, index: int) -> bool:
    return any(e.index == index for e in cluster.disks[node_id].durable_recovered().entries)  # type: ignore[attr-defined]


async def test_followers_commit_while_the_leaders_fsync_runs(autojump_clock):
    async with trio.open_nursery() as nursery:
        worker = SwitchableWorker()
        cluster = Cluster(nursery, node_options={"n1": {"run_in_worker": worker}})
        await cluster.start_all()
        await cluster.wait_leader()
        if cluster.leaders() != ["n1"]:
            current = cluster.leaders()[0]
            cluster.runtimes[current].transfer_leadership(GROUP, "n1")
        await eventually(lambda: cluster.leaders() == ["n1"] and not cluster.runtimes["n1"].status(GROUP).busy)
        leader = cluster.runtimes["n1"]
        group = leader._group(GROUP)
        results: list[object] = []
        worker.latency_s = SLOW_FSYNC_S
        proposal = await leader.submit(GROUP, b"pipelined")
        await eventually(lambda: proposal.index > 0)  # in n1's log (at once, unless a cycle was running)
        index = proposal.index

        async def outcome() -> None:
            results.append(await leader.outcome(GROUP, proposal))
        nursery.start_soon(outcome)
        started = trio.current_time()
        await eventually(lambda: group.node.log.commit_index >= index, timeout_s=SLOW_FSYNC_S)
        assert trio.current_time() - started < SLOW_FSYNC_S
        assert group.busy and group.node.log.stable_index < index, "committed before n1's own fsync returned"
        assert _durably_holds(cluster, "n2", index) and _durably_holds(cluster, "n3", index)
        assert not _durably_holds(cluster, "n1", index)
        assert results == []  # answered only once n1 applied it, after its own cycle
        await eventually(lambda: len(results) == 1)
        assert _durably_holds(cluster, "n1", index)
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
