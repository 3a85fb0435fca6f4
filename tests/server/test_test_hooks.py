"""The node's chaos test hooks (`server.test_hooks`) over real HTTP: off by default (404), and each hook's
view of a three-node cluster's LOCAL state.

Method: a `jsraft.testing.cluster.Cluster` (real nodes, TCP, files) runs in the test's trio loop with
`test_hooks` on (or off); each node gets a real `Monitor` listening on an ephemeral port, and the test
talks to it with the chaos harness's blocking client (`jsraft.testing.chaos.hooks.Hooks`) in a worker
thread — the same path the chaos harness takes against `jsraft serve --test-hooks` processes. Messages
are published through the node's embedded JetStream context with a `Nats-Msg-Id`; every wait is a poll
with a deadline.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
import trio

from jsraft.server.ops.monitor import Monitor
from jsraft.testing.chaos.hooks import HookError, Hooks
from jsraft.testing.cluster import Cluster

STREAM = "HOOKS"


async def _call(hooks: Hooks, hook_method: str, *args: Any, **kwargs: Any) -> Any:
    return await trio.to_thread.run_sync(lambda: getattr(hooks, hook_method)(*args, **kwargs))


async def _monitors(nursery: trio.Nursery, cluster: Cluster) -> dict[str, Hooks]:
    hooks = {}
    for name in cluster.names:
        monitor = Monitor(cluster.node(name).monitor_parts, "127.0.0.1", 0)
        host, port = await nursery.start(monitor.run)
        monitor.mark_running()
        hooks[name] = Hooks(f"http://{host}:{port}", timeout_s=10)
    return hooks


async def test_hooks_off_by_default_answer_404(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 1, tmp_path, tick_ms=20) as cluster:
            await cluster.wait_ready()
            hooks = (await _monitors(nursery, cluster))["n1"]
            for hook in ("streams", "meta_state", "clock"):
                with pytest.raises(HookError) as raised:
                    await _call(hooks, "call", hook)
                assert raised.value.status == 404
            with pytest.raises(HookError) as raised:
                await _call(hooks, "set_clock", offset_s=5)
            assert raised.value.status == 405  # POST stays refused on a monitor without hooks
            nursery.cancel_scope.cancel()


def _converged(cluster: Cluster, last_seq: int) -> bool:
    for node in cluster.running():
        replica = node.streams.replicas.get(STREAM)
        if replica is None or replica.store is None or replica.store.state().last_seq < last_seq:
            return False
    return True


async def test_each_hook_on_a_three_node_cluster(tmp_path):
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, tmp_path, tick_ms=20, election_ticks=25,
                                 node_options={"test_hooks": True}) as cluster:
            await cluster.wait_ready(30)
            hooks = await _monitors(nursery, cluster)
            js = cluster.node("n1").jetstream()
            await js.add_stream(name=STREAM, subjects=["hooks.>"], num_replicas=3)
            payloads = {f"v{i}": bytes([i]) * (10 + i) for i in range(1, 6)}
            seqs = {}
            for value, payload in payloads.items():
                seqs[value] = (await js.publish(f"hooks.{value}", payload, msg_id=value, timeout=10)).seq
            await js.delete_msg(STREAM, seqs["v3"])
            await js.add_consumer(STREAM, durable_name="C1", ack_policy="explicit")
            await cluster.wait_until(lambda: _converged(cluster, max(seqs.values())), 30, what="replicas")
            await cluster.wait_until(lambda: all(
                "C1" in (n.streams.replicas[STREAM].adapter.consumers.entries) for n in cluster.running()), 30,
                what="consumer on every replica")
            for name, node_hooks in hooks.items():
                await _check_node(name, node_hooks, payloads, seqs)
            await _check_clock(cluster, hooks["n2"])
            nursery.cancel_scope.cancel()


async def _check_node(name: str, hooks: Hooks, payloads: dict[str, bytes], seqs: dict[str, int]) -> None:
    assert await _call(hooks, "streams") == [STREAM]
    page = await _call(hooks, "replica_read", STREAM, 1, 2)
    assert len(page["messages"]) == 2 and page["next_seq"] == page["messages"][-1]["seq"] + 1
    # A generator: drained in the worker thread (the trio thread must stay free to serve the requests).
    messages = await trio.to_thread.run_sync(lambda: list(hooks.replica_read_all(STREAM, 2)))
    expected = [{"seq": seqs[v], "value": v, "subject": f"hooks.{v}", "size": len(p),
                 "hash": hashlib.sha256(p).hexdigest()[:16]} for v, p in payloads.items() if v != "v3"]
    assert [{k: m[k] for k in ("seq", "value", "subject", "size", "hash")} for m in messages] == expected, name
    state = await _call(hooks, "replica_state", STREAM)
    assert (state["last_seq"], state["msgs"], state["repairing"]) == (max(seqs.values()), 4, False)
    assert state["role"] in ("leader", "follower") and state["leader"] in ("n1", "n2", "n3")
    raft = await _call(hooks, "raft_state", "meta")
    assert raft["leader"] in ("n1", "n2", "n3") and raft["applied"] <= raft["commit"] <= raft["last_index"]
    assert (await _call(hooks, "raft_state", STREAM))["group"].startswith(f"S-{STREAM}")
    meta = await _call(hooks, "meta_state")
    assert list(meta["streams"]) == [STREAM] and meta["consumers"] == {STREAM: ["C1"]}
    consumer = await _call(hooks, "consumer_state", STREAM, "C1")
    assert consumer["delivered"] == {"consumer_seq": 0, "stream_seq": 0} and consumer["pending"] == []
    for bad in (("replica_state", "NOPE"), ("consumer_state", STREAM, "NOPE"), ("raft_state", "NOPE")):
        with pytest.raises(HookError) as raised:
            await _call(hooks, *bad)
        assert raised.value.status == 404, bad
    with pytest.raises(HookError) as raised:
        await _call(hooks, "call", "replica_read", stream=STREAM, from_seq="x")
    assert raised.value.status == 400


async def _check_clock(cluster: Cluster, hooks: Hooks) -> None:
    node = cluster.node("n2")
    before = node.clock.wall_ns()
    answer = await _call(hooks, "set_clock", offset_s=288)
    assert answer["offset_s"] == 288 and node.clock.wall_ns() - before >= 287 * 10**9
    answer = await _call(hooks, "set_clock", rate=2.0)
    assert answer == {**answer, "offset_s": 288, "rate": 2.0}
    with pytest.raises(HookError) as raised:
        await _call(hooks, "call", "meta_state", method="POST")
    assert raised.value.status == 405
    await _call(hooks, "set_clock", offset_s=0, rate=1.0)


def test_serve_flag_and_config_field():
    """`jsraft serve --test-hooks` sets `test_hooks`; without it (and in a config without the field) it is
    off; the config decoder knows the field (strict decoding would refuse an unknown one)."""
    import argparse

    from jsraft.cli.serve import add_parser, config_from_args
    from jsraft.server import NodeConfig

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    on = config_from_args(parser.parse_args(["serve", "-n", "a", "-sd", "/tmp/x", "--test-hooks"]))
    off = config_from_args(parser.parse_args(["serve", "-n", "a", "-sd", "/tmp/x"]))
    assert (on.test_hooks, off.test_hooks) == (True, False)
    assert NodeConfig.from_dict({"name": "a", "store_dir": "/tmp/x", "test_hooks": True}).test_hooks is True
    assert NodeConfig.from_dict({"name": "a", "store_dir": "/tmp/x"}).test_hooks is False


async def test_replica_read_lists_a_damaged_seq(tmp_path):
    """A flipped bit in a sealed block of a single node's R1 stream (no peer to repair from, the entries
    compacted out of the WAL): `replica_read` lists that seq as damaged and every other one as stored."""
    import random

    from jsraft.testing.chaos import disk_faults

    options = {"test_hooks": True, "stream_block_bytes": 64 << 10, "stream_snapshot_every_entries": 20}
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 1, tmp_path, tick_ms=20, node_options=options) as cluster:
            await cluster.wait_ready(30)
            js = cluster.node("n1").jetstream()
            await js.add_stream(name=STREAM, subjects=["hooks.>"], num_replicas=1)
            for i in range(200):
                await js.publish("hooks.x", bytes([i % 256]) * 1000, msg_id=f"v{i}", timeout=10)
            await cluster.stop("n1")
            fault = disk_faults.flip_bits(os.path.join(cluster.stream_dir("n1", STREAM), "msgs"), random.Random(1))
            await cluster.start_node("n1")
            await cluster.wait_ready(30)
            hooks = (await _monitors(nursery, cluster))["n1"]
            messages = await trio.to_thread.run_sync(lambda: list(hooks.replica_read_all(STREAM, 64)))
            assert [m for m in messages if m.get("damaged")] == [{"seq": fault["seq"], "damaged": True}]
            assert [m["seq"] for m in messages] == list(range(1, 201))
            nursery.cancel_scope.cancel()
