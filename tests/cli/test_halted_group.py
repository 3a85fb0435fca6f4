"""A broken committed-entry rule on one stream halts that stream's group only, on a real node (issue #14).

Method: a single real node (`jsraft.open_node`, real files, loopback listeners on port 0) with two R1
streams and the monitor beside it. A crafted AppendEntries of a higher term, whose entry at index 1
conflicts with the committed log, is handed to the node's runtime for stream BAD's group: the core's rule
5 raises an `InvariantViolation`. Then `/healthz` names BAD as stopped (503), `/jsz` shows its group's
closed reason, an error log line names the group, and the node keeps serving: stream GOOD takes a publish,
and a new stream can be created (the meta group commits). Before the change the violation ended the node.
"""

from __future__ import annotations

import json
import logging

import trio

import jsraft
from jsraft.raft import AppendEntries, Entry, EntryType
from jsraft.runtime.group import HALTED_PREFIX
from jsraft.server import NodeConfig
from jsraft.server.ops.monitor import Monitor


async def _get(address: tuple[str, int], path: str) -> tuple[int, dict]:
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        answer = bytearray()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                answer += chunk
    head, _, body = bytes(answer).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_a_halted_stream_group_leaves_the_node_serving(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="jsraft.runtime.group")
    config = NodeConfig(name="h1", store_dir=str(tmp_path / "data"), cluster_name="halt", cluster_port=0,
                        client_port=0, tick_ms=20, election_ticks=5, test_mode=True, cluster_listen=True)
    async with jsraft.open_node(config) as node:
        monitor = Monitor(node.monitor_parts, "127.0.0.1", 0)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(monitor.run)
            monitor.mark_running()
            js = node.jetstream()
            for name in ("BAD", "GOOD"):
                await js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=1)
                await js.publish(f"{name}.x", b"before")
            group = node.streams.replicas["BAD"].group
            raft = node.runtime.status(group).raft
            term = raft.current_term + 5
            node.runtime.deliver(group, AppendEntries(
                from_id="h2", to_id="h1", term=term, leader_id="h2", prev_log_index=0, prev_log_term=0,
                leader_commit=0, entries=(Entry(index=1, term=term, type=EntryType.NORMAL, data=b"x"),)))
            # Delivered to a group busy with a cycle (the publish just before, under load), the message
            # waits in its inbox for the cycle's end: poll until the core has taken it.
            with trio.fail_after(10):
                while not (closed := node.runtime.status(group).closed_reason or ""):
                    await trio.sleep(0.01)
            assert closed.startswith(HALTED_PREFIX) and "rule 5" in closed, closed
            assert any(group in r.getMessage() and "halted" in r.getMessage() for r in caplog.records)

            status, health = await _get(address, "/healthz")
            assert status == 503 and "BAD" in health["error"] and HALTED_PREFIX in health["error"], health
            status, jsz = await _get(address, "/jsz")
            views = {s["name"]: s for s in jsz["jsraft"]["streams"]}
            assert views["BAD"]["group_closed_reason"] == closed
            assert views["GOOD"]["group_closed_reason"] is None

            ack = await js.publish("GOOD.x", b"after")
            assert ack.seq == 2
            await js.add_stream(name="NEW", subjects=["NEW.*"], num_replicas=1)
            assert (await js.publish("NEW.x", b"first")).seq == 1
            nursery.cancel_scope.cancel()
