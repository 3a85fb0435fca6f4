"""A stream whose only stored schedule is far off is looked at about once a second, not every node tick,
and a nearer schedule still fires on time (`stream_expiry` invariant 4, ADR-51).

Method: one real node (`jsraft.open_node`, its default ticks, real files) and nats-py in an asyncio worker
thread. The test counts the calls of `StreamLeader.schedules_due` (the expiry task's look at the schedule
book). A stream with `allow_msg_schedules` (no `max_age`, no TTLs) holds one schedule due in an hour;
over 100 node ticks the leader looks at most once per `ttl_quiet_ticks` plus the edges, where it looked
every tick. Then a schedule due 1.5 s after its publish is stored: its fired message must reach the
target no earlier than its due time and within the test's deadline, and the far-off schedule stays
stored. Waits are polls with deadlines. `schedule_wait_ticks` itself is checked on its edges.
"""

from __future__ import annotations

import time

from jsraft.server.groups.stream_expiry import schedule_wait_ticks, ttl_quiet_ticks
from jsraft.stream.leader import StreamLeader
from nats_kit import in_asyncio, nats_connect, single, until
from schedule_kit import FIRED_DEADLINE_S, api, at, create_stream, wait_fired

import jsraft


def test_schedule_wait_ticks_edges():
    quiet = ttl_quiet_ticks(0.02)
    assert schedule_wait_ticks(None, 10**18, 0.02) == 0
    assert schedule_wait_ticks(10**18, 10**18, 0.02) == 0  # due now: look now
    assert schedule_wait_ticks(10**18 - 1, 10**18, 0.02) == 0  # overdue
    assert schedule_wait_ticks(10**18 + 100_000_000, 10**18, 0.02) == 5  # 100 ms at 20 ms ticks
    assert schedule_wait_ticks(10**18 + 3600 * 10**9, 10**18, 0.02) == quiet == 49  # capped at a second


async def test_a_far_off_schedule_is_looked_at_once_a_second_and_a_near_one_fires_on_time(tmp_path, monkeypatch):
    looks = {"n": 0}
    real = StreamLeader.schedules_due

    def counting(self, now_ns):
        looks["n"] += 1
        return real(self, now_ns)

    monkeypatch.setattr(StreamLeader, "schedules_due", counting)

    async def scenario(url: str, node) -> dict:
        nc = await nats_connect(url)
        js = nc.jetstream(timeout=10)
        await create_stream(nc, node)
        await js.publish("later.far", b"far",
                         headers={"Nats-Schedule": at(time.time() + 3600), "Nats-Schedule-Target": "later.out.far"})
        leader = node.streams.replicas["LATER"].leader
        await until(lambda: len(leader.schedule_book) == 1, "the far schedule in the leader's book")
        start, before = node.runtime.ticker.ticks, looks["n"]
        await until(lambda: node.runtime.ticker.ticks >= start + 100, "100 node ticks")
        seen: dict = {"far_looks": looks["n"] - before}
        published = time.time()
        await js.publish("later.near", b"near",
                         headers={"Nats-Schedule": at(published + 1.5), "Nats-Schedule-Target": "later.out.near"})
        await wait_fired(nc, "later.out.near")
        seen["fired_after_s"] = time.time() - published
        far = await api(nc, "$JS.API.STREAM.MSG.GET.LATER", {"last_by_subj": "later.far"})
        seen["far_stored"] = "message" in far
        await nc.close()
        return seen

    async with jsraft.open_node(single(tmp_path)) as node:
        quiet = ttl_quiet_ticks(node.streams.options.tick_s)
        seen = await in_asyncio(scenario, node.url, node, timeout_s=60)
    assert seen["far_looks"] <= 100 // quiet + 2, seen
    assert 1.4 <= seen["fired_after_s"] < FIRED_DEADLINE_S, seen
    assert seen["far_stored"], seen
