"""A KV bucket at rest looks for due TTLs once a second, not every tick, and still expires on time
(`stream_expiry` invariant 4).

Method: one real node (`jsraft.open_node`, 20 ms ticks, real files) and nats-py in an asyncio worker
thread. The test counts, per stream, the calls of `StreamLeader.ttl_due` (the expiry task's look at the
TTL schedule) and the quiet looks (`ttl_quiet_ticks`, asked once per look that finds the schedule
empty). A bucket made with nats-py's `create_key_value` (which sends `allow_msg_ttl`) and no TTL'd
message, over 100 node ticks, is looked at a few times (at most one look per `ttl_quiet_ticks`, 49 at
this tick, plus the edges), where it was looked at every tick. Then a message with `Nats-TTL: 1` is put
and must be gone by its TTL plus the test's margin, and one put with no TTL stays; the schedule being
non-empty meanwhile, the task looks every tick again. (A quiesced group's bucket, whose TTL'd publish
comes through a follower, is `test_kv_markers_nats.py`'s first test: a look put off until the group
woke again let a key outlive its TTL by seconds there.) Waits are polls with deadlines.
"""

from __future__ import annotations

import time

from jsraft.server.groups import stream_expiry
from jsraft.server.groups.stream_expiry import ttl_quiet_ticks
from jsraft.stream.leader import StreamLeader
from nats_kit import in_asyncio, nats_connect, single, until

import jsraft

GONE_DEADLINE_S = 10.0


async def test_a_bucket_at_rest_is_looked_at_once_a_second_and_its_ttls_still_expire(tmp_path, monkeypatch):
    looks: dict[str, int] = {}
    real = StreamLeader.ttl_due

    def counting(self, now_ns):
        looks[self.machine.config.name] = looks.get(self.machine.config.name, 0) + 1
        return real(self, now_ns)

    def quiet_look(tick_s):
        looks["quiet"] = looks.get("quiet", 0) + 1
        return ttl_quiet_ticks(tick_s)

    monkeypatch.setattr(StreamLeader, "ttl_due", counting)
    monkeypatch.setattr(stream_expiry, "ttl_quiet_ticks", quiet_look)

    async def scenario(url: str, node) -> dict:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        kv = await js.create_key_value(bucket="REST")
        await until(lambda: node.streams.replicas["KV_REST"].leader is not None, "the bucket's leader")
        start = node.runtime.ticker.ticks
        before = looks.get("KV_REST", 0), looks.get("quiet", 0)
        await until(lambda: node.runtime.ticker.ticks >= start + 100, "100 node ticks")
        seen = {"rest_looks": looks.get("KV_REST", 0) - before[0], "quiet_looks": looks.get("quiet", 0) - before[1]}
        await kv.put("kept", b"y")
        await kv.create("short", b"x", msg_ttl=1)
        began = time.monotonic()
        while True:
            try:
                await kv.get("short")
            except Exception as error:  # nats-py's KeyNotFoundError / KeyDeletedError
                seen["gone"] = type(error).__name__
                break
            assert time.monotonic() - began < GONE_DEADLINE_S, "the TTL'd key outlived its deadline"
            await until(lambda: True, "a turn of the node")
        seen["gone_after_s"] = time.monotonic() - began
        seen["kept"] = (await kv.get("kept")).value
        await nc.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        quiet = ttl_quiet_ticks(node.streams.options.tick_s)
        seen = await in_asyncio(scenario, node.url, node, timeout_s=60)
    assert quiet == 49
    assert seen["rest_looks"] == 0 and seen["quiet_looks"] <= 100 // quiet + 2, seen
    assert seen["gone"] in ("KeyNotFoundError", "KeyDeletedError") and seen["kept"] == b"y"
    assert 0.9 <= seen["gone_after_s"] < GONE_DEADLINE_S
