"""`runtime.locks.FastLock`: a free acquire is not a scheduling point; a held lock still excludes.

Method: trio's own checkpoint probes (`trio.testing.assert_no_checkpoints` / `assert_checkpoints`): a free
`FastLock` acquire passes no checkpoint (a free `trio.Lock`, the control, passes one); and a held one makes
the next acquirer wait until the release, in order. (A counter task beside the acquire was flaky: trio runs
a batch of runnable tasks in random order, so one scheduling pass need not run the counter.)
"""

from __future__ import annotations

import trio
import trio.testing

from jsraft.runtime.locks import FastLock


async def test_a_free_lock_is_taken_without_a_scheduling_point():
    fast, plain = FastLock(), trio.Lock()
    with trio.testing.assert_no_checkpoints():
        await fast.acquire()
    assert fast.locked()
    with trio.testing.assert_checkpoints():  # the control: trio.Lock yields even when free
        await plain.acquire()


async def test_a_held_lock_makes_the_next_acquirer_wait_in_order():
    lock = FastLock()
    order: list[str] = []

    async def user(name: str) -> None:
        async with lock:
            order.append(f"{name} in")
            await trio.sleep(0.01)
            order.append(f"{name} out")
    async with trio.open_nursery() as nursery:
        await lock.acquire()
        nursery.start_soon(user, "a")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(user, "b")
        await trio.testing.wait_all_tasks_blocked()
        assert order == []  # both wait while the lock is held
        lock.release()
    assert order == ["a in", "a out", "b in", "b out"]
    assert not lock.locked()
