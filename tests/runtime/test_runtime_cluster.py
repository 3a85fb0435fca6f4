"""Three `NodeRuntime`s in one trio process: election, replication, apply, leader hints, restart, snapshots.

Method: `runtime_harness.Cluster` runs real runtimes (real Raft cores and WALs) connected by an in-memory
router, under pytest-trio's `autojump_clock`, so election timeouts pass in virtual time. Restart tests
use `OsDisk` on `tmp_path`: the second incarnation reads back the real files the first one wrote.
"""

from __future__ import annotations

import pytest
import trio

from runtime_harness import GROUP, Cluster, ListMachine, eventually, os_disks

from jsraft.raft import BadConfChange, ConfChange, ConfChangeType, NotLeader, ProposalDropped
from jsraft.runtime import GroupClosed, GroupExists, GroupNotFound


async def test_three_nodes_elect_a_leader_and_apply_proposals_everywhere(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery)
        await cluster.start_all()
        leader = await cluster.wait_leader()
        runtime = cluster.runtimes[leader]
        results = [await runtime.propose(GROUP, f"v{i}".encode()) for i in range(10)]
        assert [data for _, data in results] == [f"v{i}".encode() for i in range(10)]
        indexes = [index for index, _ in results]
        assert indexes == sorted(indexes) and len(set(indexes)) == 10
        expected = [f"v{i}".encode() for i in range(10)]
        await eventually(lambda: all(m.values == expected for m in cluster.machines.values()))
        status = cluster.runtimes[leader].status(GROUP)
        assert status.raft.role == "leader" and status.proposals_in_flight == 0
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_a_follower_refuses_with_the_leaders_id_and_so_does_a_former_leader(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery)
        await cluster.start_all()
        leader = await cluster.wait_leader()
        follower = next(n for n in cluster.ids if n != leader)
        with pytest.raises(NotLeader) as refused:
            await cluster.runtimes[follower].propose(GROUP, b"x")
        assert refused.value.leader_id == leader
        # Hand leadership over; the former leader now points at the new one.
        cluster.runtimes[leader].transfer_leadership(GROUP, follower)
        await eventually(lambda: cluster.leaders() == [follower])
        await eventually(lambda: cluster.runtimes[leader].status(GROUP).raft.leader_id == follower)
        with pytest.raises(NotLeader) as refused:
            await cluster.runtimes[leader].propose(GROUP, b"y")
        assert refused.value.leader_id == follower
        assert await cluster.runtimes[follower].propose(GROUP, b"z") is not None
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_group_table_errors(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1)
        runtime = await cluster.start("n1")
        with pytest.raises(GroupExists):
            await runtime.open_group(GROUP, voters=["n1"], state_machine=ListMachine())
        with pytest.raises(GroupNotFound):
            await runtime.propose("nope", b"x")
        assert runtime.deliver("nope", None) is False  # type: ignore[arg-type]  # unknown group: dropped
        await cluster.wait_leader()
        await runtime.close_group(GROUP)
        with pytest.raises(GroupNotFound):
            runtime.status(GROUP)
        await cluster.stop_all()
        with pytest.raises(GroupClosed):
            await runtime.propose(GROUP, b"x")
        nursery.cancel_scope.cancel()


async def test_restart_from_real_files_keeps_committed_entries(autojump_clock, tmp_path):
    expected = [f"e{i}".encode() for i in range(20)]
    async with trio.open_nursery() as nursery:
        disks = os_disks(tmp_path, ["n1", "n2", "n3"])
        cluster = Cluster(nursery, disks=disks)
        await cluster.start_all()
        leader = await cluster.wait_leader()
        for value in expected:
            await cluster.runtimes[leader].propose(GROUP, value)
        term = cluster.runtimes[leader].status(GROUP).raft.current_term
        await cluster.stop_all()

        # New runtimes, new (empty) state machines, the same directories.
        second = Cluster(nursery, disks=os_disks(tmp_path, ["n1", "n2", "n3"]), seed=2)
        await second.start_all()
        leader = await second.wait_leader()
        assert second.runtimes[leader].status(GROUP).raft.current_term > term
        await eventually(lambda: all(m.values == expected for m in second.machines.values()))
        await second.runtimes[leader].propose(GROUP, b"after")
        await eventually(lambda: all(m.values == expected + [b"after"] for m in second.machines.values()))
        await second.stop_all()
        nursery.cancel_scope.cancel()


