"""A schedule fires exactly once across a node restart: one that fired before the restart is not fired
again, and one that came due while the node was down fires once when the restarted node leads again
(ADR-51; `stream.schedules` invariant 1: the leader's book is rebuilt from the store).

Method: one real node (`jsraft.open_node`, real files and fsync) and nats-py in an asyncio worker thread.
A stream with `allow_msg_schedules` gets two schedules: A due 1.5 s after its publish, B due 5 s after.
Once A's fired message is stored (polled with a deadline) the node is closed, and stays down until B's
due time has passed by the wall clock (a wait for a known instant, not a hope). The node is opened again
on the same directory: B's fired message must appear (polled), and then, after 100 more node ticks
(more than one look of the leader's timer, `stream_expiry` invariant 4), the stream's per-subject counts
must be exactly one message on each target, none on either schedule subject (each was purged by the
entry that fired it), two messages in all.
"""

from __future__ import annotations

import base64
import time

import trio

from nats_kit import in_asyncio, nats_connect, single, until
from schedule_kit import api, at, create_stream, wait_fired

import jsraft


async def _before_restart(url: str, node) -> float:
    nc = await nats_connect(url)
    js = nc.jetstream(timeout=10)
    await create_stream(nc, node)
    now = time.time()
    b_due = now + 5.0
    await js.publish("later.a", b"A", headers={"Nats-Schedule": at(now + 1.5), "Nats-Schedule-Target": "later.out.a"})
    await js.publish("later.b", b"B", headers={"Nats-Schedule": at(b_due), "Nats-Schedule-Target": "later.out.b"})
    await wait_fired(nc, "later.out.a")
    await nc.close()
    return b_due


async def _after_restart(url: str, node) -> dict:
    nc = await nats_connect(url)
    await wait_fired(nc, "later.out.b")
    start = node.runtime.ticker.ticks
    await until(lambda: node.runtime.ticker.ticks >= start + 100, "100 node ticks")
    info = await api(nc, "$JS.API.STREAM.INFO.LATER", {"subjects_filter": ">"})
    fired = (await api(nc, "$JS.API.STREAM.MSG.GET.LATER", {"last_by_subj": "later.out.b"}))["message"]
    await nc.close()
    return {"state": info["state"], "fired_b": fired}


async def test_a_schedule_fires_once_across_a_restart_and_one_due_while_down_fires_on_return(tmp_path):
    config = single(tmp_path)
    async with jsraft.open_node(config) as node:
        b_due = await in_asyncio(_before_restart, node.url, node, timeout_s=60)
        assert time.time() < b_due, "B came due before the node was closed: the test proves nothing"
    await trio.sleep(max(0.0, b_due - time.time()) + 0.2)  # down until B is due
    async with jsraft.open_node(config) as node:
        seen = await in_asyncio(_after_restart, node.url, node, timeout_s=60)
    state = seen["state"]
    assert state["subjects"] == {"later.out.a": 1, "later.out.b": 1}, state
    assert state["messages"] == 2, state
    assert seen["fired_b"]["subject"] == "later.out.b"
    headers = base64.b64decode(seen["fired_b"]["hdrs"])
    assert b"Nats-Scheduler: later.b\r\n" in headers and b"Nats-Schedule-Next: purge\r\n" in headers, headers
    assert base64.b64decode(seen["fired_b"]["data"]) == b"B"
