"""A stream leader whose wall clock is stepped minutes forward still stamps, deduplicates and expires by
sane time (runtime/clock.py invariant 3; chaos S12 seed 1 stored 4 retried publishes twice this way).

Method: one real node (files, Raft group, embedded JetStream context) with the test hooks on, so its wall
clock is a `SkewableClock`; the test steps it +252 s between publishes. A retry of a message id published
before the step must still be a duplicate — both before and after a fresh message stamped after the step
has applied (which ages the replicated duplicate window) — and the fresh message's timestamp must be
seconds, not minutes, after the first one's. A `max_age` of 60 s must not expire anything at the step.
The same publishes against the node's raw wall clock (`RAW`) show the check has teeth: the retry is
stored a second time.
"""

from __future__ import annotations

import trio

from jsraft.runtime import SteadyWall
from jsraft.testing.cluster import Cluster

STEP_S = 252


async def _stepped_run(tmp_path, *, steady: bool) -> dict[str, object]:
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 1, tmp_path, tick_ms=20, node_options={"test_hooks": True}) as cluster:
            await cluster.wait_ready(20)
            node = cluster.node("n1")
            if not steady:  # the node as it was: stamping with the skewable clock itself
                node.runtime.clock = node.clock
            assert isinstance(node.runtime.clock, SteadyWall) is steady
            js = node.jetstream()
            await js.add_stream(name="STEP", subjects=["step.>"], max_age=60 * 10**9)
            store = node.streams.replicas["STEP"].store
            first = await js.publish("step.a", b"a", msg_id="a", timeout=10)
            first_ns = store.load(first.seq).timestamp_ns
            node.clock.set_skew(offset_ns=STEP_S * 10**9)
            retry = await js.publish("step.a", b"a", msg_id="a", timeout=10)
            fresh = await js.publish("step.b", b"b", msg_id="b", timeout=10)
            gap_ns = store.load(fresh.seq).timestamp_ns - first_ns
            late_retry = await js.publish("step.a", b"a", msg_id="a", timeout=10)
            await trio.sleep(0.5)  # a few expiry ticks (every tick_ms) at the stepped time
            result = {"first": first, "retry": retry, "fresh": fresh, "late_retry": late_retry,
                      "gap_ns": gap_ns, "msgs": store.state().msgs}
            nursery.cancel_scope.cancel()
    return result


async def test_a_forward_step_neither_duplicates_nor_expires(tmp_path):
    run = await _stepped_run(tmp_path, steady=True)
    first, retry, fresh, late_retry = run["first"], run["retry"], run["fresh"], run["late_retry"]
    assert (retry.seq, retry.duplicate) == (first.seq, True)
    assert fresh.seq == first.seq + 1 and not fresh.duplicate
    assert (late_retry.seq, late_retry.duplicate) == (first.seq, True)
    assert 0 <= run["gap_ns"] < 10 * 10**9, run["gap_ns"]
    assert run["msgs"] == 2  # nothing expired by max_age 60 s at the step


async def test_the_raw_wall_clock_fails_the_same_check(tmp_path):
    run = await _stepped_run(tmp_path, steady=False)
    # Stamped 252 s later, the fresh message ages the first one out of the 2-minute duplicate window and
    # out of max_age: what the steady clock prevents.
    assert run["gap_ns"] >= STEP_S * 10**9
    retry = run["retry"]
    assert not retry.duplicate and retry.seq == run["first"].seq + 1  # the retry stored a second time
