"""nats-py's JetStream manager against the JetStream JSON API of a real node: stream admin, publishes
with every expected-header, message get/delete, purge, direct get, account info, exact error objects,
and an R3 stream managed through a follower of a three-node cluster.

Method: a node from `jsraft.open_node` (client port 0) or a `jsraft.testing.cluster.Cluster`; each
scenario is nats-py code run under asyncio in a worker thread (`nats_kit.in_asyncio`) with its own
timeout. What nats-py returns or raises is what a nats-server user would see, so the assertions are
on nats-py's values (`StreamInfo`, `PubAck`, `RawStreamMsg`, `APIError.err_code`) and, where the
exact bytes matter (error objects, the response `type`), on raw `nc.request` answers. Waits are polls
with deadlines (`poll`, `nats_kit.until`), never sleeps that hope.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import nats.errors
import nats.js.errors
import pytest
import trio

import jsraft
from jsraft.testing.cluster import Cluster
from nats_kit import in_asyncio, interest, nats_connect, single, until

API = "$JS.API"


async def poll(check: Any, what: str, timeout_s: float = 10.0) -> Any:
    """Await `check()` until it returns something truthy, or fail after `timeout_s` (asyncio side)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            found = await check()
        except (nats.errors.Error, asyncio.TimeoutError):
            found = None
        if found:
            return found
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def raw(nc: Any, subject: str, body: bytes = b"", headers: dict[str, str] | None = None) -> dict[str, Any]:
    msg = await nc.request(subject, body, timeout=10, headers=headers)
    return json.loads(msg.data)


def error_of(answer: dict[str, Any]) -> tuple[int, int, str]:
    error = answer["error"]
    return error["code"], error["err_code"], error["description"]


# --- Stream admin -------------------------------------------------------------------------------------


