"""`jsraft.start_in_thread`: an asyncio program embeds a node and talks to it with nats-py; the node stops
cleanly, and its store directory starts again.

Method: plain (non-trio) tests, as a user's program would be: `asyncio.run` of a program that calls
`jsraft.start_in_thread(config)`, creates a stream through nats-py's JetStream manager, publishes and
reads back, then stops the node. A clean stop is proven by the thread being gone and by what it leaves on
disk: the stream store's fast-recovery index is written by a clean `FileStore.close` (while the node runs
there is none, or only the empty store's that formatting the stream's directory left), and a second `start_in_thread` on the same directory serves every message.
Startup errors must arrive in the caller's thread as the errors themselves.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import nats
import pytest
import trio

import jsraft
import jsraft.client as jc
from jsraft.server import IdentityMismatch


def config(store_dir: str, name: str = "emb", **overrides) -> dict:
    return {"name": name, "store_dir": store_dir, "cluster_port": 0, "client_port": 0, "tick_ms": 20,
            "election_ticks": 5, "test_mode": True, **overrides}


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


async def first_run(store_dir: str, index: str) -> tuple[jsraft.ThreadNode, list, list, bytes | None]:
    node = jsraft.start_in_thread(config(store_dir))
    try:
        assert node.running and node.name == "emb" and node.url == f"nats://127.0.0.1:{node.client_port}"
        nc = await nats.connect(node.url, connect_timeout=5, allow_reconnect=False)
        try:
            jsm = nc.jetstream()
            await jsm.add_stream(name="ORDERS", subjects=["orders.>"])
            acks = [await jsm.publish(f"orders.{i}", f"order {i}".encode()) for i in range(20)]
            msgs = [await jsm.get_msg("ORDERS", seq) for seq in (1, 20)]
            info = await jsm.stream_info("ORDERS")
            assert (info.state.messages, info.state.last_seq) == (20, 20)
        finally:
            await nc.close()
        running_index = _read(index)  # none yet, or the empty store's the stream's formatting wrote
    finally:
        node.stop()
    return node, acks, msgs, running_index


async def second_run(store_dir: str) -> list[bytes]:
    with jsraft.start_in_thread(config(store_dir)) as node:
        nc = await nats.connect(node.url, connect_timeout=5, allow_reconnect=False)
        try:
            jsm = nc.jetstream()
            return [(await jsm.get_msg("ORDERS", seq)).data for seq in range(1, 21)]
        finally:
            await nc.close()


def test_asyncio_program_embeds_a_node_and_stops_it_cleanly(tmp_path):
    store_dir = str(tmp_path / "data")
    index = os.path.join(store_dir, "streams", "ORDERS", "msgs", "index")
    node, acks, msgs, running_index = asyncio.run(asyncio.wait_for(first_run(store_dir, index), 60))
    assert [(ack.stream, ack.seq) for ack in acks] == [("ORDERS", i + 1) for i in range(20)]
    assert [(m.seq, m.subject, m.data) for m in msgs] == [(1, "orders.0", b"order 0"), (20, "orders.19", b"order 19")]
    assert not node.running and not node.thread.is_alive()
    assert node.thread not in threading.enumerate()
    closed_index = _read(index)
    assert closed_index is not None and closed_index != running_index, "the store was not closed cleanly"
    node.stop()  # idempotent

    assert asyncio.run(asyncio.wait_for(second_run(store_dir), 60)) == [f"order {i}".encode() for i in range(20)]
    assert not [t for t in threading.enumerate() if t.name.startswith("jsraft-node")]


def test_a_trio_program_uses_jsraft_client_against_a_threaded_node(tmp_path):
    """The other way round: the node on its thread, a trio program with `jsraft.client` on this one. The
    program ends without closing its client: its reader task must end with the run, quietly."""
    async def program(url: str) -> list[int]:
        client = await jc.connect(url)
        js = client.jetstream()
        await js.add_stream(name="EVENTS", subjects=["events.>"])
        return [(await js.publish("events.a", b"e")).seq for _ in range(3)]

    with jsraft.start_in_thread(config(str(tmp_path / "data"))) as node:
        assert trio.run(program, node.url) == [1, 2, 3]


def test_startup_errors_are_raised_in_the_callers_thread(tmp_path):
    store_dir = str(tmp_path / "data")
    with jsraft.start_in_thread(config(store_dir)):
        pass
    with pytest.raises(IdentityMismatch, match="belongs to node 'emb'"):
        jsraft.start_in_thread(config(store_dir, name="other"))

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(OSError):
            jsraft.start_in_thread(config(str(tmp_path / "busy"), client_port=busy.getsockname()[1]))
    assert not [t for t in threading.enumerate() if t.name.startswith("jsraft-node")]
