"""A follower's acknowledgement leaves before the follower applies (`NodeRuntime._cycle`, step 3).

Method: three runtimes of the harness (virtual-latency workers, `autojump_clock`) whose `send` only queues
a message and wakes a writer task of the node, as the real transport's link does; a message is "on the
wire" once that task took it. Sequential proposals make every follower cycle acknowledge new entries and
apply the ones the leader's last AppendEntries said were committed. At each apply on a follower, the test
checks that no acknowledgement of new entries (a successful AppendEntriesResponse raising the match index
it sent) is still waiting for its writer: the apply is on nobody's path, the acknowledgement is on the
leader's commit path. Without the runtime's yield between its sends and its applies, the apply runs first.
"""

from __future__ import annotations

import trio

from runtime_harness import GROUP, Cluster, ListMachine, eventually

from jsraft.raft.messages import AppendEntriesResponse
from jsraft.runtime import NodeRuntime


class WiredRuntime(NodeRuntime):
    """A runtime whose messages go out through a writer task of its own (like a transport link)."""

    def __init__(self, node_id, disk, clock, rng, send, **options) -> None:
        self.unwired: list[tuple[str, str, object]] = []
        self.acked_sent = 0  # the highest match index acknowledged so far (queued)
        self.new_acks_unwired = 0  # acknowledgements of new entries queued and not yet taken by the writer
        self._wire = send
        self._queued = trio.Event()
        super().__init__(node_id, disk, clock, rng, self._queue, **options)

    def _queue(self, to_node: str, group: str, message) -> bool:
        new_ack = (isinstance(message, AppendEntriesResponse) and message.success
                   and message.match_index > self.acked_sent)
        if new_ack:
            self.acked_sent = message.match_index
            self.new_acks_unwired += 1
        self.unwired.append((to_node, group, message, new_ack))
        self._queued.set()
        return True

    async def _writer(self) -> None:
        while True:
            await self._queued.wait()
            self._queued = trio.Event()
            queued, self.unwired = self.unwired, []
            for to_node, group, message, new_ack in queued:
                self.new_acks_unwired -= new_ack
                self._wire(to_node, group, message)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer)
            await super().run(task_status=task_status)
            nursery.cancel_scope.cancel()


async def test_a_follower_acknowledges_new_entries_before_it_applies(autojump_clock):
    late: list[tuple[str, int]] = []  # (follower, index applied) while one of its acknowledgements waited
    applies = {}

    def watching(node_id: str) -> ListMachine:
        def on_apply(entries) -> None:
            runtime = cluster.runtimes[node_id]
            applies[node_id] = applies.get(node_id, 0) + 1
            if runtime.new_acks_unwired:
                late.append((node_id, entries[-1].index))
        return ListMachine(on_apply=on_apply)

    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, runtime_cls=WiredRuntime)
        for node_id in cluster.ids:
            await cluster.start(node_id, machine=watching(node_id))
        leader = await cluster.wait_leader()
        followers = [n for n in cluster.ids if n != leader]
        before = dict(applies)
        with trio.fail_after(60):
            for i in range(30):
                await cluster.runtimes[leader].propose(GROUP, b"m%d" % i)
        await eventually(lambda: all(len(cluster.machines[n].values) == 30 for n in cluster.ids), 30)
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
    # The followers applied in many cycles (each one also acknowledging the next entry), and never with
    # an acknowledgement of theirs still waiting for the writer.
    assert all(applies[n] - before.get(n, 0) >= 20 for n in followers), applies
    assert [entry for entry in late if entry[0] in followers] == []
