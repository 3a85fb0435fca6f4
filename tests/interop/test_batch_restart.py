"""Atomic batch publish (ADR-50) across a restart of `jsraft serve`: a committed batch is kept whole, a staged
one is gone.

Method: one real `jsraft serve` process (`bench/nats_servers.py` `one_jsraft_serve`, R1 file stream, its
ports file polled until ready), driven through nats-py. Before the restart: a plain message, a committed
batch of 5 (its PubAck `batch`/`count`), and a batch of 3 staged but not committed. The server is stopped
(SIGTERM, waited for) and a second process is started on the same store directory (a new ports-file
directory whose `store` is a link to the first's, so no stale ports file is read). After it: the stream
holds exactly the 6 messages at sequences 1–6 with the batch's at 2–6 in order; the staged batch's commit is
refused 10176 "incomplete" and stores nothing; a new batch commits at sequences 7–8.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os

import pytest
from bench_servers import servers

nats = pytest.importorskip("nats")


async def _send(nc, batch_id: str, seq: int, commit: bool = False):
    headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(seq)}
    if commit:
        headers["Nats-Batch-Commit"] = "1"
    msg = await nc.request("rst.a", f"{batch_id}-{seq}".encode(), timeout=20, headers=headers)
    return json.loads(msg.data) if msg.data else "empty"


async def _before(url: str) -> dict:
    nc = await nats.connect(url)
    try:
        created = json.loads((await nc.request("$JS.API.STREAM.CREATE.RST", json.dumps({
            "name": "RST", "subjects": ["rst.>"], "allow_atomic": True}).encode(), timeout=20)).data)
        assert "error" not in created, created
        plain = json.loads((await nc.request("rst.a", b"plain", timeout=20)).data)
        committed = [await _send(nc, "kept", seq, commit=seq == 5) for seq in range(1, 6)]
        staged = [await _send(nc, "lost", seq) for seq in range(1, 4)]
        return {"plain": plain, "committed": committed, "staged": staged}
    finally:
        await nc.close()


async def _after(url: str) -> dict:
    nc = await nats.connect(url)
    try:
        late = await _send(nc, "lost", 4, commit=True)
        state = json.loads((await nc.request("$JS.API.STREAM.INFO.RST", b"", timeout=20)).data)["state"]
        stored = []
        for seq in range(1, state["last_seq"] + 1):
            msg = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.RST", json.dumps({"seq": seq}).encode(),
                                               timeout=20)).data)["message"]
            stored.append((msg["seq"], base64.b64decode(msg["data"])))
        new = [await _send(nc, "new", seq, commit=seq == 2) for seq in (1, 2)]
        return {"late": late, "state": state, "stored": stored, "new": new}
    finally:
        await nc.close()


def test_a_committed_batch_survives_a_restart_whole_and_a_staged_one_does_not(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    os.symlink(first / "store", second / "store")
    with servers.one_jsraft_serve(str(first)) as (_, url):
        before = asyncio.run(asyncio.wait_for(_before(url), 60))
    with servers.one_jsraft_serve(str(second)) as (_, url):
        after = asyncio.run(asyncio.wait_for(_after(url), 60))
    assert before["plain"]["seq"] == 1
    assert before["committed"][:4] == ["empty"] * 4
    assert before["committed"][4]["batch"] == "kept" and before["committed"][4]["count"] == 5
    assert before["committed"][4]["seq"] == 6 and before["staged"] == ["empty"] * 3
    assert after["late"]["error"]["err_code"] == 10176
    assert after["state"]["messages"] == 6 and after["state"]["first_seq"] == 1 and after["state"]["last_seq"] == 6
    assert after["stored"] == [(1, b"plain")] + [(seq + 1, f"kept-{seq}".encode()) for seq in range(1, 6)]
    assert after["new"][0] == "empty" and after["new"][1]["seq"] == 8 and after["new"][1]["count"] == 2
