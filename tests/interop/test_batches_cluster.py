"""Atomic batch publish (ADR-50) on three nodes: batches staged through every node, committed whole, and
abandoned by a leader change — the real nats-server 2.15.1 and `jsraft serve` side by side, through nats-py.

Method: one 3-node nats-server cluster and one 3-node jsraft cluster (`bench/nats_servers.py`, real
processes, polled until ready). On each, an R3 stream with `allow_atomic`; from each node's connection one
batch of 20 messages (the connections' batches interleaved, concurrently: most messages reach the stream
leader from another node), each staged message answered with an empty message and each commit with a PubAck
carrying `batch` and `count`; the stream must then hold 60 messages, each batch's 20 at consecutive
sequences ending at its commit's `seq`. Then a batch is staged, the stream leader steps down, and the
batch's commit is refused with 10176 (incomplete: the new leader never saw it) and stores nothing; the same
on both systems. Skipped when no nats-server binary is found.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from bench_servers import needs_nats_server, servers
from cluster_kit import api, create_stream, ready_on_every_node, until_leader

pytestmark = needs_nats_server
nats = pytest.importorskip("nats")

SIZE = 20


async def _batch(conn, batch_id: str, size: int, commit: bool = True) -> list:
    answers = []
    for seq in range(1, size + 1):
        headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(seq)}
        if commit and seq == size:
            headers["Nats-Batch-Commit"] = "1"
        msg = await conn.request(f"atm.{batch_id}", f"{batch_id}-{seq}".encode(), timeout=20, headers=headers)
        answers.append(json.loads(msg.data) if msg.data else "empty")
    return answers


async def _scenario(urls: list[str]) -> dict:
    conns = [await nats.connect(url) for url in urls]
    try:
        nc = conns[0]
        created = await create_stream(nc, {"name": "ATM", "subjects": ["atm.>"], "allow_atomic": True,
                                           "num_replicas": 3})
        assert "error" not in created, created
        leader = await until_leader(nc, "ATM")
        await ready_on_every_node(conns, "atm.ready")
        answers = await asyncio.gather(*(_batch(conn, f"b{node}", SIZE) for node, conn in enumerate(conns)))
        stored = {}
        for node in range(3):
            commit = answers[node][-1]
            for seq in range(commit["seq"] - SIZE + 1, commit["seq"] + 1):
                msg = (await api(nc, "$JS.API.STREAM.MSG.GET.ATM", {"seq": seq}))["message"]
                stored.setdefault(node, []).append(msg["subject"])
        staged = await _batch(conns[1], "late", 3, commit=False)
        stepdown = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.ATM")
        assert stepdown.get("success") is True, stepdown
        await until_leader(nc, "ATM", leader)
        late = json.loads((await conns[1].request("atm.late", b"late-4", timeout=20, headers={
            "Nats-Batch-Id": "late", "Nats-Batch-Sequence": "4", "Nats-Batch-Commit": "1"})).data)
        messages = (await api(nc, "$JS.API.STREAM.INFO.ATM"))["state"]["messages"]
        return {"answers": answers, "stored": stored, "staged": staged, "late": late, "messages": messages}
    finally:
        for conn in conns:
            await conn.close()


def _check(seen: dict) -> None:
    for node, answers in enumerate(seen["answers"]):
        assert answers[:-1] == ["empty"] * (SIZE - 1)
        assert answers[-1]["batch"] == f"b{node}" and answers[-1]["count"] == SIZE
        assert seen["stored"][node] == [f"atm.b{node}"] * SIZE  # consecutive, not interleaved
    assert seen["staged"] == ["empty"] * 3
    assert seen["late"]["error"]["err_code"] == 10176
    assert seen["messages"] == 3 * SIZE


def test_batches_commit_whole_across_nodes_and_a_leader_change_abandons_one(tmp_path):
    with servers.NatsServers(str(tmp_path / "nats"), nodes=3) as nats_system, \
            servers.JsraftServers(str(tmp_path / "jsraft"), nodes=3) as jsraft_system:
        nats_seen = asyncio.run(asyncio.wait_for(_scenario(nats_system.urls), 120))
        jsraft_seen = asyncio.run(asyncio.wait_for(_scenario(jsraft_system.urls), 120))
    _check(nats_seen)
    _check(jsraft_seen)
