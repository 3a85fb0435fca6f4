"""The client port's subscriptions for stream subjects and direct gets follow every change of the meta
state's streams, now that they are brought up to date only for the streams changed (meta.state
invariant 6; `StreamPublishes.refresh`, `DirectGets.refresh`).

Method: one real node (`jsraft.open_node`) and real nats-py. Three streams are created; one of them has
its subjects replaced and `allow_direct` turned on by updates, another is deleted, and the third is left
alone. After each step the node's interest (`nats_kit.interest`, read in the node's thread) and a publish
show what is served: a publish on a subject no stream has is answered "no responders", one on the new
subjects is stored, a direct get answers once allowed, and the untouched stream keeps working throughout.
Then the node restarts (the subscriptions are rebuilt from the whole recovered state) and the same holds.
"""

from __future__ import annotations

import json

import jsraft
from nats_kit import in_asyncio, interest, nats_connect, single, until


async def _request(nc, subject: str, body: dict | bytes) -> dict:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request(subject, data, timeout=10)).data)


async def _stored(nc, subject: str) -> dict | str:
    import nats.errors

    try:
        return json.loads((await nc.request(subject, b"x", timeout=10)).data)
    except nats.errors.NoRespondersError:
        return "no responders"


async def _changes(node, url: str) -> dict:
    nc = await nats_connect(url)
    seen: dict = {}
    try:
        for name in ("A", "B", "C"):
            answer = await _request(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.*"]})
            assert "error" not in answer, answer
        seen["a before"] = await _stored(nc, "a.1")
        update = {"name": "A", "subjects": ["a2.*"], "allow_direct": True}
        answer = await _request(nc, "$JS.API.STREAM.UPDATE.A", update)
        assert "error" not in answer, answer
        await until(lambda: interest(node, "a2.1") == 1 and interest(node, "a.1") == 0, "A's new subjects")
        seen["a old"] = await _stored(nc, "a.1")
        seen["a new"] = await _stored(nc, "a2.1")
        msg = await nc.request("$JS.API.DIRECT.GET.A", json.dumps({"seq": 2}).encode(), timeout=10)
        seen["a direct"] = (msg.data, msg.headers.get("Nats-Sequence") if msg.headers else None)
        answer = await _request(nc, "$JS.API.STREAM.DELETE.B", b"")
        assert answer.get("success") is True, answer
        await until(lambda: interest(node, "b.1") == 0, "B's subjects gone")
        seen["b deleted"] = await _stored(nc, "b.1")
        seen["c"] = await _stored(nc, "c.1")
    finally:
        await nc.close()
    return seen


async def _after_restart(url: str) -> dict:
    nc = await nats_connect(url)
    try:
        seen = {"a old": await _stored(nc, "a.2"), "a new": await _stored(nc, "a2.2"),
                "b": await _stored(nc, "b.2"), "c": await _stored(nc, "c.2")}
        msg = await nc.request("$JS.API.DIRECT.GET.A", json.dumps({"seq": 3}).encode(), timeout=10)
        seen["a direct"] = (msg.data, msg.headers.get("Nats-Sequence") if msg.headers else None)
        return seen
    finally:
        await nc.close()


async def test_publish_and_direct_get_subscriptions_follow_creates_updates_and_deletes(tmp_path):
    config = single(tmp_path)
    async with jsraft.open_node(config) as node:
        seen = await in_asyncio(_changes, node, node.url)
    assert seen["a before"] == {"stream": "A", "seq": 1}
    assert seen["a old"] == "no responders"
    assert seen["a new"] == {"stream": "A", "seq": 2}
    assert seen["a direct"] == (b"x", "2")
    assert seen["b deleted"] == "no responders"
    assert seen["c"] == {"stream": "C", "seq": 1}
    async with jsraft.open_node(config) as node:
        again = await in_asyncio(_after_restart, node.url)
    assert again == {"a old": "no responders", "a new": {"stream": "A", "seq": 3}, "b": "no responders",
                     "c": {"stream": "C", "seq": 2}, "a direct": (b"x", "3")}
