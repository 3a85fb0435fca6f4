"""One JetStream API level, computed from what jsraft serves, and the `_nats.*` stamps of ADR-44 on a real
node: `$JS.API.INFO`, `/varz`, `/jsz`, the startup banner, configs stamped by nats-server's rules, client
`_nats.*` keys replaced as nats-server replaces them, and `Nats-Required-Api-Level`.

Method: a real node (`jsraft.open_node`, client port 0, real files) driven by raw requests from nats-py
under asyncio (`nats_kit.in_asyncio`), so the exact JSON is checked; the same scenario on a node started
at level 0 (`NodeConfig.api_level`) shows every stamp and check follows the node's level. The monitor
views are read through `Monitor.respond` on the running node. nats-server 2.15.1 stamps the same
`_nats.req.level` values for these configs (tests/interop/test_oracle.py compares them).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import jsraft
from jsraft.jsapi import API_LEVEL, FEATURES
from jsraft.jsapi.api_level import LEVEL_2_FIELDS, LEVEL_2_SERVED
from jsraft.server.ops.monitor import Monitor
from nats_kit import in_asyncio, nats_connect, single

API = "$JS.API"
TTL_STREAM = {"name": "T", "subjects": ["t.>"], "allow_msg_ttl": True,
              "metadata": {"team": "a", "_nats.req.level": "5", "_nats.ver": "9.9.9", "_nats.level": "7",
                           "_nats.custom": "kept"}}


async def _raw(nc: Any, subject: str, body: Any = b"", headers: dict[str, str] | None = None) -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=10, headers=headers)).data)


async def _scenario(url: str) -> dict[str, Any]:
    nc = await nats_connect(url)
    seen: dict[str, Any] = {"info": await _raw(nc, f"{API}.INFO")}
    seen["ttl"] = await _raw(nc, f"{API}.STREAM.CREATE.T", TTL_STREAM, headers={"Nats-Required-Api-Level": "1"})
    seen["plain"] = await _raw(nc, f"{API}.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]})
    if "error" not in seen["ttl"]:
        # INFO's config sent back is the same config: an idempotent create, not "name already in use".
        seen["again"] = await _raw(nc, f"{API}.STREAM.CREATE.T", seen["ttl"]["config"])
        seen["list"] = await _raw(nc, f"{API}.STREAM.LIST", {"subject": "t.>"})
    consumer = {"stream_name": "P", "config": {"durable_name": "C", "pause_until": "2999-01-01T00:00:00Z"}}
    seen["paused"] = await _raw(nc, f"{API}.CONSUMER.CREATE.P.C", consumer)
    seen["plain_consumer"] = await _raw(nc, f"{API}.CONSUMER.CREATE.P.D",
                                        {"stream_name": "P", "config": {"durable_name": "D"}})
    if "error" not in seen["paused"]:
        await _raw(nc, f"{API}.CONSUMER.PAUSE.P.C", b"")  # resumed: the pause no longer needs level 1
        seen["resumed"] = await _raw(nc, f"{API}.CONSUMER.INFO.P.C")
    seen["too_high"] = await _raw(nc, f"{API}.STREAM.INFO.P", headers={"Nats-Required-Api-Level": str(API_LEVEL + 1)})
    # A counter stream (ADR-49) requires level 2.
    seen["counter"] = await _raw(nc, f"{API}.STREAM.CREATE.N", {"name": "N", "subjects": ["n.>"], "allow_msg_counter": True})
    if "error" not in seen["counter"]:
        seen["counter_pub"] = json.loads((await nc.request("n.a", b"", timeout=10, headers={"Nats-Incr": "+3"})).data)
    await nc.close()
    return seen


def test_the_level_is_that_of_the_features_served():
    # Level 2 is reported only once every one of nats-server 2.12's level-2 stream features is served.
    assert API_LEVEL == (2 if set(LEVEL_2_SERVED) == set(LEVEL_2_FIELDS) else 1) == 2
    assert any("TTL" in feature.name for feature in FEATURES) and any("pause" in feature.name for feature in FEATURES)
    assert sorted(feature.name.split(":")[0] for feature in FEATURES if feature.level == 2) == [
        "async persistence", "atomic batch publish", "counters", "message schedules"]


async def test_full_level_stamps_configs_as_nats_server(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft.server")
    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(_scenario, node.url)
        views = Monitor(node.monitor_parts)
        views.mark_running()
        varz, jsz = views.respond("GET", "/varz")[1], views.respond("GET", "/jsz")[1]
    assert seen["info"]["api"]["level"] == 2
    assert varz["jetstream"]["stats"]["api"]["level"] == 2 and jsz["api"]["level"] == 2
    assert "  API Level:       2" in caplog.messages
    # A TTL stream needs level 1; the client's versioning keys are replaced, its other keys kept.
    assert seen["ttl"]["config"]["metadata"] == {"team": "a", "_nats.custom": "kept", "_nats.req.level": "1",
                                                 "_nats.ver": "2.12.0", "_nats.level": "2"}
    assert "error" not in seen["again"] and seen["again"]["config"]["metadata"]["_nats.req.level"] == "1"
    assert seen["list"]["streams"][0]["config"]["metadata"] == {"team": "a", "_nats.custom": "kept",
                                                                "_nats.req.level": "1"}
    assert seen["plain"]["config"]["metadata"]["_nats.req.level"] == "0"
    # A paused consumer needs level 1 while paused (nats-server restamps on PAUSE), a plain one 0.
    assert seen["paused"]["config"]["metadata"] == {"_nats.req.level": "1", "_nats.ver": "2.12.0",
                                                    "_nats.level": "2"}
    assert seen["plain_consumer"]["config"]["metadata"]["_nats.req.level"] == "0"
    assert seen["resumed"]["config"]["metadata"]["_nats.req.level"] == "0"
    assert (seen["too_high"]["error"]["code"], seen["too_high"]["error"]["err_code"]) == (412, 10185)
    assert seen["counter"]["config"]["metadata"] == {"_nats.req.level": "2", "_nats.ver": "2.12.0", "_nats.level": "2"}
    assert seen["counter_pub"] == {"stream": "N", "seq": 1, "val": "3"}


async def test_a_node_at_level_0_serves_and_checks_level_0(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jsraft.server")
    async with jsraft.open_node(single(tmp_path, api_level=0)) as node:
        seen = await in_asyncio(_scenario, node.url)
    assert seen["info"]["api"]["level"] == 0
    assert "  API Level:       0" in caplog.messages
    # It cannot promise level 1, so a request that needs it is refused before anything is created, and it
    # makes no asset it could not run: a paused consumer (level 1) is refused with both levels named.
    assert seen["ttl"]["error"]["err_code"] == 10185
    assert (seen["paused"]["error"]["err_code"], seen["paused"]["error"]["description"]) == (
        10185, "JetStream minimum api level required: the consumer needs API level 1, this server is at 0")
    assert seen["plain"]["config"]["metadata"] == {"_nats.req.level": "0", "_nats.ver": "2.10.0", "_nats.level": "0"}
    assert seen["counter"]["error"]["err_code"] == 10185  # a lowered node makes no asset above its level


@pytest.mark.parametrize("level", [-1, API_LEVEL + 1])
def test_a_level_outside_the_build_is_refused(tmp_path, level):
    with pytest.raises(jsraft.errors.InvalidConfig, match="api_level"):
        single(tmp_path, api_level=level).validate()


def test_serve_api_level_flag(tmp_path):
    from jsraft.cli import build_parser
    from jsraft.cli.serve import config_from_args

    args = build_parser().parse_args(["serve", "-n", "s1", "-sd", str(tmp_path), "--api-level", "0"])
    assert config_from_args(args).api_level == 0
    default = build_parser().parse_args(["serve", "-n", "s1", "-sd", str(tmp_path)])
    assert config_from_args(default).api_level == API_LEVEL
    too_high = build_parser().parse_args(["serve", "-n", "s1", "-sd", str(tmp_path), "--api-level", "9"])
    with pytest.raises(jsraft.errors.InvalidConfig, match="api_level must be 0..2"):
        config_from_args(too_high)
