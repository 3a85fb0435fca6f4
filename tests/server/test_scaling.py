"""Scaling a stream's replicas on a real 3-node cluster: R1 → R3 → R1, with every acked message kept.

Method: three real nodes in one process (`jsraft.testing.cluster.Cluster`: real TCP, real files). The
update goes through the embedded JetStream context (meta places the new peers); the stream group's leader
then adds each new peer as a learner, promotes it once caught up, and on scale-down removes the others
(handing leadership over first if it is one of them). Replicas are compared by reading each node's store:
equal state tuples and equal contents. Every wait polls with a deadline.
"""

from __future__ import annotations

import trio
from test_cluster import ELECTION_TICKS, TICK_MS, publish_all, store_content

from jsraft.testing.cluster import Cluster


def group_members(cluster: Cluster, stream: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(voters, learners) as the stream group's leader sees them, or None without a single leader."""
    for node in cluster.running():
        replica = node.streams.replicas.get(stream)
        if replica is None:
            continue
        status = node.runtime.status(replica.group).raft
        if status.role.value == "leader":
            return tuple(sorted(status.voters)), tuple(sorted(status.learners))
    return None


async def test_scale_a_stream_from_r1_to_r3_and_back(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=TICK_MS, election_ticks=ELECTION_TICKS) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            js = cluster.node("n1").jetstream()
            info = await js.add_stream(name="S", subjects=["s.>"], num_replicas=1)
            (home,) = info.cluster["replicas"]
            acked = await publish_all(js, lambda i: f"s.{i % 3}", 600)

            await js.update_stream(name="S", subjects=["s.>"], num_replicas=3)
            await cluster.wait_until(lambda: group_members(cluster, "S") == (tuple(cluster.names), ()), 20,
                                     what="the group's voters are all three nodes")
            acked.update(await publish_all(js, lambda i: f"s.{i % 3}", 400, first=600))
            last = max(acked.values())

            def equal_everywhere(names: list[str]) -> bool:
                stores = [cluster.replica_store(name, "S") for name in names]
                if any(store.state().last_seq != last for store in stores):
                    return False
                return len({store.state().agreement_key() for store in stores}) == 1
            await cluster.wait_until(lambda: equal_everywhere(cluster.names), 20, what="three equal replicas")
            content = store_content(cluster.replica_store(cluster.names[0], "S"))
            assert {seq: payload for seq, _, payload in content} == {
                seq: f"m{i}".encode() for i, seq in acked.items()}

            info = await js.update_stream(name="S", subjects=["s.>"], num_replicas=1)
            (keeper,) = cluster.meta("n1").stream("S").peers
            await cluster.wait_until(lambda: group_members(cluster, "S") == ((keeper,), ()), 20,
                                     what="the group shrank to one voter")
            gone = [name for name in cluster.names if name != keeper]

            def files_gone(name: str) -> bool:
                # The node removes the directory from a worker thread, so it can
                # vanish between any two looks: one listing, and its absence counts.
                try:
                    return not any((tmp_path / name / "streams" / "S").iterdir())
                except FileNotFoundError:
                    return True
            await cluster.wait_until(
                lambda: all("S" not in cluster.node(name).streams.replicas and files_gone(name) for name in gone),
                20, what="the removed replicas closed and their files removed")
            after = await js.publish("s.x", b"after scale-down")
            assert after.seq == last + 1
            kept = {seq: payload for seq, _, payload in store_content(cluster.replica_store(keeper, "S"))}
            for i, seq in acked.items():
                assert kept[seq] == f"m{i}".encode(), f"acked message {i} (seq {seq}) lost"
            assert home in cluster.names
