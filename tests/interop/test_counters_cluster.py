"""Counter streams (ADR-49) on three nodes: increments from every node's clients, concurrent, through a
leader change — the real nats-server 2.15.1 and `jsraft serve` side by side, through nats-py.

Method: one 3-node nats-server cluster and one 3-node jsraft cluster (`bench/nats_servers.py`, real
processes, polled until ready). On each, an R3 stream with `allow_msg_counter`; one nats-py connection to
every node; 3 × 40 increments (`Nats-Incr`, each connection its own mix of +k and -k, awaited
concurrently), so most increments reach the stream leader from another node (jsraft: the publish lanes,
whose outcome carries the total). Then the stream leader steps down and each connection adds once more.
Checked on both systems, the same way: every PubAck has a `val`, the values are the running totals in
sequence order (sorted by `seq`, each is the one before plus that publish's increment — no increment lost
or counted twice, even between concurrent publishes decided back to back), the last message's body is
`{"val":"<total>"}` with the last increment's header kept, and the totals of both systems are equal. The
single-node answers, field by field and with every error code, are the differential oracle's
(tests/interop/test_oracle.py, `COUNTER_STEPS`). Skipped when no nats-server binary is found.
"""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from bench_servers import needs_nats_server, servers
from cluster_kit import create_stream, ready_on_every_node, until_leader

pytestmark = needs_nats_server
nats = pytest.importorskip("nats")

ROUNDS = 40


def _increment(node: int, i: int) -> int:
    return (i % 7 + 1) * (-1 if (i + node) % 3 == 0 else 1) * (node + 1)


async def _scenario(urls: list[str]) -> dict:
    conns = [await nats.connect(url) for url in urls]
    try:
        nc = conns[0]
        create = {"name": "CNT", "subjects": ["cnt.>"], "allow_msg_counter": True, "num_replicas": 3}
        answer = await create_stream(nc, create)
        assert "error" not in answer, answer
        leader = await until_leader(nc, "CNT")
        await ready_on_every_node(conns, "cnt.hits")

        async def add(conn, incr: int) -> tuple[int, int, str]:
            msg = await conn.request("cnt.hits", b"", timeout=20, headers={"Nats-Incr": f"{incr:+d}"})
            ack = json.loads(msg.data)
            assert "error" not in ack, ack
            return ack["seq"], incr, ack["val"]

        acks = await asyncio.gather(*(add(conn, _increment(node, i))
                                      for i in range(ROUNDS) for node, conn in enumerate(conns)))
        stepdown = json.loads((await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.CNT", b"", timeout=20)).data)
        assert stepdown.get("success") is True, stepdown
        await until_leader(nc, "CNT", leader)
        for node, conn in enumerate(conns):
            acks.append(await add(conn, node + 100))
        last = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.CNT", b'{"last_by_subj":"cnt.hits"}',
                                            timeout=20)).data)["message"]
        return {"acks": sorted(acks), "last": last}
    finally:
        for conn in conns:
            await conn.close()


def _check(seen: dict) -> int:
    acks = seen["acks"]
    assert [seq for seq, _, _ in acks] == list(range(1, 3 * ROUNDS + 4))
    total = 0
    for seq, incr, val in acks:
        total += incr
        assert val == str(total), f"seq {seq}: val {val}, running total {total}"
    assert base64.b64decode(seen["last"]["data"]) == b'{"val":"%d"}' % total
    assert b"Nats-Incr: +102" in base64.b64decode(seen["last"]["hdrs"])
    return total


def test_counter_increments_from_three_nodes_through_a_leader_change_sum_exactly(tmp_path):
    with servers.NatsServers(str(tmp_path / "nats"), nodes=3) as nats_system, \
            servers.JsraftServers(str(tmp_path / "jsraft"), nodes=3) as jsraft_system:
        nats_seen = asyncio.run(asyncio.wait_for(_scenario(nats_system.urls), 120))
        jsraft_seen = asyncio.run(asyncio.wait_for(_scenario(jsraft_system.urls), 120))
    expected = sum(_increment(node, i) for i in range(ROUNDS) for node in range(3)) + 100 + 101 + 102
    assert _check(nats_seen) == _check(jsraft_seen) == expected
