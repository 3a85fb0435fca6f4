"""A create's answer serves its config once: the stream info it is built from is asked without the config
it replaces (`jsapi_stream` invariant 8, `JsApi._settled_info`).

Method: one real node (`jsraft.open_node`, real files and fsync) and nats-py in an asyncio worker thread.
`config_json` is counted where both modules call it: a create (with metadata, so the served `_nats.*`
keys are in play) builds it once, where it built it at the leader and again in the answer; the answer's
config is the one a later STREAM.INFO serves. The leader's method itself is then called on the node
(`Handlers.handle`, as the router calls it locally): with `"config": false` its info carries
`"config": null` and the same other fields; without the flag (a node of an older build asking) the
config is there.
"""

from __future__ import annotations

import jsraft
from jsraft.server.api import jsapi_handlers, jsapi_stream
from nats_kit import in_asyncio, nats_connect, single


async def test_a_create_serves_its_config_once_and_the_leader_leaves_it_out_when_asked(tmp_path, monkeypatch):
    built: list[str] = []
    real = jsapi_stream.config_json

    def counting(*args, **kwargs):
        built.append("config")
        return real(*args, **kwargs)
    monkeypatch.setattr(jsapi_stream, "config_json", counting)
    monkeypatch.setattr(jsapi_handlers, "config_json", counting)

    async def scenario(url: str) -> dict:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=5)
        seen = {"before": len(built)}
        created = await js.add_stream(name="ORDERS", subjects=["orders.>"], metadata={"team": "a"})
        seen["create"] = len(built) - seen["before"]
        seen["created_config"] = created.config.as_dict()
        seen["info_config"] = (await js.stream_info("ORDERS")).config.as_dict()
        await nc.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(scenario, node.url, timeout_s=60)
        assert seen["create"] == 1
        assert seen["created_config"] == seen["info_config"]
        assert seen["created_config"]["metadata"]["team"] == "a"
        without, _ = await node.api_parts.handle(node.name, "jsapi.stream_info",
                                                 {"stream": "ORDERS", "config_index": 0, "config": False}, [])
        with_config, _ = await node.api_parts.handle(node.name, "jsapi.stream_info",
                                                     {"stream": "ORDERS", "config_index": 0}, [])
    assert without["config"] is None and list(without) == list(with_config)
    assert with_config["config"]["name"] == "ORDERS" and with_config["config"]["metadata"]["team"] == "a"
    assert without["state"] == with_config["state"] and without["cluster"] == with_config["cluster"]
