"""A stream info that races the stream's delete answers StreamNotFound, never "store is closed".

Method: a real 3-node `Cluster` (real TCP, real files). An R3 stream is created through the embedded
JetStream context. On the stream's leader, the `stream.info` handler asks every replica for its standing
(`replica.state`) before it reads its own store. The test wraps the handler's peer call: while the call is
out, the stream is deleted through the meta group, and the call returns only once the leader's replica is
closed. That is the interleaving a fresh-clone CI run once hit: a client asking for stream info right after
the delete got a 503 "store is closed" (10077) instead of 404 "stream not found". The handler must answer
`StreamNotFound`. Without the handler's second look at its replica, the store read raises `StoreClosed`.
Every wait polls with a deadline.
"""

from __future__ import annotations

import pytest
import trio
from test_cluster import ELECTION_TICKS, TICK_MS
from test_meta_compaction import add_stream

from jsraft.errors import StreamNotFound
from jsraft.testing.cluster import Cluster


async def test_stream_info_racing_the_delete_answers_stream_not_found(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await add_stream(cluster.node("n1").jetstream(), name="GONE", subjects=["gone.>"], num_replicas=3)

            def leader_name() -> str | None:
                for node in cluster.running():
                    replica = node.streams.replicas.get("GONE")
                    if replica is not None and replica.can_enqueue():
                        return node.name
                return None
            await cluster.wait_until(leader_name, 10, what="a leader for GONE")
            node = cluster.node(leader_name())
            replica = node.streams.replicas["GONE"]
            handlers = node.handlers
            asked = handlers._call_peer
            deleted: list[bool] = []

            async def call_peer(peer, method, args, **kwargs):
                if method == "replica.state" and not deleted:
                    deleted.append(True)
                    meta_leader = cluster.node(node.meta_leader())  # the delete goes through the meta leader
                    await meta_leader.meta_service.delete_stream("GONE")
                    await cluster.wait_until(lambda: replica.closed, 10, what="the leader's replica closed")
                return await asked(peer, method, args, **kwargs)

            handlers._call_peer = call_peer
            with pytest.raises(StreamNotFound):
                await handlers.stream_info({"stream": "GONE"}, [])
            assert deleted == [True]
