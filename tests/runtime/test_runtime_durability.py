"""The runtime's two durability promises, checked against what a power cut would leave.

Method: every node runs on a `RecordingDisk` (a `SimDisk` with an exact model of what is durable). At
the moment the runtime hands a message to the network, `DurabilityChecker` crashes a copy of the
sender's disk, opens a real `Wal` on it, and checks that the message is backed by what survived: a
granted vote by a durable vote, a campaign by a durable self-vote, entries sent by a durable term (a leader sends its entries while
its own fsync runs), an
acknowledgement by durable entries and acked watermark (persist-before-send). When the leader's state
machine applies an entry — the moment its proposer's `propose()` gets the result — the test crashes a
copy of every node's disk and counts the copies that hold the entry: a majority must
(fsync-before-ack). Each check is run once against a deliberately broken runtime, to show it fails
when the rule is broken: one that sends before persisting, one that never fsyncs (lazy fsync).
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from runtime_harness import GROUP, Cluster, DurabilityChecker, ListMachine, eventually

from jsraft.raft import Entry, EntryType
from jsraft.runtime import NodeRuntime
from jsraft.replica.persist import write_work


class SendBeforePersistRuntime(NodeRuntime):
    """Broken on purpose: hands a cycle's messages to the network before the cycle's fsync."""

    async def _cycle(self, batch):
        for group, work in batch:
            group.send_first_messages(work, self._send)
            group.send_messages(work, self._send)
        await self._persist(batch)
        for group, work in batch:
            self._finish(group, work)


class LazyFsyncRuntime(NodeRuntime):
    """Broken on purpose: writes to the page cache and never fsyncs (nats-server's lazy default)."""

    async def _persist(self, batch):
        for group, work in batch:
            write_work(group.wal, group.disk, work)  # and no sync_work: no fsync, no hard state
        await trio.lowlevel.checkpoint()
        return [None] * len(batch)


async def _run_workload(cluster: Cluster, proposals: int) -> None:
    await cluster.start_all()
    leader = await cluster.wait_leader()
    async with trio.open_nursery() as proposers:
        for i in range(proposals):
            proposers.start_soon(cluster.runtimes[leader].propose, GROUP, f"p{i}".encode())
    # A leader change too, so votes are granted and campaigns run in a term after the first.
    successor = next(n for n in cluster.ids if n != leader)
    cluster.runtimes[leader].transfer_leadership(GROUP, successor)
    await eventually(lambda: cluster.leaders() == [successor])
    await cluster.runtimes[successor].propose(GROUP, b"after transfer")
    await cluster.stop_all()


async def _persist_before_send_violations(runtime_cls: type[NodeRuntime]) -> tuple[DurabilityChecker, int]:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, runtime_cls=runtime_cls)
        checker = DurabilityChecker(cluster.disks)  # type: ignore[arg-type]
        cluster.router.on_send.append(checker)
        await _run_workload(cluster, proposals=30)
        nursery.cancel_scope.cancel()
    return checker, cluster.router.sent


async def test_no_message_leaves_before_the_fsync_covering_it(autojump_clock):
    checker, _ = await _persist_before_send_violations(NodeRuntime)
    assert checker.violations == []
    # The checks ran on every kind of message that depends on durable state.
    assert checker.checked["vote"] >= 2 and checker.checked["campaign"] >= 2
    assert checker.checked["append"] >= 10 and checker.checked["ack"] >= 10


async def test_persist_before_send_check_catches_a_runtime_that_sends_first(autojump_clock):
    checker, _ = await _persist_before_send_violations(SendBeforePersistRuntime)
    assert checker.violations, "sending before the fsync must be detected"
    assert any("acknowledged" in v for v in checker.violations)
    assert any("vote" in v for v in checker.violations)


class AckAudit:
    """Hooked into the leader's state machine: at each apply, which nodes durably hold each entry."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.leader: str | None = None
        self.acked = 0
        self.violations: list[str] = []

    def hook(self, node_id: str):
        def on_apply(entries: Sequence[Entry]) -> None:
            if node_id != self.leader:
                return
            normal = [e for e in entries if e.type is EntryType.NORMAL]
            if not normal:
                return
            held = {n: {e.index: e for e in d.durable_recovered().entries}  # type: ignore[attr-defined]
                    for n, d in self.cluster.disks.items()}
            for entry in normal:
                self.acked += 1
                copies = [n for n, log in held.items() if log.get(entry.index) == entry]
                if len(copies) < 2:
                    self.violations.append(
                        f"entry {entry.index} acknowledged with durable copies on {copies}")
        return on_apply


async def _fsync_before_ack_audit(runtime_cls: type[NodeRuntime]) -> AckAudit:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, runtime_cls=runtime_cls)
        audit = AckAudit(cluster)
        for node_id in cluster.ids:
            await cluster.start(node_id, machine=ListMachine(on_apply=audit.hook(node_id)))
        audit.leader = await cluster.wait_leader()
        results: list[object] = []

        async def propose(i: int) -> None:
            results.append(await cluster.runtimes[audit.leader].propose(GROUP, f"a{i}".encode()))
        async with trio.open_nursery() as proposers:
            for i in range(40):
                proposers.start_soon(propose, i)
        assert len(results) == 40
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
    return audit


async def test_a_proposal_returns_only_after_a_majority_fsynced_its_entry(autojump_clock):
    audit = await _fsync_before_ack_audit(NodeRuntime)
    assert audit.acked == 40
    assert audit.violations == []


async def test_fsync_before_ack_check_catches_lazy_fsync(autojump_clock):
    audit = await _fsync_before_ack_audit(LazyFsyncRuntime)
    assert audit.violations, "acknowledging entries that only sit in page caches must be detected"
