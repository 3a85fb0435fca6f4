"""A stream's `republish` and `subject_transform` as nats-py sees them, on one node and on three.

Method: real nodes (`jsraft.open_node` for one; `jsraft.testing.cluster.Cluster` for three: real TCP,
files, routes) driven by nats-py under asyncio (`nats_kit.in_asyncio`). Each check waits for what it
expects with a deadline; "nothing more arrived" is checked after the publish's own ack and a PING/PONG
round trip on the subscriber's connection (`flush`), since the leader sends a message's republished copy
before it answers that publish, and on one node both go out in order. What is compared is what
nats-server sends for the same stream (server/stream.go `processJetStreamMsg`, checked by hand against
nats-server 2.15.1): the copy's subject, its payload, and its headers `Nats-Stream`, `Nats-Subject`,
`Nats-Sequence`, `Nats-Time-Stamp`, `Nats-Last-Sequence` (per exact subject, taken before the message
was stored, so a per-subject limit that removes it does not change it) and, for `headers_only`,
`Nats-Msg-Size` with an empty payload; the client's own headers kept. The three-node case subscribes on
a node that does not lead the stream and publishes on another, then moves the leader (`STREAM.LEADER.
STEPDOWN`) and publishes again: every message arrives exactly once. A copy is an ordinary publish: a
stream on the republish subject stores it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import trio

import jsraft
from nats_kit import in_asyncio, nats_connect, single, until
from test_consumers_nats import run_in_cluster, stream_leader


async def _collect(nc: Any, subject: str) -> tuple[Any, list[Any]]:
    got: list[Any] = []

    async def on_msg(msg: Any) -> None:
        got.append(msg)

    sub = await nc.subscribe(subject, cb=on_msg)
    await nc.flush()
    return sub, got


async def _wait_for(got: list[Any], count: int, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(got) < count:
        assert loop.time() < deadline, f"{len(got)} of {count} republished messages arrived"
        await asyncio.sleep(0.01)


async def _single_node(url: str) -> dict[str, Any]:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    # One message per subject kept: the previous one is gone by the time its successor is republished.
    await js.add_stream(name="R", subjects=["in.>"], max_msgs_per_subject=1,
                        republish={"src": "in.>", "dest": "out.>"})
    _, out = await _collect(nc, "out.>")
    acks = [await js.publish("in.a", b"one", headers={"X-Client": "kept"}),
            await js.publish("in.b", b"two"), await js.publish("in.a", b"three"), await js.publish("in.a", b"four")]
    refused = await nc.request("in.a", b"no", headers={"Nats-Expected-Last-Sequence": "99"})
    await _wait_for(out, 4)
    await nc.flush()
    seen: dict[str, Any] = {"acks": [ack.seq for ack in acks], "refused": json.loads(refused.data),
                            "out": [(m.subject, m.data, dict(m.headers or {})) for m in out]}
    raw = await nc.request("$JS.API.STREAM.MSG.GET.R", b'{"seq":2}')
    seen["b_time"] = json.loads(raw.data)["message"]["time"]
    # headers_only, by a stream update; then the republish taken away by another.
    await js.update_stream(name="R", subjects=["in.>"], max_msgs_per_subject=1,
                           republish={"src": "in.>", "dest": "ho.>", "headers_only": True})
    _, headers_only = await _collect(nc, "ho.>")
    await js.publish("in.c", b"12345")
    await _wait_for(headers_only, 1)
    seen["headers_only"] = [(m.subject, m.data, dict(m.headers or {})) for m in headers_only]
    await js.update_stream(name="R", subjects=["in.>"], max_msgs_per_subject=1)
    await js.publish("in.d", b"after")
    await nc.flush()
    seen["after_removal"] = (len(out), len(headers_only))
    seen["info_republish"] = (await js.stream_info("R")).config.republish
    # A subject the republish source does not match is stored all the same, and not republished.
    await js.add_stream(name="T", subjects=["t.*"], republish={"src": "t.a", "dest": "o.a"})
    _, others = await _collect(nc, "o.>")
    seen["unmatched_ack"] = (await js.publish("t.b", b"x")).seq
    seen["matched_ack"] = (await js.publish("t.a", b"y")).seq
    await _wait_for(others, 1)
    await nc.flush()
    seen["others"] = [(m.subject, m.headers["Nats-Sequence"]) for m in others]
    # A subject transform: stored under the transformed subject, and republished from it (implicit).
    await js.add_stream(name="X", subjects=["x.>"], subject_transform={"src": "x.>", "dest": "tx.>"},
                        republish={"src": ">", "dest": ">"})
    _, transformed = await _collect(nc, "tx.>")
    await js.publish("x.k", b"z")
    await _wait_for(transformed, 1)
    seen["transformed"] = [(m.subject, m.headers["Nats-Subject"]) for m in transformed]
    seen["stored_subject"] = (await js.get_msg("X", 1)).subject
    seen["x_config"] = (await js.stream_info("X")).config.republish
    # A copy is a publish like any other: a stream on its subject stores it.
    await js.add_stream(name="B", subjects=["chain.>"])
    await js.add_stream(name="A", subjects=["a.>"], republish={"src": "a.>", "dest": "chain.>"})
    await js.publish("a.1", b"c")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while (await js.stream_info("B")).state.messages < 1:
        assert loop.time() < deadline, "the republished copy was not stored by stream B"
        await asyncio.sleep(0.02)
    chained = await js.get_msg("B", 1)
    seen["chained"] = (chained.subject, chained.headers["Nats-Stream"], chained.headers["Nats-Subject"])
    await nc.close()
    return seen


async def test_republish_on_one_node_headers_last_sequence_update_and_transform(tmp_path):
    async with jsraft.open_node(single(tmp_path)) as node:
        seen = await in_asyncio(_single_node, node.url)
    assert seen["acks"] == [1, 2, 3, 4]
    assert seen["refused"]["error"]["err_code"] == 10071  # not stored: not republished either
    subjects = [subject for subject, _, _ in seen["out"]]
    assert subjects == ["out.a", "out.b", "out.a", "out.a"]
    assert [data for _, data, _ in seen["out"]] == [b"one", b"two", b"three", b"four"]
    headers = [h for _, _, h in seen["out"]]
    assert [h["Nats-Sequence"] for h in headers] == ["1", "2", "3", "4"]
    assert [h["Nats-Last-Sequence"] for h in headers] == ["0", "0", "1", "3"]  # per exact subject
    assert [h["Nats-Subject"] for h in headers] == ["in.a", "in.b", "in.a", "in.a"]
    assert {h["Nats-Stream"] for h in headers} == {"R"}
    assert headers[0]["X-Client"] == "kept" and "X-Client" not in headers[1]
    assert all("Nats-Msg-Size" not in h for h in headers)
    assert headers[1]["Nats-Time-Stamp"] == seen["b_time"]  # the stored message's own time
    ((subject, data, header),) = seen["headers_only"]
    assert (subject, data) == ("ho.c", b"")
    assert (header["Nats-Msg-Size"], header["Nats-Sequence"], header["Nats-Last-Sequence"]) == ("5", "5", "0")
    assert seen["after_removal"] == (4, 1) and seen["info_republish"] is None
    assert (seen["unmatched_ack"], seen["matched_ack"]) == (1, 2)
    assert seen["others"] == [("o.a", "2")]
    assert seen["transformed"] == [("tx.k", "tx.k")] and seen["stored_subject"] == "tx.k"
    assert (seen["x_config"].src, seen["x_config"].dest) == ("tx.>", "tx.>")
    assert seen["chained"] == ("chain.1", "A", "a.1")


async def test_republish_on_three_nodes_reaches_another_node_once_across_a_leader_change(tmp_path):
    async def scenario(cluster: Any, url: str) -> dict[str, Any]:
        admin = await nats_connect(url)
        js = admin.jetstream(timeout=10)
        await js.add_stream(name="C", subjects=["c.>"], num_replicas=3, republish={"src": "c.>", "dest": "rc.>"})
        await until(lambda: stream_leader(cluster, "C") is not None, "a leader for C")
        leader = trio.from_thread.run_sync(stream_leader, cluster, "C")
        listener_node, publisher_node = [name for name in cluster.names if name != leader][:2]
        listener = await nats_connect(cluster.node(listener_node).url)
        _, got = await _collect(listener, "rc.>")
        # The other nodes learn of the subscription over their routes before anything is published.
        others = [name for name in cluster.names if name != listener_node]
        await until(lambda: all(cluster.node(name).routes.interested_peers("rc.x") for name in others),
                    "the listener's interest at every other node")
        publisher = await nats_connect(cluster.node(publisher_node).url)
        pjs = publisher.jetstream(timeout=10)
        for i in range(5):
            await pjs.publish(f"c.{i}", f"m{i}".encode())
        await _wait_for(got, 5)
        answer = json.loads((await admin.request("$JS.API.STREAM.LEADER.STEPDOWN.C", b"", timeout=10)).data)
        await until(lambda: stream_leader(cluster, "C") not in (None, leader), "a new leader for C")
        for i in range(5, 11):
            await pjs.publish(f"c.{i}", f"m{i}".encode())
        # The last one is a sentinel: once it arrived, a duplicate of an earlier one sent by either leader
        # before it would have arrived too (each node's route to the listener keeps its order).
        await _wait_for(got, 11)
        await listener.flush()
        new_leader = trio.from_thread.run_sync(stream_leader, cluster, "C")
        seen = {"stepdown": answer, "leaders": (leader, new_leader), "listener": listener_node,
                "got": [(m.subject, m.data, m.headers["Nats-Sequence"]) for m in got]}
        for nc in (admin, listener, publisher):
            await nc.close()
        return seen

    seen = await run_in_cluster(tmp_path, scenario)
    assert seen["stepdown"].get("success") is True, seen["stepdown"]
    assert seen["leaders"][0] != seen["leaders"][1] and seen["listener"] not in seen["leaders"][:1]
    assert seen["got"] == [(f"rc.{i}", f"m{i}".encode(), str(i + 1)) for i in range(11)]
