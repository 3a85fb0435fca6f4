"""A pass over pull requests in runs (`replica.consumer_pull.serve_run`, invariant 6): each call hands
over at most its budget and says whether requests still wait for more; the runs of one request, taken
together, are what one unbounded `serve` gives, in order; only a pass's last run ends a `no_wait`
request for want of messages.

Method: the synchronous core alone — a consumer set over a memory store (`consumer_kit`) of 10 messages,
a `Leading` with pull requests queued — served by successive `serve_run` calls with growing budgets, as
the consumer service makes them, and compared with one `serve` of an identical setup.
"""

from __future__ import annotations

from consumer_kit import SECOND, Cluster, store_with

from jsraft.consumer.ops import OpKind
from jsraft.replica.consumer_pull import Leading, serve, serve_run

NOW = 2_000 * SECOND


def _leading(count: int, *requests: bytes) -> tuple[Leading, object]:
    store = store_with([f"s.{n}" for n in range(count)])
    cluster = Cluster(store)
    cluster.create("d", ack_policy="explicit")
    leading = Leading("S", cluster.set.consumers["d"], NOW)
    for position, request in enumerate(requests):
        assert leading.pull(f"r{position}", request, store, NOW) is None
    return leading, store


def _runs(leading: Leading, store: object, budgets: list[int]) -> list[tuple[list, list, bool]]:
    return [serve_run(leading, store, NOW, None, budget) for budget in budgets]


def test_runs_hand_over_the_budget_each_and_together_what_one_pass_gives():
    leading, store = _leading(10, b'{"batch": 9, "expires": 60000000000}')
    runs = _runs(leading, store, [2, 4, 8])
    assert [len(sends) for _, sends, _ in runs] == [2, 4, 3]
    assert [more for _, _, more in runs] == [True, True, False]
    one, one_store = _leading(10, b'{"batch": 9, "expires": 60000000000}')
    ops, sends = serve(one, one_store, NOW)
    assert [send.shown for _, run, _ in runs for send in run] == [send.shown for send in sends] == \
        [f"s.{n}" for n in range(9)]
    records = [record for run_ops, _, _ in runs for op in run_ops if op.kind is OpKind.DELIVERED
               for record in op.records]
    assert len(records) == 9 and records == [record for op in ops if op.kind is OpKind.DELIVERED for record in op.records]
    assert len(leading.queue) == 0 and len(one.queue) == 0


def test_a_budget_used_up_with_a_no_wait_request_left_does_not_answer_it_404():
    leading, store = _leading(10, b'{"batch": 20, "no_wait": true}')
    _, sends, more = serve_run(leading, store, NOW, None, 4)
    assert [send.shown for send in sends] == [f"s.{n}" for n in range(4)] and more
    assert all(send.headers is None for send in sends) and len(leading.queue) == 1  # still waiting, no status
    _, sends, more = serve_run(leading, store, NOW, None, 32)
    assert [send.shown for send in sends[:6]] == [f"s.{n}" for n in range(4, 10)] and not more
    assert len(sends) == 7 and sends[6].headers.startswith(b"NATS/1.0 404")  # the stream's end: now it ends
    assert len(leading.queue) == 0


def test_the_run_stops_between_requests_too_and_the_next_run_serves_the_next_in_order():
    leading, store = _leading(10, b'{"batch": 3, "expires": 60000000000}', b'{"batch": 3, "expires": 60000000000}')
    _, first, more = serve_run(leading, store, NOW, None, 3)
    assert [send.subject for send in first] == ["r0"] * 3 and more  # r1 still waits
    _, second, more = serve_run(leading, store, NOW, None, 3)
    assert [send.subject for send in second] == ["r1"] * 3 and [send.shown for send in second] == \
        ["s.3", "s.4", "s.5"] and not more