async def test_stream_admin_create_info_update_list_names_delete(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        seen = {"created": await js.add_stream(name="ORDERS", subjects=["ORDERS.*"], max_age=3600)}
        seen["again"] = await js.add_stream(name="ORDERS", subjects=["ORDERS.*"], max_age=3600)
        with pytest.raises(nats.js.errors.BadRequestError) as clash:
            await js.add_stream(name="ORDERS", subjects=["ORDERS.*", "MORE.*"])
        seen["clash"] = clash.value.err_code
        await js.add_stream(name="AUDIT", subjects=["audit.>"], storage="memory", description="audit log")
        await js.add_stream(name="BILLING")  # subjects default to the name
        seen["updated"] = await js.update_stream(name="ORDERS", subjects=["ORDERS.*"], max_age=3600, max_msgs=10,
                                                 description="orders")
        seen["info"] = await js.stream_info("ORDERS")
        seen["list"] = await js.streams_info()
        seen["by_subject"] = await js.find_stream_name_by_subject("audit.eu.x")
        seen["names"] = await raw(nc, f"{API}.STREAM.NAMES")
        seen["names_page"] = await raw(nc, f"{API}.STREAM.NAMES", b'{"offset": 1}')
        seen["names_filter"] = await raw(nc, f"{API}.STREAM.NAMES", b'{"subject": "ORDERS.>"}')
        with pytest.raises(nats.js.errors.NotFoundError) as unknown:
            await js.find_stream_name_by_subject("nobody.here")
        seen["by_subject_none"] = unknown.value
        seen["deleted"] = await js.delete_stream("BILLING")
        with pytest.raises(nats.js.errors.NotFoundError) as gone:
            await js.stream_info("BILLING")
        seen["gone"] = gone.value.err_code, gone.value.description
        with pytest.raises(nats.js.errors.NotFoundError) as twice:
            await js.delete_stream("BILLING")
        seen["twice"] = twice.value.err_code
        seen["after"] = (await raw(nc, f"{API}.STREAM.NAMES"))["streams"]
        await nc.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(scenario, node.url)
    created, again, info, updated = seen["created"], seen["again"], seen["info"], seen["updated"]
    assert created.did_create is True and again.did_create is None
    assert created.config.subjects == ["ORDERS.*"] and created.config.max_age == 3600
    # nats-server's defaults, filled in and served back (durations in nanoseconds on the wire).
    assert (created.config.duplicate_window, created.config.max_msgs, created.config.num_replicas,
            created.config.storage, created.config.retention) == (120.0, -1, 1, "file", "limits")
    assert created.config.metadata == {"_nats.req.level": "0", "_nats.ver": "2.12.0", "_nats.level": "2"}
    # A standalone nats-server's create and update answers carry no cluster; its info names the leader.
    assert created.cluster is None and updated.cluster is None and created.created is not None
    assert info.cluster.leader == "n1" and info.cluster.name is None
    assert seen["clash"] == 10058  # JSStreamNameExistErr: same name, another config
    assert (updated.config.max_msgs, updated.config.description) == (10, "orders")
    assert (info.config.max_msgs, info.state.messages, info.state.consumer_count) == (10, 0, 0)
    assert info.created == created.created
    assert [(s.config.name, s.config.storage) for s in seen["list"]] == \
        [("AUDIT", "memory"), ("BILLING", "file"), ("ORDERS", "file")]
    assert seen["list"][1].config.subjects == ["BILLING"]
    assert seen["by_subject"] == "AUDIT"
    names = seen["names"]
    assert (names["type"], names["total"], names["offset"], names["limit"], names["streams"]) == \
        ("io.nats.jetstream.api.v1.stream_names_response", 3, 0, 1024, ["AUDIT", "BILLING", "ORDERS"])
    assert (seen["names_page"]["offset"], seen["names_page"]["streams"]) == (1, ["BILLING", "ORDERS"])
    assert (seen["names_filter"]["total"], seen["names_filter"]["streams"]) == (1, ["ORDERS"])
    assert seen["deleted"] is True
    assert seen["gone"] == (10059, "stream not found") and seen["twice"] == 10059
    assert seen["after"] == ["AUDIT", "ORDERS"]


async def test_stream_list_and_info_raw_shapes(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="A", subjects=["a.*"])
        await js.add_stream(name="B", subjects=["b.*"])
        for subject in ("a.x", "a.y", "a.x"):
            await js.publish(subject, b"payload")
        listing = await raw(nc, f"{API}.STREAM.LIST", b'{"subject": "a.>"}')
        info = await raw(nc, f"{API}.STREAM.INFO.A", b'{"subjects_filter": "a.*"}')
        iterator = await js.streams_info_iterator(offset=1)
        await nc.close()
        return listing, info, [s.config.name for s in iterator]

    async with jsraft.open_node(single(tmp_path)) as node:
        listing, info, iterated = await in_asyncio(scenario, node.url)
    assert (listing["type"], listing["total"], listing["offset"], listing["limit"]) == \
        ("io.nats.jetstream.api.v1.stream_list_response", 1, 0, 256)
    assert [s["config"]["name"] for s in listing["streams"]] == ["A"] and "missing" not in listing
    # A list serves the stored metadata only, an info the dynamic keys as well (both as nats-server).
    assert listing["streams"][0]["config"]["metadata"] == {"_nats.req.level": "0"}
    assert set(info["config"]["metadata"]) == {"_nats.req.level", "_nats.ver", "_nats.level"}
    assert "no_ack" not in info["config"] and "first_seq" not in info["config"]  # omitempty, as nats-server
    assert info["type"] == "io.nats.jetstream.api.v1.stream_info_response"
    state = info["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"], state["num_subjects"]) == (3, 1, 3, 2)
    assert state["subjects"] == {"a.x": 2, "a.y": 1}
    assert (info["total"], info["offset"], info["limit"]) == (2, 0, 100_000)
    # RFC 3339 UTC timestamps; the first message is no later than the last.
    assert state["first_ts"].endswith("Z") and state["last_ts"].endswith("Z") and info["created"].endswith("Z")
    assert state["first_ts"][:19] <= state["last_ts"][:19]
    assert info["config"]["duplicate_window"] == 120_000_000_000  # nanoseconds
    assert info["cluster"] == {"leader": "n1"}  # a standalone nats-server names only its leader
    assert iterated == ["B"]


# --- Publishing -----------------------------------------------------------------------------------------


