"""A state machine may refuse to be snapshotted for a while (`snapshot_ready()`): the runtime waits.

Method: one runtime with the in-memory harness (virtual time, `autojump_clock`) and a list machine that
says it is not ready — as a stream replica under repair does, whose `snapshot()` would raise and stop
the group. Snapshots are due (every 4 entries, and asked for explicitly) through many cycles, yet none is
taken and the group stays open; once the machine says it is ready, the next cycle compacts.
"""

from __future__ import annotations

import trio
from runtime_harness import GROUP, Cluster, ListMachine, eventually


class Unready(ListMachine):
    ready = False

    def snapshot_ready(self) -> bool:
        return self.ready

    def snapshot(self) -> bytes:
        assert self.ready, "snapshot() asked of a machine that said it was not ready"
        return super().snapshot()


async def test_a_machine_not_ready_to_snapshot_is_not_compacted_until_it_is(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1)
        machine = Unready()
        runtime = await cluster.start("n1", machine=machine, snapshot_every_entries=4)
        await cluster.wait_leader()
        for i in range(10):
            await runtime.propose(GROUP, f"r{i}".encode())
        runtime.request_snapshot(GROUP)
        await trio.sleep(1.0)  # virtual time: many cycles in which a snapshot was due
        status = runtime.status(GROUP)
        assert status.raft.snapshot_index == 0 and status.closed_reason is None
        due = status.raft.applied_index
        machine.ready = True
        await runtime.propose(GROUP, b"one more")  # a new cycle: now it may compact
        await eventually(lambda: runtime.status(GROUP).raft.snapshot_index >= due)
        assert runtime.status(GROUP).closed_reason is None
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
