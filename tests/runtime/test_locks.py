"""`runtime.locks.FastLock`: a free acquire is not a scheduling point; a held lock still excludes.

Method: trio's scheduler, observed from inside — a second task that counts the scheduling passes it gets
runs alongside; a free `FastLock` acquire must let it run zero times (a `trio.Lock`, the control, lets it
run), and a held one makes the next acquirer wait until the release, in order.
"""

from __future__ import annotations

import trio
import trio.testing

from jsraft.runtime.locks import FastLock


async def _passes_during(acquire) -> int:
    passes = 0
    stop = False

    async def counter() -> None:
        nonlocal passes
        while not stop:
            passes += 1
            await trio.lowlevel.checkpoint()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(counter)
        await trio.lowlevel.checkpoint()  # the counter has started
        before = passes
        await acquire()
        during = passes - before
        stop = True
    return during


async def test_a_free_lock_is_taken_without_a_scheduling_point():
    fast, plain = FastLock(), trio.Lock()
    assert await _passes_during(fast.acquire) == 0
    assert fast.locked()
    assert await _passes_during(plain.acquire) >= 1  # the control: trio.Lock yields even when free


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