async def test_publish_with_every_expected_header(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="ORDERS", subjects=["ORDERS.*"])
        acks, errors = [], {}
        acks.append(await js.publish("ORDERS.new", b"1", headers={"Nats-Msg-Id": "a"}))
        acks.append(await js.publish("ORDERS.new", b"1 again", headers={"Nats-Msg-Id": "a"}))  # duplicate
        acks.append(await js.publish("ORDERS.paid", b"2", stream="ORDERS"))
        with pytest.raises(nats.js.errors.BadRequestError) as wrong_stream:
            await js.publish("ORDERS.paid", b"x", stream="OTHER")
        errors["stream"] = wrong_stream.value
        acks.append(await js.publish("ORDERS.new", b"3", headers={"Nats-Expected-Last-Sequence": "2"}))
        with pytest.raises(nats.js.errors.BadRequestError) as wrong_last:
            await js.publish("ORDERS.new", b"x", headers={"Nats-Expected-Last-Sequence": "2"})
        errors["last"] = wrong_last.value
        acks.append(await js.publish("ORDERS.paid", b"4", headers={"Nats-Expected-Last-Subject-Sequence": "2"}))
        with pytest.raises(nats.js.errors.BadRequestError) as wrong_subject:
            await js.publish("ORDERS.new", b"x", headers={"Nats-Expected-Last-Subject-Sequence": "1"})
        errors["subject"] = wrong_subject.value
        # The last msg id is the id of the stream's last message (none for seq 4).
        with pytest.raises(nats.js.errors.BadRequestError) as no_last_id:
            await js.publish("ORDERS.new", b"x", headers={"Nats-Expected-Last-Msg-Id": "a"})
        errors["no_msg_id"] = no_last_id.value
        acks.append(await js.publish("ORDERS.new", b"5", headers={"Nats-Msg-Id": "c"}))
        acks.append(await js.publish("ORDERS.new", b"6", headers={"Nats-Msg-Id": "d",
                                                                  "Nats-Expected-Last-Msg-Id": "c"}))
        with pytest.raises(nats.js.errors.BadRequestError) as wrong_id:
            await js.publish("ORDERS.new", b"x", headers={"Nats-Expected-Last-Msg-Id": "c"})
        errors["msg_id"] = wrong_id.value
        errors["raw"] = await raw(nc, "ORDERS.new", b"x", headers={"Nats-Expected-Stream": "OTHER"})
        info = await js.stream_info("ORDERS")
        await nc.close()
        return acks, errors, info

    async with jsraft.open_node(single(tmp_path)) as node:
        acks, errors, info = await in_asyncio(scenario, node.url)
    assert [(a.stream, a.seq, a.duplicate) for a in acks] == [
        ("ORDERS", 1, None), ("ORDERS", 1, True), ("ORDERS", 2, None), ("ORDERS", 3, None), ("ORDERS", 4, None),
        ("ORDERS", 5, None), ("ORDERS", 6, None)]
    # The refused publish's PubAck as nats-server's: the error, the stream and "seq": 0.
    refused = {"code": 400, "err_code": 10060, "description": "expected stream does not match"}
    assert errors.pop("raw") == {"error": refused, "stream": "ORDERS", "seq": 0}
    described = {key: (e.code, e.err_code, e.description) for key, e in errors.items()}
    assert described == {
        "stream": (400, 10060, "expected stream does not match"),
        "last": (400, 10071, "wrong last sequence: 3"),
        "subject": (400, 10071, "wrong last sequence: 3"),
        "no_msg_id": (400, 10070, "wrong last msg ID: "),
        "msg_id": (400, 10070, "wrong last msg ID: d"),
    }
    # A refused publish consumes no sequence.
    assert (info.state.messages, info.state.last_seq) == (6, 6)


# --- Messages -------------------------------------------------------------------------------------------