async def test_snapshots_compact_the_log_and_catch_up_a_lagging_follower(autojump_clock, tmp_path):
    values = [f"s{i}".encode() for i in range(40)]
    async with trio.open_nursery() as nursery:
        disks = os_disks(tmp_path, ["n1", "n2", "n3"])
        cluster = Cluster(nursery, disks=disks, runtime_options={"wal_segment_bytes": 256})
        await cluster.start_all(snapshot_every_entries=8)
        leader = await cluster.wait_leader()
        lagging = next(n for n in cluster.ids if n != leader)
        await cluster.stop(lagging)
        for value in values:
            await cluster.runtimes[leader].propose(GROUP, value)
        await eventually(lambda: cluster.runtimes[leader].status(GROUP).raft.snapshot_index >= 32)
        wal_files = (tmp_path / leader / "groups" / GROUP / "wal").iterdir()
        assert min(int(p.name.split(".")[0]) for p in wal_files) > 1, "compaction removed old segments"

        # The lagging follower restarts from its own files; the leader no longer has the entries it
        # lacks, so it must be sent a snapshot, which the runtime installs with restore().
        machine = ListMachine()
        await cluster.start(lagging, machine=machine, snapshot_every_entries=8)
        await eventually(lambda: machine.values == values)
        assert machine.restores == 1
        await cluster.stop_all()

        # A restart restores each state machine from its own latest snapshot, then replays the rest.
        second = Cluster(nursery, disks=os_disks(tmp_path, ["n1", "n2", "n3"]), seed=3)
        await second.start_all(snapshot_every_entries=8)
        await second.wait_leader()
        await eventually(lambda: all(m.values == values for m in second.machines.values()))
        assert all(m.restores == 1 for m in second.machines.values())
        await second.stop_all()
        nursery.cancel_scope.cancel()


async def test_request_snapshot_compacts_through_the_applied_index(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1)
        runtime = await cluster.start("n1")
        await cluster.wait_leader()
        for i in range(5):
            await runtime.propose(GROUP, f"r{i}".encode())
        applied = runtime.status(GROUP).raft.applied_index
        assert runtime.status(GROUP).raft.snapshot_index == 0
        runtime.request_snapshot(GROUP)
        await eventually(lambda: runtime.status(GROUP).raft.snapshot_index == applied)
        recovered = cluster.disks["n1"].durable_recovered()  # type: ignore[attr-defined]
        assert recovered.snapshot is not None and recovered.snapshot[0].index == applied
        restored = ListMachine()
        restored.restore(recovered.snapshot[1])  # the bytes are the state machine's own snapshot()
        assert (restored.applied_index, restored.values) == (applied, [f"r{i}".encode() for i in range(5)])
        await cluster.stop_all()
        nursery.cancel_scope.cancel()


async def test_membership_change_adds_a_learner_then_promotes_it(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=4)
        founders = ["n1", "n2", "n3"]
        for node_id in founders:
            await cluster.start(node_id, voters=founders)
        leader = await cluster.wait_leader()
        runtime = cluster.runtimes[leader]
        values = [f"m{i}".encode() for i in range(10)]
        for value in values:
            await runtime.propose(GROUP, value)
        with pytest.raises(BadConfChange):
            await runtime.propose_conf_change(GROUP, ConfChange(type=ConfChangeType.ADD_VOTER, node_id="n2"))

        await cluster.start("n4", voters=None)  # a blank member: waits to be added, never bootstraps
        await runtime.propose_conf_change(GROUP, ConfChange(type=ConfChangeType.ADD_LEARNER, node_id="n4"))
        await eventually(lambda: cluster.machines["n4"].values == values)

        async def promote() -> None:
            while True:
                try:
                    await runtime.propose_conf_change(
                        GROUP, ConfChange(type=ConfChangeType.PROMOTE_LEARNER, node_id="n4"))
                    return
                except ProposalDropped:  # not caught up yet, or the add is still in progress
                    await trio.sleep(0.05)
        with trio.fail_after(10):
            await promote()
        await eventually(lambda: all(
            cluster.runtimes[n].status(GROUP).raft.voters == ("n1", "n2", "n3", "n4") for n in cluster.ids))
        await runtime.propose(GROUP, b"with four")
        await eventually(lambda: cluster.machines["n4"].values == values + [b"with four"])
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
