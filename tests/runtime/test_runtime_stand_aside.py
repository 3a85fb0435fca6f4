"""`NodeRuntime.stand_aside` (lame duck mode): every group's core on the node becomes an observer (`raft.core`
invariant 6), and so does each group opened after it; the node goes on voting and replicating, so the
others elect among themselves with its vote when the leader goes.

Method: three real runtimes (`runtime_harness.Cluster`, real cores and WALs on `SimDisk`s) under
`autojump_clock`; what each core is comes from its status. Which of two eligible survivors wins an
election is up to their timeouts, so the raft-level proof that an observer never wins is
`tests/raft/test_raft_observer.py` (30 seeds, and a control without the rule); this one checks the wiring.
"""

from __future__ import annotations

import trio

from runtime_harness import GROUP, TICK_MS, Cluster, ListMachine, eventually

LATER = "later"


async def test_stand_aside_covers_every_group_now_and_later_and_the_others_elect_with_its_vote(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery)
        await cluster.start_all()
        leader = await cluster.wait_leader()
        duck, other = [node for node in cluster.ids if node != leader]
        cluster.runtimes[duck].stand_aside()
        for node in cluster.ids:  # a group opened once the node stood aside
            await cluster.runtimes[node].open_group(LATER, voters=cluster.ids, state_machine=ListMachine())
        for group in (GROUP, LATER):
            assert [cluster.runtimes[node].status(group).raft.observer for node in cluster.ids] == [
                node == duck for node in cluster.ids]
        if await cluster.wait_leader(LATER) == duck:  # a group it leads already: handed over, not taken back
            cluster.runtimes[duck].transfer_leadership(LATER, other)
            await eventually(lambda: cluster.leaders(LATER) == [other])

        await cluster.stop(leader)
        for group in (GROUP, LATER):
            assert await cluster.wait_leader(group) == other
        index, _ = await cluster.runtimes[other].propose(GROUP, b"after")  # committed with the duck's copy
        await eventually(lambda: cluster.runtimes[duck].status(GROUP).raft.last_index >= index)
        await trio.sleep(20 * 20 * TICK_MS / 1000)  # many election timeouts: nobody else stands
        assert cluster.leaders(GROUP) == [other] and cluster.leaders(LATER) == [other]
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
