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
a 3-node cluster (all nodes at level 0, then one). Last, an update a level-0 node cannot run, made through
a node that can, stops that node's replica while the other two carry the stream on.
"""

from __future__ import annotations

import logging

import attrs
import trio

import jsraft
from jsraft.server.groups.versioning import OFFLINE_TYPE
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, nats_connect, single
from offline_kit import (
    LEVEL_REASON, PAUSED_UNTIL, api_error, assert_offline_seen, check_at_level_zero, check_online,
    create_level_one_assets, delete_the_unsupported, raw,
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
            # n1's stopped replica of P may win an election after its restart; it hands the leadership on
            # (test_offline_leadership.py), and the check asks once that has happened.
            await cluster.wait_until(lambda: cluster.node("n2").streams.replicas["P"].leader_id() in ("n2", "n3"),
                                     20, what="P led by a node that can run it")
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


async def _info_error(url: str, stream: str) -> tuple[int, str]:
    nc = await nats_connect(url)
    try:
        return await api_error(nc.jetstream(timeout=10).stream_info(stream))
    finally:
        await nc.close()


async def _create_u(url: str) -> None:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="U", subjects=["u.>"], num_replicas=3)
    await js.publish("u.1", b"before")
    await nc.close()


async def _update_u(url: str) -> dict:
    """Through a node at the full level: the update that makes U need level 1; then a publish."""
    nc = await nats_connect(url)
    updated = await raw(nc, "$JS.API.STREAM.UPDATE.U", {"name": "U", "subjects": ["u.>"], "num_replicas": 3,
                                                         "allow_msg_ttl": True})
    if "error" not in updated:
        updated["after"] = (await nc.jetstream(timeout=10).publish("u.2", b"after")).seq
    await nc.close()
    return updated


async def _away_from_n1(cluster: Cluster) -> None:
    """Move meta leadership off n1 (level 0) if it has it."""
    if cluster.node("n2").meta_leader() == "n1":
        await cluster.node("n2").call_meta("jsapi.meta_stepdown", {"preferred": "n2"})
    await cluster.wait_until(lambda: cluster.node("n2").meta_leader() not in (None, "n1"), 20)


async def test_an_update_a_node_cannot_run_stops_its_replica(tmp_path, caplog):
    """The update needs a meta leader that can run it. A level-0 meta leader refuses it (10185, naming both
    levels) — checked whenever leadership is on n1 when the update arrives, which is then moved and the
    update asked again (at most 5 times)."""
    caplog.set_level(logging.INFO, logger="jsraft.server")
    refused = []
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            await cluster.wait_for_meta_leader()
            await _restart(cluster, ["n1"], 0)
            await cluster.wait_ready(20)
            await in_asyncio(_create_u, cluster.node("n2").url, timeout_s=60)
            for _ in range(5):
                await _away_from_n1(cluster)
                updated = await in_asyncio(_update_u, cluster.node("n2").url, timeout_s=60)
                if updated.get("error", {}).get("err_code") != 10185:
                    break
                refused.append(updated["error"]["description"])
            await cluster.wait_until(lambda: "U" not in cluster.node("n1").streams.replicas, 20,
                                     what="n1 stopped its replica of U")
            info = await in_asyncio(lambda url: _info_error(url, "U"), cluster.node("n1").url)
    assert "error" not in updated, updated
    assert (updated["config"]["metadata"]["_nats.req.level"], updated["after"]) == ("1", 2)  # U goes on
    assert info == (10194, f"stream is offline: {LEVEL_REASON}")
    assert any(m.startswith("Detected unsupported stream '$G > U'") for m in _warned(caplog))
    assert all("stream 'U' needs API level 1, this server is at 0" in text for text in refused), refused