async def test_get_delete_and_purge_messages(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="ORDERS", subjects=["ORDERS.*"])
        for i, subject in enumerate(["ORDERS.eu", "ORDERS.us", "ORDERS.eu", "ORDERS.us", "ORDERS.eu"]):
            await js.publish(subject, b"m%d" % (i + 1), headers={"Shop": subject[-2:]})
        seen = {"by_seq": await js.get_msg("ORDERS", seq=2),
                "last": await js.get_last_msg("ORDERS", "ORDERS.eu"),
                "raw": await raw(nc, f"{API}.STREAM.MSG.GET.ORDERS", b'{"seq": 1}'),
                "next": await raw(nc, f"{API}.STREAM.MSG.GET.ORDERS", b'{"seq": 2, "next_by_subj": "ORDERS.eu"}')}
        with pytest.raises(nats.js.errors.NotFoundError) as missing:
            await js.get_msg("ORDERS", seq=99)
        seen["missing"] = missing.value.err_code
        seen["deleted"] = await js.delete_msg("ORDERS", 2)
        seen["kept"] = await raw(nc, f"{API}.STREAM.MSG.DELETE.ORDERS", b'{"seq": 4, "no_erase": true}')
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.get_msg("ORDERS", seq=2)
        with pytest.raises(nats.js.errors.BadRequestError) as again:
            await js.delete_msg("ORDERS", 2)
        seen["delete_again"] = again.value.err_code, again.value.description
        seen["after_delete"] = await js.stream_info("ORDERS")
        seen["purge_eu"] = await raw(nc, f"{API}.STREAM.PURGE.ORDERS", b'{"filter": "ORDERS.eu", "keep": 1}')
        seen["after_eu"] = await js.stream_info("ORDERS", subjects_filter=">")
        seen["purged"] = await js.purge_stream("ORDERS", subject="ORDERS.eu")
        seen["after_all"] = await js.stream_info("ORDERS")
        await nc.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(scenario, node.url)
    by_seq, last = seen["by_seq"], seen["last"]
    assert (by_seq.subject, by_seq.seq, by_seq.data, by_seq.headers) == ("ORDERS.us", 2, b"m2", {"Shop": "us"})
    assert (last.subject, last.seq, last.data) == ("ORDERS.eu", 5, b"m5")
    message = seen["raw"]["message"]
    assert seen["raw"]["type"] == "io.nats.jetstream.api.v1.stream_msg_get_response"
    assert (message["subject"], message["seq"], base64.b64decode(message["data"])) == ("ORDERS.eu", 1, b"m1")
    assert base64.b64decode(message["hdrs"]) == b"NATS/1.0\r\nShop: eu\r\n\r\n" and message["time"].endswith("Z")
    assert seen["next"]["message"]["seq"] == 3
    assert seen["missing"] == 10037
    assert seen["deleted"] is True and seen["kept"] == {
        "type": "io.nats.jetstream.api.v1.stream_msg_delete_response", "success": True}
    assert seen["delete_again"] == (10043, "sequence 2 not found")  # JSSequenceNotFoundErrF, 400
    assert (seen["after_delete"].state.messages, seen["after_delete"].state.num_deleted) == (3, 2)
    assert seen["purge_eu"] == {"type": "io.nats.jetstream.api.v1.stream_purge_response", "success": True,
                                "purged": 2}
    assert seen["after_eu"].state.subjects == {"ORDERS.eu": 1}
    assert seen["purged"] is True and seen["after_all"].state.messages == 0


async def test_direct_get(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="KV", subjects=["kv.>"], allow_direct=True)
        await js.add_stream(name="PLAIN", subjects=["plain.>"])
        await js.publish("kv.a", b"one", headers={"Owner": "x"})
        await js.publish("kv.b", b"two")
        await js.publish("kv.a", b"three")
        seen = {"seq": await js.get_msg("KV", seq=1, direct=True),
                "last": await js.get_msg("KV", subject="kv.a", direct=True)}
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.get_msg("KV", seq=42, direct=True)
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.get_msg("KV", subject="kv.none", direct=True)
        with pytest.raises(nats.errors.NoRespondersError):  # no allow_direct: nobody serves it
            await nc.request(f"{API}.DIRECT.GET.PLAIN", b'{"seq": 1}', timeout=5)
        empty = await nc.request(f"{API}.DIRECT.GET.KV", b"", timeout=5)
        seen["empty"] = (empty.headers, empty.data)
        await nc.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(scenario, node.url)
    first, last = seen["seq"], seen["last"]
    assert (first.subject, first.seq, first.data) == ("kv.a", 1, b"one")
    assert first.headers["Owner"] == "x"
    assert (first.headers["Nats-Stream"], first.headers["Nats-Subject"], first.headers["Nats-Sequence"]) == \
        ("KV", "kv.a", "1")
    assert first.headers["Nats-Time-Stamp"].endswith("Z") and first.time is not None
    assert (last.subject, last.seq, last.data, last.headers["Nats-Sequence"]) == ("kv.a", 3, b"three", "3")
    assert seen["empty"] == ({"Status": "408", "Description": "Empty Request"}, b"")


