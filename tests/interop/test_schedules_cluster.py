"""Message schedules (ADR-51, `@at`) on three nodes: each schedule fires once, through a leader change —
the real nats-server 2.15.1 and `jsraft serve` side by side, through nats-py.

Method: one 3-node nats-server cluster and one 3-node jsraft cluster (`bench/nats_servers.py`, real
processes, polled until ready). On each, an R3 stream with `allow_msg_schedules`; from each node's
connection one schedule, due 3 s after its publish, on its own subject with its own target; then the
stream leader steps down before they are due. The check, polled with a deadline on the stream's state,
then held for 2 s more: every target holds exactly one message — the schedule's body, its user header
kept, `Nats-Scheduler` naming the schedule's subject — the schedule subjects hold none (each schedule was
purged by the entry that fired it), and the stream holds exactly the three fired messages; the same on
both systems. Skipped when no nats-server binary is found.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest
from bench_servers import needs_nats_server, servers
from cluster_kit import api, create_stream, ready_on_every_node, until_leader

pytestmark = needs_nats_server
nats = pytest.importorskip("nats")


async def _last(nc, subject: str) -> dict | None:
    answer = await api(nc, "$JS.API.STREAM.MSG.GET.SCH", {"last_by_subj": subject})
    return answer.get("message")


async def _all_fired(nc) -> bool:
    """Whether the stream holds the three fired messages; False while a new leader is being elected (a
    request then goes unanswered on nats-server, or answers an error)."""
    try:
        info = await api(nc, "$JS.API.STREAM.INFO.SCH")
        if info.get("state", {}).get("messages") != 3:
            return False
        return all([await _last(nc, f"sch.t{node}") is not None for node in range(3)])
    except nats.errors.TimeoutError:
        return False


async def _scenario(urls: list[str]) -> dict:
    conns = [await nats.connect(url) for url in urls]
    try:
        nc = conns[0]
        created = await create_stream(nc, {"name": "SCH", "subjects": ["sch.>"], "allow_msg_schedules": True,
                                           "num_replicas": 3})
        assert "error" not in created, created
        await until_leader(nc, "SCH")
        await ready_on_every_node(conns, "sch.ready")
        due = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3))
        for node, conn in enumerate(conns):
            ack = json.loads((await conn.request(f"sch.s{node}", f"body{node}".encode(), timeout=20, headers={
                "Nats-Schedule": f"@at {due}", "Nats-Schedule-Target": f"sch.t{node}", "X-Node": str(node)})).data)
            assert "error" not in ack, ack
        stepdown = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.SCH")
        assert stepdown.get("success") is True, stepdown
        deadline = time.monotonic() + 30
        while not await _all_fired(nc):
            assert time.monotonic() < deadline, "the schedules did not all fire"
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)  # held: nothing fires twice
        state = (await api(nc, "$JS.API.STREAM.INFO.SCH"))["state"]
        fired = {}
        for node in range(3):
            msg = await _last(nc, f"sch.t{node}")
            fired[node] = (base64.b64decode(msg["data"]), base64.b64decode(msg["hdrs"]))
        schedules_left = [await _last(nc, f"sch.s{node}") for node in range(3)]
        return {"messages": state["messages"], "fired": fired, "schedules_left": schedules_left}
    finally:
        for conn in conns:
            await conn.close()


def _check(seen: dict) -> None:
    assert seen["messages"] == 3
    assert seen["schedules_left"] == [None, None, None]
    for node, (data, headers) in seen["fired"].items():
        assert data == f"body{node}".encode()
        assert f"X-Node: {node}\r\n".encode() in headers and f"Nats-Scheduler: sch.s{node}\r\n".encode() in headers
        assert b"Nats-Schedule-Target" not in headers


def test_each_schedule_fires_once_across_a_leader_change(tmp_path):
    with servers.NatsServers(str(tmp_path / "nats"), nodes=3) as nats_system, \
            servers.JsraftServers(str(tmp_path / "jsraft"), nodes=3) as jsraft_system:
        nats_seen = asyncio.run(asyncio.wait_for(_scenario(nats_system.urls), 120))
        jsraft_seen = asyncio.run(asyncio.wait_for(_scenario(jsraft_system.urls), 120))
    _check(nats_seen)
    _check(jsraft_seen)
