"""The embedded API's `publish(subject)` without `stream=` finds the stream whose subjects match, on
every node, as the streams change (`stream_lookup` invariant 3).

Method: a real node on real files under `tmp_path` (`jsraft.open_node`), then three real nodes in one
process (`jsraft.testing.cluster.Cluster`: real TCP, real files), driven through each node's embedded
JetStream context. A stream's subjects are updated, it is deleted and created again with others, and
each time a publish by subject must land in the stream that has the subject now (its `PubAck` names it
and counts on from that stream's sequence) or fail with `StreamNotFound` in the words the scan used; a
publish to a wildcard-token subject is stored as it was before the index (taken literally). The single
node is reopened with a meta snapshot every two entries, so its meta state comes back from a snapshot;
in the cluster, every node (meta leader or follower) is asked once its meta state has applied the
change (polled with a deadline), and each node's index is compared with its meta state (`check()`).
"""

from __future__ import annotations

import pytest
import trio

import jsraft
from jsraft.errors import StreamNotFound
from jsraft.server import NodeConfig
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.testing.cluster import Cluster

TICK_MS = 20


def single(tmp_path) -> NodeConfig:
    return NodeConfig(name="n1", store_dir=str(tmp_path / "data"), cluster_port=0, client_port=0, tick_ms=TICK_MS,
                      election_ticks=5, test_mode=True, meta_snapshot_every_entries=2)


async def landed(js, subject: str) -> tuple[str, int]:
    ack = await js.publish(subject, subject.encode())
    return ack.stream, ack.seq


async def test_a_publish_by_subject_follows_updates_deletes_and_recreates(tmp_path):
    config = single(tmp_path)
    async with jsraft.open_node(config) as node:
        js = node.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.*"])
        assert await landed(js, "orders.1") == ("ORDERS", 1)
        assert await landed(js, "orders.*") == ("ORDERS", 2)  # a wildcard token, stored literally as before
        with pytest.raises(StreamNotFound, match=r"^no stream matches subject 'orders\.1\.2'$"):
            await js.publish("orders.1.2", b"")

        await js.update_stream(name="ORDERS", subjects=["invoices.>"])
        with pytest.raises(StreamNotFound):
            await js.publish("orders.1", b"")
        assert await landed(js, "invoices.2024.1") == ("ORDERS", 3)

        await js.delete_stream("ORDERS")
        with pytest.raises(StreamNotFound):
            await js.publish("invoices.2024.1", b"")
        await js.add_stream(name="INVOICES", subjects=["invoices.>"])
        assert await landed(js, "invoices.2024.1") == ("INVOICES", 1)
        await js.add_stream(name="ORDERS", subjects=["orders.>"])  # again, a new stream
        assert await landed(js, "orders.1.2") == ("ORDERS", 1)
        node.api_parts.local.subjects.check()

    async with jsraft.open_node(config) as node:  # meta state from its snapshot and the log after it
        assert node.runtime.status(META_GROUP).raft.snapshot_index > 0
        js = node.jetstream()
        assert await landed(js, "orders.x") == ("ORDERS", 2)
        assert await landed(js, "invoices.x") == ("INVOICES", 2)
        with pytest.raises(StreamNotFound):
            await js.publish("other.x", b"")
        node.api_parts.local.subjects.check()


async def test_every_node_of_a_cluster_finds_the_stream_after_each_change(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=10) as cluster:
            leader = await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            admin = cluster.node(leader).jetstream()

            async def applied_everywhere(check) -> None:
                await cluster.wait_until(lambda: all(check(cluster.meta(name)) for name in cluster.names), 10,
                                         what="every node applied the change")

            async def from_every_node(subject: str, stream: str) -> None:
                for name in cluster.names:
                    ack = await cluster.node(name).jetstream().publish(subject, name.encode())
                    assert ack.stream == stream, (name, ack)

            async def nowhere(subject: str) -> None:
                for name in cluster.names:
                    with pytest.raises(StreamNotFound):
                        await cluster.node(name).jetstream().publish(subject, b"")

            await admin.add_stream(name="ORDERS", subjects=["orders.*"], num_replicas=3)
            await applied_everywhere(lambda meta: meta.has_stream("ORDERS"))
            await from_every_node("orders.1", "ORDERS")

            await admin.update_stream(name="ORDERS", subjects=["invoices.>"], num_replicas=3)
            await applied_everywhere(lambda meta: meta.stream("ORDERS").subjects == ("invoices.>",))
            await nowhere("orders.1")
            await from_every_node("invoices.a.b", "ORDERS")

            await admin.delete_stream("ORDERS")
            await applied_everywhere(lambda meta: not meta.has_stream("ORDERS"))
            await nowhere("invoices.a.b")
            await admin.add_stream(name="BILLING", subjects=["invoices.*.*"], num_replicas=1)
            await applied_everywhere(lambda meta: meta.has_stream("BILLING"))
            await from_every_node("invoices.a.b", "BILLING")
            for name in cluster.names:
                cluster.node(name).api_parts.local.subjects.check()
