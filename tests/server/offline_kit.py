"""Helpers for the offline-asset tests (test_offline_assets.py): the level-1 assets they create and the
nats-py checks they run against a node at level 0 and at full level."""

from __future__ import annotations

import json
from typing import Any

import nats.errors
import nats.js.errors

from nats_kit import nats_connect

API = "$JS.API"
LEVEL_REASON = "unsupported - required API level: 1, current API level: 0"
STOPPED_REASON = 'stopped - unsupported consumer "C"'
PAUSED_UNTIL = "2999-01-01T00:00:00Z"


async def raw(nc: Any, subject: str, body: Any = b"") -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=10)).data)


async def api_error(call: Any) -> tuple[int, str]:
    """`(err_code, description)` of the APIError a nats-py call raises."""
    try:
        await call
    except nats.js.errors.APIError as error:
        return error.err_code, error.description
    raise AssertionError("the call succeeded")


async def create_level_one_assets(url: str, replicas: int) -> None:
    """T: a TTL stream (level 1) with 2 messages; P: a plain stream with 3 messages, a paused consumer C
    (level 1) and a plain pull consumer D."""
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    assert "error" not in await raw(nc, f"{API}.STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"],
                                                                   "allow_msg_ttl": True, "num_replicas": replicas})
    await js.add_stream(name="P", subjects=["p.>"], num_replicas=replicas)
    for subject in ("t.1", "t.2", "p.1", "p.2", "p.3"):
        await js.publish(subject, subject.encode())
    created = await raw(nc, f"{API}.CONSUMER.CREATE.P.C", {"stream_name": "P", "config": {
        "durable_name": "C", "ack_policy": "explicit", "pause_until": PAUSED_UNTIL}})
    assert created["config"]["metadata"]["_nats.req.level"] == "1", created
    await js.add_consumer("P", durable_name="D", ack_policy="explicit")
    await nc.close()


async def check_at_level_zero(url: str) -> dict[str, Any]:
    """Every offline behaviour through nats-py and raw requests; returns what was seen."""
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=5)
    seen: dict[str, Any] = {
        "info_t": await api_error(js.stream_info("T")),
        "info_p": await api_error(js.stream_info("P")),
        "list": await raw(nc, f"{API}.STREAM.LIST"),
        "names": (await raw(nc, f"{API}.STREAM.NAMES"))["streams"],
        "update_t": await api_error(js.update_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)),
        "update_p": await api_error(js.update_stream(name="P", subjects=["p.>"], description="x")),
        "overlap": await api_error(js.add_stream(name="X", subjects=["t.x"])),
        "publish_p": await api_error(js.publish("p.4", b"refused")),
        "publish_t": await api_error(js.publish("t.3", b"refused")),
        "info_c": await api_error(js.consumer_info("P", "C")),
        "consumers": await raw(nc, f"{API}.CONSUMER.LIST.P"),
        "create_e": await api_error(js.add_consumer("P", durable_name="E")),
        "pause_d": await raw(nc, f"{API}.CONSUMER.PAUSE.P.D", {"pause_until": PAUSED_UNTIL}),
    }
    sub = await js.pull_subscribe_bind("D", "P")
    try:
        seen["fetched"] = len(await sub.fetch(1, timeout=1))
    except (nats.errors.TimeoutError, nats.js.errors.APIError):
        seen["fetched"] = 0
    await nc.close()
    return seen


def assert_offline_seen(seen: dict[str, Any]) -> None:
    assert seen["info_t"] == (10194, f"stream is offline: {LEVEL_REASON}")
    assert seen["info_p"] == (10194, f"stream is offline: {STOPPED_REASON}")
    assert seen["list"]["offline"] == {"T": LEVEL_REASON, "P": STOPPED_REASON}
    assert sorted(seen["list"]["missing"]) == ["P", "T"] and seen["list"]["total"] == 2
    assert seen["names"] == ["P", "T"]
    assert seen["update_t"][0] == 10194 and seen["update_p"][0] == 10194
    assert seen["overlap"][0] == 10065  # an offline stream's subjects stay guarded
    assert seen["publish_p"] == (10194, f"stream is offline: {STOPPED_REASON}")
    assert seen["publish_t"] == (10194, f"stream is offline: {LEVEL_REASON}")  # at once, not after a timeout
    assert seen["info_c"] == (10195, f"consumer is offline: {LEVEL_REASON}")
    assert seen["consumers"]["offline"] == {"C": LEVEL_REASON}
    assert [info["name"] for info in seen["consumers"]["consumers"]] == ["D"]
    assert seen["create_e"][0] == 10194
    assert seen["pause_d"]["error"]["err_code"] == 10194
    assert seen["fetched"] == 0  # no deliveries while the stream is stopped


async def check_online(url: str) -> dict[str, Any]:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    t, p = await js.stream_info("T"), await js.stream_info("P")
    c = await raw(nc, f"{API}.CONSUMER.INFO.P.C")
    seen = {"t": (t.state.messages, t.state.last_seq, t.config.allow_msg_ttl),
            "p": (p.state.messages, p.state.last_seq), "c_paused": (c.get("paused"), c["config"].get("pause_until")),
            "list_offline": (await raw(nc, f"{API}.STREAM.LIST")).get("offline")}
    await nc.close()
    return seen


async def delete_the_unsupported(url: str) -> dict[str, Any]:
    """At level 0: delete C (the stream runs again: publish and deliver), then T."""
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    seen: dict[str, Any] = {"delete_c": await js.delete_consumer("P", "C")}
    seen["publish_p"] = (await js.publish("p.4", b"after")).seq
    sub = await js.pull_subscribe_bind("D", "P")
    seen["fetched"] = [msg.data for msg in await sub.fetch(4, timeout=5)]
    seen["delete_t"] = await js.delete_stream("T")
    seen["names"] = (await raw(nc, f"{API}.STREAM.NAMES"))["streams"]
    await nc.close()
    return seen
