"""A pull plan's deliveries counted against their request at once (`replica.consumer_pull._deliver`,
`consumer.pull.WaitingQueue.delivered` with a count): batch and byte budgets end a request exactly where
counting message by message ends it.

Method: the synchronous core alone — a consumer set over a memory store (`consumer_kit`) of 10 messages
of known size, a `Leading` with pull requests queued, and `serve`; what it sends (deliveries, then the
status, if any) and whether the request is still queued are compared with nats-server's rules: a batch
used up removes the request silently; a byte budget used up with messages still asked for ends it
`409 Batch Completed`; a budget not used up leaves it waiting.
"""

from __future__ import annotations

from consumer_kit import SECOND, Cluster, store_with

from jsraft.replica.consumer_pull import Leading, serve
from jsraft.store.base import msg_size

NOW = 2_000 * SECOND
SIZE = msg_size(len("a"), 0, len(b"data"))  # every message here


def _serve(request: bytes) -> tuple[list, Leading]:
    store = store_with(["a"] * 10)
    cluster = Cluster(store)
    cluster.create("d", ack_policy="explicit")
    leading = Leading("S", cluster.set.consumers["d"], NOW)
    assert leading.pull("r", request, store, NOW) is None
    return serve(leading, store, NOW)[1], leading


def test_a_batch_used_up_ends_the_request_without_a_status():
    sends, leading = _serve(b'{"batch": 4, "expires": 60000000000}')
    assert [send.shown for send in sends] == ["a"] * 4 and len(leading.queue) == 0


def test_a_byte_budget_used_up_by_the_plan_ends_it_409_batch_completed():
    sends, leading = _serve(b'{"batch": 8, "max_bytes": %d, "expires": 60000000000}' % (3 * SIZE))
    assert [send.shown for send in sends[:3]] == ["a"] * 3 and len(sends) == 4
    assert sends[3].headers.startswith(b"NATS/1.0 409 Batch Completed") and len(leading.queue) == 0


def test_a_budget_left_over_keeps_the_request_waiting_with_its_rest():
    sends, leading = _serve(b'{"batch": 20, "expires": 60000000000}')
    assert [send.shown for send in sends] == ["a"] * 10
    request = leading.queue.head()
    assert request is not None and (request.batch, request.delivered) == (10, 10)
