"""Atomic batch publish (ADR-50) limits of a whole server: at most 1,000 open batches across every stream —
the real nats-server 2.15.1 and `jsraft serve` side by side, through nats-py.

Method: one nats-server and one `jsraft serve` (`bench/nats_servers.py`, real processes, polled until
ready). On each, 21 memory streams with `allow_atomic`; on each stream in turn 50 batches are opened at
once (their first message, concurrently), then a 51st on the first stream. The first 20 streams' 1,000
openings are staged (answered with an empty message); the 51st on the first stream (past the 50 a stream)
and every opening on the 21st stream (past the 1,000 a server) are refused: 10176 "incomplete" by jsraft,
as nats-server 2.12 (`respondIncompleteBatch` in v2.12.15's `processJetStreamBatchMsg`), while nats-server
2.15.1 answers 10210 "atomic publish too many inflight", a 2.14 addition (commit "(2.14) Fast batch
limits"); everything else is the same on both. Committing
one open batch (its PubAck `count` 2) frees a slot: the next opening on the 21st stream is staged. The
openings take well under the 10 s batch timeout, so none expires on the way. Skipped when no nats-server
binary is found.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from bench_servers import needs_nats_server, servers

pytestmark = needs_nats_server
nats = pytest.importorskip("nats")

STREAMS = 21
PER_STREAM = 50


async def _open(nc, stream: int, batch_id: str, seq: int = 1, commit: bool = False) -> str | dict:
    headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(seq)}
    if commit:
        headers["Nats-Batch-Commit"] = "1"
    msg = await nc.request(f"lim{stream}.x", b"x", timeout=20, headers=headers)
    if not msg.data:
        return "empty"
    answer = json.loads(msg.data)
    return answer["error"]["err_code"] if "error" in answer else answer


async def _scenario(url: str) -> dict:
    nc = await nats.connect(url)
    try:
        for stream in range(STREAMS):
            created = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.LIM{stream}", json.dumps({
                "name": f"LIM{stream}", "subjects": [f"lim{stream}.>"], "storage": "memory",
                "allow_atomic": True}).encode(), timeout=20)).data)
            assert "error" not in created, created
        opened = []
        for stream in range(STREAMS):
            opened.append(await asyncio.gather(*(_open(nc, stream, f"b{n}") for n in range(PER_STREAM))))
        extra = await _open(nc, 0, "one-more")
        commit = await _open(nc, 0, "b0", seq=2, commit=True)
        freed = await _open(nc, STREAMS - 1, "after-commit")
        return {"opened": opened, "extra": extra, "commit": commit, "freed": freed}
    finally:
        await nc.close()


def _check(seen: dict, limit_code: int) -> None:
    assert seen["opened"][:-1] == [["empty"] * PER_STREAM] * (STREAMS - 1)  # 1,000 staged
    assert seen["opened"][-1] == [limit_code] * PER_STREAM  # the server's limit
    assert seen["extra"] == limit_code  # the stream's limit
    assert seen["commit"]["batch"] == "b0" and seen["commit"]["count"] == 2 and seen["commit"]["seq"] == 2
    assert seen["freed"] == "empty"


def test_a_server_holds_at_most_1000_open_batches_across_its_streams(tmp_path):
    with servers.NatsServers(str(tmp_path / "nats"), nodes=1) as nats_system, \
            servers.JsraftServers(str(tmp_path / "jsraft"), nodes=1) as jsraft_system:
        nats_seen = asyncio.run(asyncio.wait_for(_scenario(nats_system.urls[0]), 120))
        jsraft_seen = asyncio.run(asyncio.wait_for(_scenario(jsraft_system.urls[0]), 120))
    _check(nats_seen, 10210)  # nats-server 2.14+ (JSAtomicPublishTooManyInflight)
    _check(jsraft_seen, 10176)  # nats-server 2.12, jsraft's API level