# --- Account info and the API's own errors --------------------------------------------------------------


async def test_account_info_counts_streams_bytes_and_api_calls(tmp_path):
    async def scenario(url):
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        before = await js.account_info()
        await js.add_stream(name="DISK", subjects=["disk.>"], max_bytes=1 << 20)
        await js.add_stream(name="RAM", subjects=["ram.>"], storage="memory")
        await js.publish("disk.x", b"d" * 100)
        await js.publish("ram.x", b"r" * 10)
        disk, ram = await js.stream_info("DISK"), await js.stream_info("RAM")
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.stream_info("NOPE")
        await js.get_msg("DISK", seq=1)  # a message get that succeeds counts nowhere in nats-server
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.get_msg("DISK", seq=99)  # one that fails counts, as a request and as an error
        after = await js.account_info()
        raw_info = await raw(nc, f"{API}.INFO")
        await nc.close()
        return before, after, disk.state.bytes, ram.state.bytes, raw_info

    async with jsraft.open_node(single(tmp_path)) as node:
        before, after, disk_bytes, ram_bytes, raw_info = await in_asyncio(scenario, node.url)
    assert (before.streams, before.storage, before.memory, before.api.total, before.api.errors) == (0, 0, 0, 0, 0)
    assert (after.streams, after.consumers, after.storage, after.memory) == (2, 0, disk_bytes, ram_bytes)
    assert disk_bytes > 100 and ram_bytes > 10
    # An INFO answer counts the requests answered before it: the first INFO, 2 creates, 2 stream infos,
    # the failed one and the failed message get make 7, 2 of them errors (publishes are not counted,
    # nor is a message get that found its message).
    assert (after.api.total, after.api.errors, after.api.level) == (7, 2, 2)
    assert after.limits.max_streams == -1 and after.limits.max_bytes_required is False
    assert raw_info["type"] == "io.nats.jetstream.api.v1.account_info_response"
    assert raw_info["reserved_storage"] == 1 << 20 and raw_info["api"]["total"] == 8


