"""A replica stopped by a consumer its node cannot run does not keep the stream's leadership (PR #7158 in a
mixed-version cluster; server/groups/stream_repair.py invariant 4, stream_handover invariant 2).

nats-server does not run an offline stream on the node that cannot support it, so the other replicas lead.
jsraft keeps the stopped replica in the group (one log), so it can win an election; as leader it would answer
every publish, info and consumer request with "stream is offline" while two replicas that could serve stand
by (test_offline_assets' mixed-cluster step failed this way under load).

Method: a real 3-node cluster (real files and TCP) creates the level-1 assets of `offline_kit` (stream P with
the paused consumer C that needs API level 1), n1 restarts at API level 0 (P stopped there), and the
leadership of P is handed to n1 on purpose through its Raft group. Polled with a deadline: the leadership
leaves n1 for a replica that can run P, and through n2 the stream and the consumer answer online with every
message. The same cluster checks the other side of the rule: n1 answers `can_lead` false for P while stopped.
"""

from __future__ import annotations

import attrs
import trio

from jsraft.server.groups.stream_handover import can_lead
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio
from offline_kit import PAUSED_UNTIL, check_online, create_level_one_assets

ONLINE = {"t": (2, 2, True), "p": (3, 3), "c_paused": (True, PAUSED_UNTIL), "list_offline": None}


async def test_a_stopped_replica_hands_the_leadership_to_one_that_can_run_the_stream(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await in_asyncio(create_level_one_assets, cluster.node("n1").url, 3, timeout_s=60)
            await cluster.stop("n1")
            cluster.configs["n1"] = attrs.evolve(cluster.configs["n1"], api_level=0)
            await cluster.start_node("n1")
            await cluster.wait_for_meta_leader(timeout=20)
            await cluster.wait_until(lambda: "P" in cluster.node("n1").streams.replicas
                                     and cluster.node("n1").streams.replicas["P"].stopped_reason is not None, 20,
                                     what="n1's replica of P open and stopped")
            stopped = cluster.node("n1").streams.replicas["P"]
            assert can_lead(stopped) is False

            def leader() -> str | None:
                return cluster.node("n2").streams.replicas["P"].leader_id()

            await cluster.wait_until(lambda: leader() in ("n2", "n3"), 20, what="P led by n2 or n3")
            holder = cluster.node(leader())
            holder.runtime.transfer_leadership(holder.streams.replicas["P"].group, "n1")
            await cluster.wait_until(lambda: leader() == "n1", 20, what="P's leadership moved to n1")
            await cluster.wait_until(lambda: leader() in ("n2", "n3"), 20,
                                     what="stopped n1 handed P's leadership back")
            seen = await in_asyncio(check_online, cluster.node("n2").url, timeout_s=60)
    assert seen == ONLINE
