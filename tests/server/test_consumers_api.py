"""The consumer JSON API and the pull protocol's statuses against one node, through nats-py: create
(every subject form), info, names, list, delete, nats-server's error objects, ephemeral consumers
(generated names, the 5 s default and a short inactive threshold), and the `404` / `408` / `503`
statuses a pull request is answered with.

Method: a node from `jsraft.open_node` (client port 0); each scenario is nats-py code under asyncio in a
worker thread (`nats_kit.in_asyncio`). Exact answers are checked on raw `nc.request` replies (the JSON
nats-server sends, its `type`, `error.code`/`err_code`), the rest on nats-py's values. Statuses are read
as nats-py sees them (`Status` / `Description` headers of a message on the request's inbox). Waits are
polls with deadlines.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.js.api import ConsumerConfig

import jsraft
from nats_kit import in_asyncio, nats_connect, single

API = "$JS.API"


async def raw(nc: Any, subject: str, body: Any = b"") -> dict[str, Any]:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, payload, timeout=10)).data)


def error_of(answer: dict[str, Any]) -> tuple[int, int]:
    return answer["error"]["code"], answer["error"]["err_code"]


async def on_node(tmp_path, scenario) -> Any:
    async with jsraft.open_node(single(tmp_path)) as node:
        return await in_asyncio(scenario, node.url, timeout_s=60)


async def test_create_info_names_list_delete_and_their_shapes(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        await js.publish("s.a", b"1")
        seen: dict[str, Any] = {}
        seen["durable"] = await raw(nc, f"{API}.CONSUMER.DURABLE.CREATE.S.D",
                                    {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}})
        seen["named"] = await raw(nc, f"{API}.CONSUMER.CREATE.S.N.s.a",
                                  {"stream_name": "S", "config": {"name": "N", "filter_subject": "s.a"}})
        seen["legacy"] = await raw(nc, f"{API}.CONSUMER.CREATE.S", {"stream_name": "S", "config": {}})
        seen["again"] = await raw(nc, f"{API}.CONSUMER.DURABLE.CREATE.S.D",
                                  {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}})
        seen["info"] = await raw(nc, f"{API}.CONSUMER.INFO.S.D")
        seen["names"] = await raw(nc, f"{API}.CONSUMER.NAMES.S")
        seen["list"] = await raw(nc, f"{API}.CONSUMER.LIST.S")
        seen["page"] = await raw(nc, f"{API}.CONSUMER.NAMES.S", {"offset": 2})
        seen["stream"] = (await js.stream_info("S")).state.consumer_count
        seen["py_info"] = await js.consumer_info("S", "N")
        seen["delete"] = await raw(nc, f"{API}.CONSUMER.DELETE.S.D")
        seen["deleted"] = await raw(nc, f"{API}.CONSUMER.INFO.S.D")
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.consumer_info("S", "D")
        await nc.close()
        return seen

    seen = await on_node(tmp_path, scenario)
    durable = seen["durable"]
    assert durable["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
    assert (durable["stream_name"], durable["name"]) == ("S", "D")
    assert durable["config"]["durable_name"] == "D" and durable["config"]["ack_wait"] == 30_000_000_000
    assert durable["config"]["max_deliver"] == -1 and durable["config"]["max_waiting"] == 512
    assert "inactive_threshold" not in durable["config"]  # a durable stays
    assert durable["delivered"] == {"consumer_seq": 0, "stream_seq": 0}
    assert durable["ack_floor"] == {"consumer_seq": 0, "stream_seq": 0}
    assert (durable["num_pending"], durable["num_ack_pending"], durable["num_waiting"]) == (1, 0, 0)
    assert set(durable) >= {"created", "ts", "num_redelivered"}
    named = seen["named"]
    assert named["name"] == "N" and named["config"]["filter_subject"] == "s.a"
    assert named["config"]["inactive_threshold"] == 5_000_000_000  # an ephemeral's default
    legacy = seen["legacy"]
    assert len(legacy["name"]) == 8 and legacy["name"].isalnum()
    assert legacy["config"]["inactive_threshold"] == 5_000_000_000
    assert seen["again"]["created"] == durable["created"]  # same config: answered as it is
    assert seen["info"]["type"] == "io.nats.jetstream.api.v1.consumer_info_response"
    names = seen["names"]
    assert names["type"] == "io.nats.jetstream.api.v1.consumer_names_response"
    assert names["consumers"] == sorted(["D", "N", legacy["name"]])
    assert (names["total"], names["offset"], names["limit"]) == (3, 0, 1024)
    listed = seen["list"]
    assert [info["name"] for info in listed["consumers"]] == names["consumers"] and listed["limit"] == 256
    assert seen["page"]["consumers"] == names["consumers"][2:] and seen["page"]["offset"] == 2
    assert seen["stream"] == 3
    assert seen["py_info"].name == "N" and seen["py_info"].config.filter_subject == "s.a"
    assert seen["delete"] == {"type": "io.nats.jetstream.api.v1.consumer_delete_response", "success": True}
    assert error_of(seen["deleted"]) == (404, 10014)


async def test_create_refusals_use_nats_servers_codes(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        create = f"{API}.CONSUMER.CREATE.S"
        durable = {"durable_name": "D"}
        cases = {
            "stream_mismatch": (f"{create}.X", {"stream_name": "OTHER", "config": {"name": "X"}}),
            "durable_not_set": (f"{API}.CONSUMER.DURABLE.CREATE.S.D", {"stream_name": "S", "config": {}}),
            "durable_mismatch": (f"{API}.CONSUMER.DURABLE.CREATE.S.E", {"stream_name": "S", "config": durable}),
            "ephemeral_with_durable": (create, {"stream_name": "S", "config": durable}),
            "filter_mismatch": (f"{create}.F.s.b", {"stream_name": "S", "config": {"filter_subject": "s.a"}}),
            "multiple_filters": (f"{create}.F.s.b", {"stream_name": "S", "config": {"filter_subjects": ["s.b", "s.c"]}}),
            "unknown_field": (f"{create}.F", {"stream_name": "S", "config": {"bogus": 1}}),
            "unknown_request_field": (f"{create}.F", {"stream_name": "S", "config": {}, "bogus": 1}),
            "bad_config": (f"{create}.F", {"stream_name": "S", "config": {"rate_limit_bps": 100}}),
            "push": (f"{create}.F", {"stream_name": "S", "config": {"deliver_subject": "out", "max_waiting": 5}}),
            "no_stream": (f"{API}.CONSUMER.CREATE.NOPE.F", {"stream_name": "NOPE", "config": {}}),
            "update_missing": (f"{create}.U", {"stream_name": "S", "config": {}, "action": "update"}),
        }
        seen = {key: error_of(await raw(nc, subject, body)) for key, (subject, body) in cases.items()}
        await js.add_consumer("S", ConsumerConfig(durable_name="D", max_ack_pending=10))
        changed = {"durable_name": "D", "max_ack_pending": 20, "ack_policy": "explicit"}
        seen["create_exists"] = error_of(await raw(nc, f"{API}.CONSUMER.DURABLE.CREATE.S.D",
                                                   {"stream_name": "S", "config": changed, "action": "create"}))
        seen["fixed_field"] = error_of(await raw(nc, f"{API}.CONSUMER.DURABLE.CREATE.S.D",
                                                 {"stream_name": "S", "config": {**changed, "ack_policy": "all"}}))
        updated = await raw(nc, f"{API}.CONSUMER.DURABLE.CREATE.S.D", {"stream_name": "S", "config": changed})
        seen["updated"] = updated["config"]["max_ack_pending"]
        seen["info_body"] = error_of(await raw(nc, f"{API}.CONSUMER.INFO.S.D", b'{"x": 1}'))
        seen["info_no_stream"] = error_of(await raw(nc, f"{API}.CONSUMER.INFO.NOPE.D"))
        seen["delete_missing"] = error_of(await raw(nc, f"{API}.CONSUMER.DELETE.S.NOPE"))
        names_error = await raw(nc, f"{API}.CONSUMER.NAMES.NOPE")
        seen["names_error"] = (error_of(names_error), names_error["consumers"], names_error["total"])
        await nc.close()
        return seen

    seen = await on_node(tmp_path, scenario)
    assert seen == {
        "stream_mismatch": (400, 10056), "durable_not_set": (400, 10018),
        "durable_mismatch": (400, 10017), "ephemeral_with_durable": (400, 10020), "filter_mismatch": (400, 10131),
        "multiple_filters": (400, 10137), "unknown_field": (400, 10025), "unknown_request_field": (400, 10025),
        "bad_config": (400, 10086), "push": (400, 10080), "no_stream": (404, 10059), "update_missing": (400, 10149),
        "create_exists": (400, 10148), "fixed_field": (500, 10012), "updated": 20, "info_body": (400, 10038),
        "info_no_stream": (404, 10059), "delete_missing": (404, 10014), "names_error": ((404, 10059), [], 0),
    }


async def test_ephemeral_consumers_go_away_once_inactive(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        await js.add_consumer("S", ConsumerConfig(name="E", inactive_threshold=0.5))
        await js.publish("s.a", b"1")
        sub = await js.pull_subscribe_bind("E", stream="S")
        assert (await sub.fetch(1, timeout=5))[0].data == b"1"  # a pull request keeps it alive meanwhile
        started = time.monotonic()
        while True:
            try:
                await js.consumer_info("S", "E")
            except nats.js.errors.NotFoundError:
                break
            assert time.monotonic() - started < 10, "the inactive ephemeral was not deleted"
            await asyncio.sleep(0.05)
        gone_after = time.monotonic() - started
        durable = await js.add_consumer("S", ConsumerConfig(durable_name="KEEP"))
        await nc.close()
        return gone_after, durable.config.inactive_threshold

    gone_after, durable_threshold = await on_node(tmp_path, scenario)
    assert 0.2 < gone_after < 10
    assert durable_threshold is None


async def test_pull_request_statuses(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        await raw(nc, f"{API}.CONSUMER.DURABLE.CREATE.S.C",  # nats-py's ConsumerConfig has no max_batch
                  {"stream_name": "S", "config": {"durable_name": "C", "max_batch": 10}})
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        seen: dict[str, Any] = {}

        async def status(subject: str, body: Any) -> tuple[str | None, str | None, dict[str, str]]:
            await nc.publish(subject, json.dumps(body).encode() if not isinstance(body, bytes) else body, reply=inbox)
            msg = await sub.next_msg(timeout=5)
            headers = msg.headers or {}
            return headers.get("Status"), headers.get("Description"), headers

        next_c = f"{API}.CONSUMER.MSG.NEXT.S.C"
        seen["no_wait"] = (await status(next_c, {"batch": 1, "no_wait": True}))[:2]
        code, description, headers = await status(next_c, {"batch": 2, "expires": 200_000_000})
        seen["expired"] = (code, description, headers.get("Nats-Pending-Messages"))
        seen["max_batch"] = (await status(next_c, {"batch": 11}))[:2]
        # A second request on the same reply subject (nats-py's next fetch) is queued next to the first, as
        # nats-server's waitQueue keeps both: each is answered its own 408 (the later-expiring one last).
        await nc.publish(next_c, json.dumps({"batch": 1, "expires": 600_000_000}).encode(), reply=inbox)
        started = time.monotonic()
        first = (await status(next_c, {"batch": 1, "expires": 300_000_000}))[:2]
        first_after = time.monotonic() - started
        second = (await sub.next_msg(timeout=5)).headers or {}
        seen["both"] = (first, (second.get("Status"), second.get("Description")), first_after,
                        time.monotonic() - started)
        seen["bad"] = (await status(next_c, b'{"batch": "x"}'))[0]
        started = time.monotonic()
        seen["heartbeat"] = (await status(next_c, {"batch": 1, "expires": 700_000_000,
                                                   "idle_heartbeat": 200_000_000}))[:2]
        seen["heartbeat_after"] = time.monotonic() - started
        while (await sub.next_msg(timeout=5)).headers.get("Status") != "408":
            pass  # more heartbeats, until the request ends
        seen["unknown"] = (await status(f"{API}.CONSUMER.MSG.NEXT.S.NOPE", {"batch": 1}))[0]
        seen["no_stream"] = (await status(f"{API}.CONSUMER.MSG.NEXT.NOPE.C", {"batch": 1}))[0]
        pull = await js.pull_subscribe_bind("C", stream="S")
        with pytest.raises(nats.errors.TimeoutError):
            await pull.fetch(1, timeout=0.5)
        await js.publish("s.a", b"1")
        await js.publish("s.b", b"2")
        started = time.monotonic()
        msgs = await pull.fetch(5, timeout=5)  # two there: answered at once, then 404 ends the batch
        seen["partial"] = ([m.data for m in msgs], time.monotonic() - started)
        await nc.close()
        return seen

    seen = await on_node(tmp_path, scenario)
    assert seen["no_wait"] == ("404", "No Messages")
    assert seen["expired"] == ("408", "Request Timeout", "2")
    assert seen["max_batch"] == ("409", "Exceeded MaxRequestBatch of 10")
    timeout = ("408", "Request Timeout")
    assert seen["both"][:2] == (timeout, timeout) and 0.2 < seen["both"][2] < seen["both"][3] < 3, seen["both"]
    assert seen["bad"] == "400"
    assert seen["heartbeat"] == ("100", "Idle Heartbeat") and 0.1 < seen["heartbeat_after"] < 1.5
    assert seen["unknown"] == "503" and seen["no_stream"] == "503"
    data, waited = seen["partial"]
    assert data == [b"1", b"2"] and waited < 3