async def test_bad_requests_answer_jetstreams_exact_error_objects(tmp_path):
    async def scenario(url, node):
        nc = await nats_connect(url)
        watcher = await nc.subscribe(f"{API}.>")
        await until(lambda: interest(node, f"{API}.STREAM.NAMES") == 2, "the watcher and the API")
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.*"])
        create = f"{API}.STREAM.CREATE.X"
        answers = {
            "bad_json": await raw(nc, create, b"{bad"),
            "unknown": await raw(nc, create, b'{"name": "X", "subjects": ["x"], "frobnicate": 1}'),
            "wrong_type": await raw(nc, create, b'{"name": "X", "max_msgs": "ten"}'),
            "mismatch": await raw(nc, create, b'{"name": "Y"}'),
            "no_name": await raw(nc, create, b""),
            "invalid": await raw(nc, create, b'{"name": "X", "max_msgs": -5}'),
            "update_unknown": await raw(nc, f"{API}.STREAM.UPDATE.S", b'{"name": "S", "bogus": true}'),
            "info_bad_json": await raw(nc, f"{API}.STREAM.INFO.S", b'{"subjects_filter": '),
            "msg_get_empty": await raw(nc, f"{API}.STREAM.MSG.GET.S"),
            "msg_get_unknown": await raw(nc, f"{API}.STREAM.MSG.GET.S", b'{"sequence": 1}'),
            "delete_body": await raw(nc, f"{API}.STREAM.DELETE.S", b'{"really": true}'),
            "purge_seq_keep": await raw(nc, f"{API}.STREAM.PURGE.S", b'{"seq": 2, "keep": 1}'),
            "level": await raw(nc, f"{API}.STREAM.INFO.S", headers={"Nats-Required-Api-Level": "9"}),
            "stepdown": await raw(nc, f"{API}.STREAM.LEADER.STEPDOWN.S"),
            "info_missing": await raw(nc, f"{API}.STREAM.INFO.NOPE"),
            "purge_missing": await raw(nc, f"{API}.STREAM.PURGE.NOPE"),
            "names_bad": await raw(nc, f"{API}.STREAM.NAMES", b"{nope"),
            "list_bad": await raw(nc, f"{API}.STREAM.LIST", b"{nope"),
            "names_none": await raw(nc, f"{API}.STREAM.NAMES", b'{"subject": "nobody.*"}'),
        }
        seen = []
        while len(seen) < len(answers) + 1:  # the create of S, then every request above, in order
            seen.append((await watcher.next_msg(timeout=5)).subject)
        await nc.close()
        return answers, seen

    async with jsraft.open_node(single(tmp_path)) as node:
        answers, seen = await in_asyncio(scenario, node.url, node)
    create_type = "io.nats.jetstream.api.v1.stream_create_response"
    assert answers["bad_json"] == {"type": create_type, "error": {
        "code": 400, "err_code": 10025,
        "description": "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"}}
    assert answers["unknown"] == {"type": create_type, "error": {
        "code": 400, "err_code": 10025, "description": 'invalid JSON: json: unknown field "frobnicate"'}}
    assert error_of(answers["wrong_type"])[:2] == (400, 10025) and "max_msgs" in error_of(answers["wrong_type"])[2]
    assert answers["mismatch"] == {"type": create_type, "error": {
        "code": 400, "err_code": 10056, "description": "stream name in subject does not match request"}}
    assert error_of(answers["no_name"]) == (400, 10056, "stream name in subject does not match request")
    assert answers["invalid"] == {"type": create_type, "error": {
        "code": 500, "err_code": 10052, "description": "max_msgs must be -1 (unlimited) or positive"}}
    assert answers["update_unknown"] == {"type": "io.nats.jetstream.api.v1.stream_update_response", "error": {
        "code": 400, "err_code": 10025, "description": 'invalid JSON: json: unknown field "bogus"'}}
    assert error_of(answers["info_bad_json"])[:2] == (400, 10025)
    assert answers["msg_get_empty"] == {"type": "io.nats.jetstream.api.v1.stream_msg_get_response", "error": {
        "code": 400, "err_code": 10003, "description": "bad request"}}
    assert error_of(answers["msg_get_unknown"]) == (400, 10025, 'invalid JSON: json: unknown field "sequence"')
    assert answers["delete_body"] == {"type": "io.nats.jetstream.api.v1.stream_delete_response", "error": {
        "code": 400, "err_code": 10038, "description": "expected an empty request payload"}}
    assert error_of(answers["purge_seq_keep"]) == (400, 10003, "bad request")
    assert error_of(answers["level"])[:2] == (412, 10185)
    assert answers["stepdown"] == {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response", "error": {
        "code": 503, "err_code": 10010, "description": "JetStream clustering support required"}}
    # An error answer keeps the fields nats-server's response struct always carries, at zero.
    not_found = {"code": 404, "err_code": 10059, "description": "stream not found"}
    assert answers["info_missing"] == {"type": "io.nats.jetstream.api.v1.stream_info_response",
                                       "error": not_found, "total": 0, "offset": 0, "limit": 0}
    assert answers["purge_missing"] == {"type": "io.nats.jetstream.api.v1.stream_purge_response",
                                        "error": not_found, "purged": 0}
    assert {key: answers["names_bad"][key] for key in ("total", "offset", "limit", "streams")} == \
        {"total": 0, "offset": 0, "limit": 0, "streams": None}
    assert {key: answers["list_bad"][key] for key in ("total", "offset", "limit", "streams")} == \
        {"total": 0, "offset": 0, "limit": 0, "streams": []}
    assert (answers["names_none"]["total"], answers["names_none"]["streams"]) == (0, None)  # Go's nil slice
    # Requests are ordinary messages: a client subscribed to `$JS.API.>` saw every one of them.
    assert seen[0] == f"{API}.STREAM.CREATE.S" and seen.count(f"{API}.STREAM.CREATE.X") == 6
    assert seen[-1] == f"{API}.STREAM.NAMES"


# --- A cluster, through a follower ----------------------------------------------------------------------


