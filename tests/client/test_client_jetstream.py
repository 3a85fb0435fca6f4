"""`jsraft.client`'s JetStream context against a real node: stream management, publish and get round
trips (checked against the embedded context and the node's store), paging, and errors raised as
jsraft's own classes with the server's `err_code`.

Method: one node from `jsraft.open_node` (client port 0), a client from `jsraft.client.connect`, real TCP.
What the wire context returns is compared with what the node holds: `node.jetstream()` (the embedded
context) and the replica's store state. Error cases are chosen so each takes a different path on the
server (meta leader, stream leader, local config check, API body check) and is matched on class and
`err_code` — the numbers of nats-server's `errors.json`.
"""

from __future__ import annotations

import time

import pytest

import jsraft
import jsraft.client as jc
from client_kit import single
from jsraft.errors import InvalidConfig, MsgDeleteFailed, NoMessageFound, StreamNotFound
from jsraft.jsapi import StorageType, StreamConfig


async def test_stream_admin_round_trip(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            js = client.jetstream()
            info = await js.add_stream(name="ORDERS", subjects=["orders.>"], max_msgs=100)
            assert (info.config.name, info.config.subjects, info.config.max_msgs) == ("ORDERS", ("orders.>",), 100)
            assert info.config.duplicate_window == 120_000_000_000  # served with the server's defaults
            assert info.state["messages"] == 0 and info.cluster == {}  # a standalone create answers none
            assert (await js.stream_info("ORDERS")).cluster == {"leader": "n1"}
            assert node.meta.names() == ["ORDERS"]

            await js.add_stream(StreamConfig(name="AUDIT", subjects=("audit.*",), storage=StorageType.memory))
            assert await js.stream_names() == ["AUDIT", "ORDERS"]
            assert [i.config.name for i in await js.streams()] == ["AUDIT", "ORDERS"]
            assert (await js.stream_info("AUDIT")).config.storage is StorageType.memory

            updated = await js.update_stream(name="ORDERS", subjects=["orders.>", "returns.>"], max_msgs=200)
            assert (updated.config.subjects, updated.config.max_msgs) == (("orders.>", "returns.>"), 200)
            assert (await node.jetstream().stream_info("ORDERS")).config.max_msgs == 200

            assert await js.delete_stream("AUDIT") is True
            assert await js.stream_names() == ["ORDERS"]
            with pytest.raises(StreamNotFound):
                await js.stream_info("AUDIT")


async def test_publish_get_delete_purge_round_trip(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            js, embedded = client.jetstream(), node.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.*"])
            before_ns = time.time_ns()
            acks = [await js.publish(f"orders.{i % 3}", f"order {i}".encode(), headers={"Index": str(i)})
                    for i in range(12)]
            assert [(a.stream, a.seq, a.duplicate) for a in acks] == [("ORDERS", i + 1, False) for i in range(12)]

            again = await js.publish("orders.0", b"once", msg_id="id-1")
            duplicate = await js.publish("orders.0", b"once", msg_id="id-1")
            assert (again.seq, duplicate.seq, duplicate.duplicate) == (13, 13, True)
            assert (await js.publish("orders.1", b"next", expected_last_seq=13)).seq == 14
            mine = await embedded.publish("orders.2", b"from the embedded context")
            assert mine.seq == 15

            got = await js.get_msg("ORDERS", 5)
            assert (got.subject, got.seq, got.data, got.stream) == ("orders.1", 5, b"order 4", "ORDERS")
            assert got.headers == {"Index": "4"}
            assert before_ns <= got.time_ns <= time.time_ns()
            reference = await embedded.get_msg("ORDERS", 5)
            assert (reference.data, reference.headers, reference.time_ns) == (got.data, got.headers, got.time_ns)
            last = await js.get_msg("ORDERS", last_by_subj="orders.2")
            assert (last.seq, last.data, last.headers) == (15, b"from the embedded context", None)

            assert await js.delete_msg("ORDERS", 5) is True
            with pytest.raises(NoMessageFound):
                await embedded.get_msg("ORDERS", 5)
            state = node.streams.replicas["ORDERS"].store.state()
            info = await js.stream_info("ORDERS")
            assert (info.state["messages"], info.state["last_seq"], info.state["bytes"]) == \
                (state.msgs, state.last_seq, state.bytes) == (14, 15, state.bytes)

            assert await js.purge_stream("ORDERS", subject="orders.0") == 5  # seqs 1, 4, 7, 10, 13
            assert await js.purge_stream("ORDERS", keep=2) == 7
            after = await js.stream_info("ORDERS")
            assert (after.state["messages"], after.state["first_seq"], after.state["last_seq"]) == (2, 14, 15)


async def test_errors_come_back_as_jsraft_classes_with_the_server_codes(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            js = client.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.>"])
            await js.publish("orders.1", b"one")

            with pytest.raises(StreamNotFound) as info:
                await js.stream_info("MISSING")
            assert (info.value.err_code, info.value.http_code, info.value.description) == \
                (10059, 404, "stream not found")
            for call in (js.delete_stream("MISSING"), js.purge_stream("MISSING"), js.get_msg("MISSING", 1),
                         js.update_stream(name="MISSING", subjects=["m"])):
                with pytest.raises(StreamNotFound):
                    await call
            with pytest.raises(StreamNotFound, match="no stream matches"):
                await js.publish("nowhere.1", b"no stream listens here")

            with pytest.raises(NoMessageFound) as info:
                await js.get_msg("ORDERS", 99)
            assert (info.value.err_code, info.value.http_code) == (10037, 404)
            with pytest.raises(MsgDeleteFailed) as info:
                await js.delete_msg("ORDERS", 99)
            assert info.value.err_code == 10057

            with pytest.raises(InvalidConfig) as info:  # refused by the server's stream leader / meta rules
                await js.update_stream(name="ORDERS", subjects=["orders.>"], storage="memory")
            assert info.value.err_code == 10052 and "storage type" in info.value.description
            with pytest.raises(InvalidConfig, match="stream name"):  # refused locally, nothing sent
                await js.add_stream(name="BAD.NAME")

            # Conditions whose classes live above the client keep the server's numbers.
            with pytest.raises(jc.ApiError) as info:
                await js.add_stream(name="CLASH", subjects=["orders.eu"])
            assert (info.value.err_code, info.value.http_code, info.value.description) == \
                (10065, 400, "subjects overlap with an existing stream")
            with pytest.raises(jc.ApiError) as info:
                await js.add_stream(name="ORDERS", subjects=["orders.>"], max_msgs=5)
            assert info.value.err_code == 10058  # stream name already in use, other config
            with pytest.raises(jc.ApiError) as info:
                await js.publish("orders.1", b"two", expected_last_seq=7)
            assert (info.value.err_code, info.value.description) == (10071, "wrong last sequence: 1")
            assert (await js.stream_info("ORDERS")).state["last_seq"] == 1  # nothing refused was stored
            await js.publish("orders.2", b"two")
            await js.publish("orders.3", b"three")
            assert await js.delete_msg("ORDERS", 2) is True
            with pytest.raises(jc.ApiError) as info:  # deleted already, inside the stream's sequences
                await js.delete_msg("ORDERS", 2)
            assert (info.value.err_code, info.value.http_code, info.value.description) == \
                (10043, 400, "sequence 2 not found")


async def test_listings_follow_the_api_paging(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        async with await jc.connect(node.url) as client:
            js = client.jetstream()
            for i in range(5):
                await js.add_stream(name=f"S{i}", subjects=[f"s{i}.>"], storage="memory")
            pages: list[dict] = []
            real_api = js._api

            async def small_pages(tail, body=None, timeout=None):
                answer = await real_api(tail, body, timeout)
                if tail in ("STREAM.NAMES", "STREAM.LIST"):  # cut each page to two, as a busy server might
                    answer["streams"] = answer["streams"][:2]
                    pages.append(body)
                return answer

            js._api = small_pages
            assert await js.stream_names() == [f"S{i}" for i in range(5)]
            assert pages == [{"offset": 0}, {"offset": 2}, {"offset": 4}]
            assert [info.config.name for info in await js.streams()] == [f"S{i}" for i in range(5)]
