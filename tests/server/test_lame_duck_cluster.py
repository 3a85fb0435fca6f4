"""Lame duck mode on a three-node cluster (`server.ops.lame_duck`): the node leading the meta group and a
stream hands both leaderships to its peers, tells its client (INFO `"ldm": true`, without its own URL),
leaves the `connect_urls` its peers advertise, stands aside in every Raft group (an observer: it never stands
for election again) and is placed no new replica, refuses new clients, closes the one it has after the grace period; the stream goes on
through the others with nothing lost.

Method: three real nodes in one process (`jsraft.testing.cluster.Cluster`, real TCP on loopback), a raw
client on the node going lame duck. Every wait polls with a deadline.
"""

from __future__ import annotations

import pytest
import trio

from jsraft.meta import ClusterNoPeers
from jsraft.protocol import Info
from jsraft.server.groups.meta_service import META_GROUP
from jsraft.server.ops.lame_duck import lame_duck
from jsraft.testing.cluster import Cluster
from nats_kit import DEADLINE_S, RawClient

GRACE_MS = 300


def netloc(node) -> str:
    return node.url.removeprefix("nats://")


async def test_lame_duck_hands_over_its_leaderships_tells_and_closes_its_clients(tmp_path):
    options = {"lame_duck_duration_ms": 2000, "lame_duck_grace_period_ms": GRACE_MS}
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, node_options=options) as cluster:
            duck_name = await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            duck = cluster.node(duck_name)
            others = [cluster.node(name) for name in cluster.names if name != duck_name]
            await duck.jetstream().add_stream(name="S", subjects=["s.>"], num_replicas=3)
            group = duck.streams.replicas["S"].group
            leader = await cluster.wait_until(lambda: duck.streams.replicas["S"].leader_id(), DEADLINE_S)
            if leader != duck_name:  # the duck leads the stream too
                cluster.node(leader).runtime.transfer_leadership(group, duck_name)
            await cluster.wait_until(lambda: duck.runtime.is_leader(group), DEADLINE_S, what="the duck leads S")
            first = await duck.jetstream().publish("s.a", b"before")
            url = netloc(duck)
            await cluster.wait_until(lambda: all(url in (node.clients.connect_urls or ()) for node in others),
                                     DEADLINE_S, what="every node advertises the duck")

            raw = await RawClient.connect(duck.client_address, {"verbose": False, "pedantic": False, "protocol": 1})
            await raw.round_trip()  # past its handshake: it is told
            began = trio.current_time()
            await lame_duck(duck.monitor_parts, duck.online, duck.runtime, duck.cluster_urls.leave)
            assert trio.current_time() - began >= GRACE_MS / 1000  # the client was closed after the grace period

            assert not duck.runtime.is_leader(META_GROUP) and not duck.runtime.is_leader(group)
            # It stands aside (`raft.core` invariant 6): none of its groups takes a leadership back.
            assert all(duck.runtime.status(name).raft.observer for name in duck.runtime.group_names())
            assert not any(node.runtime.status(name).raft.observer for node in others
                           for name in node.runtime.group_names())
            events = await raw.read_to_eof()
            infos = [event.options for event in events if isinstance(event, Info)]
            assert infos and infos[0]["ldm"] is True, events
            assert url not in infos[0]["connect_urls"] and len(infos[0]["connect_urls"]) == 2
            with pytest.raises(OSError):
                await trio.open_tcp_stream(*duck.client_address)
            for node in others:
                await cluster.wait_until(lambda node=node: url not in (node.clients.connect_urls or ()), DEADLINE_S,
                                         what=f"{node.name} stops advertising the duck")

            survivor = others[0].jetstream()  # the stream goes on at its new leader, the duck still a voter
            second = await survivor.publish("s.b", b"after")
            assert second.seq == first.seq + 1
            await cluster.wait_until(lambda: cluster.replica_store(duck_name, "S").state().last_seq == second.seq,
                                     DEADLINE_S, what="the duck still replicates")

            # No new replica is placed on the duck (meta_service invariant 5): two fit on the others, three not.
            await survivor.add_stream(name="TWO", subjects=["two.>"], num_replicas=2)
            assert duck_name not in others[0].meta.stream("TWO").peers
            with pytest.raises(ClusterNoPeers) as refused:
                await survivor.add_stream(name="THREE", subjects=["three.>"], num_replicas=3)
            assert refused.value.err_code == 10005