async def test_r3_stream_managed_through_a_follower(tmp_path):
    async def scenario(url, other_url, cluster):
        nc, other = await nats_connect(url), await nats_connect(other_url)
        js = nc.jetstream(timeout=10)
        seen = {"created": await js.add_stream(name="ORDERS", subjects=["ORDERS.*"], num_replicas=3)}
        # Another node knows the stream as soon as the create is answered (read barrier, no polling).
        seen["elsewhere"] = ((await raw(other, f"{API}.STREAM.NAMES"))["streams"],
                             (await other.jetstream().stream_info("ORDERS")).config.num_replicas)
        acks = [await js.publish("ORDERS.new", b"m%d" % i, headers={"Nats-Msg-Id": f"id-{i}"}) for i in range(20)]
        acks.append(await js.publish("ORDERS.new", b"m0", headers={"Nats-Msg-Id": "id-0"}))
        seen["acks"] = [(a.seq, a.duplicate) for a in acks]

        async def all_current():
            info = await js.stream_info("ORDERS")
            replicas = info.cluster.replicas or []
            return info if len(replicas) == 2 and all(r.current for r in replicas) else None

        seen["info"] = await poll(all_current, "both followers current")
        old_leader = seen["info"].cluster.leader
        seen["stepdown"] = await raw(nc, f"{API}.STREAM.LEADER.STEPDOWN.ORDERS")

        async def moved():
            info = await js.stream_info("ORDERS")
            return info if info.cluster.leader not in (None, old_leader) else None

        seen["moved"] = await poll(moved, "a new stream leader")
        seen["after"] = await js.publish("ORDERS.new", b"after stepdown", headers={"Nats-Expected-Last-Sequence": "20"})
        seen["get"] = await js.get_msg("ORDERS", seq=21)
        seen["purge"] = await raw(nc, f"{API}.STREAM.PURGE.ORDERS", b'{"seq": 11}')
        seen["state"] = (await js.stream_info("ORDERS")).state
        seen["old_leader"] = old_leader
        meta_leader = trio.from_thread.run_sync(cluster.node("n1").meta_leader)
        seen["meta_stepdown"] = await raw(nc, f"{API}.META.LEADER.STEPDOWN")
        await until(lambda: cluster.node("n1").meta_leader() not in (None, meta_leader), "a new meta leader")
        seen["names"] = (await raw(nc, f"{API}.STREAM.NAMES"))["streams"]
        seen["deleted"] = await js.delete_stream("ORDERS")
        with pytest.raises(nats.js.errors.NotFoundError):
            await other.jetstream().stream_info("ORDERS")
        await nc.close()
        await other.close()
        return seen

    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=10) as cluster:
            leader = await cluster.wait_for_meta_leader()
            await cluster.wait_ready()
            follower, other = [name for name in cluster.names if name != leader]
            seen = await in_asyncio(scenario, cluster.node(follower).url, cluster.node(other).url, cluster,
                                    timeout_s=60)
            await cluster.wait_until(lambda: all("ORDERS" not in cluster.node(n).streams.replicas
                                                 for n in cluster.names))
    created, info = seen["created"], seen["info"]
    assert created.did_create is True and created.config.num_replicas == 3
    assert seen["elsewhere"] == (["ORDERS"], 3)
    assert seen["acks"] == [(seq, None) for seq in range(1, 21)] + [(1, True)]
    assert info.cluster.name == "test" and info.cluster.leader in ("n1", "n2", "n3")
    assert sorted(r.name for r in info.cluster.replicas) == sorted(set(("n1", "n2", "n3")) - {info.cluster.leader})
    assert (info.state.messages, info.state.last_seq) == (20, 20)
    assert seen["stepdown"] == {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response",
                                "success": True}
    assert seen["moved"].cluster.leader != seen["old_leader"]
    assert seen["after"].seq == 21 and seen["get"].data == b"after stepdown"
    assert seen["purge"]["purged"] == 10
    assert (seen["state"].messages, seen["state"].first_seq, seen["state"].last_seq) == (11, 11, 21)
    assert seen["meta_stepdown"] == {"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response",
                                     "success": True}
    assert seen["names"] == ["ORDERS"] and seen["deleted"] is True
