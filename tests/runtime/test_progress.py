"""`runtime.progress.Progress`: a waiter wakes after a cycle's notify, and never waits past its bounds.

Method: pure trio under `autojump_clock` (virtual time: the bounds are checked exactly, nothing sleeps
for real). A predicate flipped before a `notify` is seen at once; one flipped with no `notify` (a change
outside a cycle) is seen within `recheck_s`; one that never holds returns False at `timeout_s`. The last
test runs a real `NodeRuntime` group (via the runtime harness) and checks that its cycles notify.
"""

from __future__ import annotations

import pytest
import trio
from runtime_harness import GROUP, Cluster

from jsraft.runtime.progress import Progress


@pytest.mark.parametrize("notify, recheck_s, woke", [
    (True, 5.0, 1.0),   # a cycle's notify: seen at once, not at the 5 s recheck
    (False, 0.4, 1.2),  # no notify (a change made outside a cycle): seen at the next recheck (0.4, 0.8, 1.2)
])
async def test_a_waiter_sees_the_change_at_the_notify_or_the_recheck(autojump_clock, notify, recheck_s, woke):
    progress, state = Progress(), {"done": False}
    woke_at: list[float] = []

    async def waiter() -> None:
        assert await progress.until(lambda: state["done"], timeout_s=10.0, recheck_s=recheck_s)
        woke_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(1.0)
        state["done"] = True
        if notify:
            progress.notify()
    assert woke_at == [pytest.approx(woke)]


async def test_a_predicate_that_never_holds_times_out(autojump_clock):
    progress = Progress()
    began = trio.current_time()
    assert not await progress.until(lambda: False, timeout_s=2.0, recheck_s=0.3)
    assert trio.current_time() - began == 2.0
    assert await progress.until(lambda: True, timeout_s=0.0)  # already true: no wait at all


async def test_a_runtime_cycle_notifies(autojump_clock):
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, size=1)
        runtime = await cluster.start("n1")
        await cluster.wait_leader()
        machine = cluster.machines["n1"]
        began = trio.current_time()
        nursery.start_soon(runtime.propose, GROUP, b"x")
        # A recheck of 10 s: only the cycle that applies the entry can wake this waiter in time.
        assert await runtime.progress.until(lambda: machine.values[-1:] == [b"x"], timeout_s=20.0,
                                            recheck_s=10.0)
        assert trio.current_time() - began < 1.0, (machine.values, trio.current_time() - began)
        await cluster.stop_all()
        nursery.cancel_scope.cancel()
