"""Offline assets on a running node (nats-server PR #7158, ADR-44): a stream or consumer the node cannot
support is loaded offline, answers INFO with the reason, is listed under `offline` and `missing`, keeps
guarding its subjects, can only be deleted — and an unsupported consumer stops its whole stream (no
publishes, no deliveries) until it is deleted or the node upgraded.

Method: real nodes (real files, real TCP) create level-1 assets at the build's level — a TTL stream and a
paused consumer — then restart at API level 0 (`NodeConfig.api_level`), as a node of an older release
would load them. Every behaviour is checked through nats-py and raw API requests (`offline_kit`), the
log is checked for nats-server's "Detected unsupported ..." warning and the node's advisory log for the
asset-offline advisory; then the nodes restart at the full level and every asset is online with its
messages and consumer state intact (the raw config was kept byte for byte). The same on one node and on
a 3-node cluster (all nodes at level 0, then one).
"""

from __future__ import annotations

import logging

import attrs
import trio

import jsraft
from jsraft.server.versioning import OFFLINE_TYPE
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, single
from offline_kit import (
    LEVEL_REASON, PAUSED_UNTIL, assert_offline_seen, check_at_level_zero, check_online, create_level_one_assets,
    delete_the_unsupported,
)

ONLINE = {"t": (2, 2, True), "p": (3, 3), "c_paused": (True, PAUSED_UNTIL), "list_offline": None}


def _warned(caplog) -> list[str]:
    return [m for m in caplog.messages if m.startswith("Detected unsupported")]


async def test_one_node_loads_level_one_assets_offline_at_level_zero(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft.server")
    config = single(tmp_path)
    async with jsraft.open_node(config) as node:
        await in_asyncio(create_level_one_assets, node.url, 1)
    async with jsraft.open_node(attrs.evolve(config, api_level=0)) as node:
        seen = await in_asyncio(check_at_level_zero, node.url)
        advisories = node.streams.advisories.entries(type=OFFLINE_TYPE)
    assert_offline_seen(seen)
    assert f"Detected unsupported stream '$G > T': {LEVEL_REASON}; delete the stream or upgrade the server to " \
           "API level 1" in _warned(caplog)
    assert f"Detected unsupported consumer '$G > P > C': {LEVEL_REASON}; delete the consumer or upgrade the " \
           "server to API level 1" in _warned(caplog)
    assert sorted((a["stream"], a.get("consumer"), a["reason"]) for a in advisories) == \
        [("P", "C", LEVEL_REASON), ("T", None, LEVEL_REASON)]
    async with jsraft.open_node(config) as node:  # upgraded again: everything online and intact
        assert await in_asyncio(check_online, node.url) == ONLINE
    async with jsraft.open_node(attrs.evolve(config, api_level=0)) as node:
        deleted = await in_asyncio(delete_the_unsupported, node.url)
    assert deleted["delete_c"] is True and deleted["delete_t"] is True and deleted["names"] == ["P"]
    assert deleted["publish_p"] == 4 and deleted["fetched"] == [b"p.1", b"p.2", b"p.3", b"after"]


async def _restart(cluster: Cluster, names: list[str], api_level: int | None) -> None:
    for name in names:
        await cluster.stop(name)
    for name in names:
        base = cluster.configs[name]
        cluster.configs[name] = attrs.evolve(base, api_level=jsraft.jsapi.API_LEVEL if api_level is None else api_level)
        await cluster.start_node(name)
    await cluster.wait_for_meta_leader(timeout=20)


async def test_three_nodes_at_level_zero_then_one_then_upgraded(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft.server")
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            await in_asyncio(create_level_one_assets, cluster.node("n1").url, 3, timeout_s=60)
            await _restart(cluster, cluster.names, 0)  # every node at level 0: the stream P is frozen
            await cluster.wait_ready(20)
            seen = await in_asyncio(check_at_level_zero, cluster.node("n2").url, timeout_s=60)
            await _restart(cluster, cluster.names, None)
            await cluster.wait_ready(20)
            upgraded = await in_asyncio(check_online, cluster.node("n3").url, timeout_s=60)
            await _restart(cluster, ["n1"], 0)  # a mixed cluster: n2 and n3 keep the streams running
            mixed = await in_asyncio(check_online, cluster.node("n2").url, timeout_s=60)
            await _restart(cluster, ["n1"], None)
            again = await in_asyncio(check_online, cluster.node("n1").url, timeout_s=60)
            states = {name: cluster.replica_store(name, "P").state() for name in cluster.names}
    assert_offline_seen(seen)
    assert upgraded == mixed == again == ONLINE
    assert len({(s.first_seq, s.last_seq, s.msgs, s.digest) for s in states.values()}) == 1
    # Every node warned at level 0 (the first restart), n1 once more in the mixed cluster.
    stream_warnings = [m for m in _warned(caplog) if m.startswith("Detected unsupported stream '$G > T'")]
    assert len(stream_warnings) == 4
