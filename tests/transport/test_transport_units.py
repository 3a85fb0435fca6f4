"""Small parts of the transport on their own: error codes, config checks, backoff, the send queue.

Method: the error table is written out by hand (a released code never changes); `TransportConfig.validate`
is fed one broken field at a time; `Backoff` is driven with a seeded RNG and checked against its bounds
and its doubling; `SendQueue` is filled past both bounds and drained, in a trio test, to check refusal,
order, batching and the cancelled-writer rule.
"""

from __future__ import annotations

import random

import attrs
import pytest
import trio
import trio.testing

from jsraft.errors import InvalidConfig, JsraftError
from jsraft.raft import PeerProtocolError
from jsraft.transport import (
    FrameTooLarge, HandshakeRefused, LinkClosed, RaftCodecError, TransportConfig, TransportError,
    TransportProtocolError,
)
from jsraft.transport.backoff import Backoff
from jsraft.transport.send_queue import SendQueue

EXPECTED_CODES = {
    TransportError: (20400, 503),
    TransportProtocolError: (20401, 500),
    HandshakeRefused: (20402, 500),
    FrameTooLarge: (20403, 500),
    RaftCodecError: (20404, 500),
    LinkClosed: (20405, 503),
}


@pytest.mark.parametrize("cls", EXPECTED_CODES, ids=lambda c: c.__name__)
def test_error_codes_are_stable(cls):
    assert issubclass(cls, JsraftError)
    assert (cls.err_code, cls.http_code) == EXPECTED_CODES[cls]


def test_error_codes_are_unique_and_in_the_transport_range():
    codes = [cls.err_code for cls in EXPECTED_CODES]
    assert len(set(codes)) == len(codes) and all(20400 <= code < 20500 for code in codes)
    assert issubclass(RaftCodecError, PeerProtocolError)
    assert HandshakeRefused("no").reason == "no"


def test_default_config_is_valid():
    TransportConfig().validate()


@pytest.mark.parametrize("changes, words", [
    (dict(send_queue_frames_max=0), "send_queue_frames_max"),
    (dict(keepalive_s=0), "keepalive_s"),
    (dict(link_stable_s=-1), "link_stable_s"),
    (dict(frame_bytes_max=100), "frame_bytes_max"),
    (dict(frame_bytes_max=1 << 33), "frame_bytes_max"),
    (dict(send_queue_bytes_max=1 << 20, frame_bytes_max=2 << 20), "at least one"),
    (dict(keepalive_s=1.0, idle_timeout_s=1.5), "twice"),
    (dict(backoff_initial_s=3.0, backoff_max_s=2.0), "backoff_initial_s"),
])
def test_config_validate_rejects(changes, words):
    with pytest.raises(InvalidConfig, match=words):
        attrs.evolve(TransportConfig(), **changes).validate()


def test_backoff_doubles_within_bounds_with_jitter_and_resets():
    backoff = Backoff(0.1, 1.0, random.Random(7))
    delays = [backoff.next_delay() for _ in range(8)]
    steps = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    assert all(step / 2 <= delay <= step for delay, step in zip(delays, steps))
    assert len(set(delays)) == len(delays), "jittered, not lockstep"
    backoff.reset()
    assert 0.05 <= backoff.next_delay() <= 0.1
    again = Backoff(0.1, 1.0, random.Random(7))
    assert [again.next_delay() for _ in range(8)] == delays, "deterministic from the injected RNG"


async def test_send_queue_bounds_order_and_batching():
    queue = SendQueue(frames_max=3, bytes_max=10)
    assert queue.put(b"aaaa") and queue.put(b"bbbb")
    assert not queue.put(b"ccc"), "byte bound"
    assert queue.put(b"cc")
    assert not queue.put(b"d"), "frame bound"
    assert (len(queue), queue.queued_bytes) == (3, 10)
    assert await queue.take(bytes_max=8) == [b"aaaa", b"bbbb"]
    assert await queue.take(bytes_max=1) == [b"cc"], "at least one frame, even over the batch size"
    assert (len(queue), queue.queued_bytes) == (0, 0)
    assert queue.put(b"e") and queue.clear() == 1 and len(queue) == 0


async def test_send_queue_wakes_a_waiting_writer_and_refuses_a_cancelled_one():
    queue = SendQueue(frames_max=4, bytes_max=100)
    taken: list[list[bytes]] = []

    async def writer() -> None:
        taken.append(await queue.take(100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        queue.put(b"frame")
    assert taken == [[b"frame"]]

    queue.put(b"kept")
    with trio.CancelScope() as scope:
        scope.cancel()
        await queue.take(100)  # raises Cancelled before popping anything
    assert scope.cancelled_caught and len(queue) == 1
