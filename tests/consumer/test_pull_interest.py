"""A pull request whose reply subject lost its subscriber (`replica.consumer_pull.serve`, invariant 5).

Method: the synchronous core alone — a consumer set over a memory store (`consumer_kit`), a `Leading`
with pull requests queued, and `serve` given an `interested(reply)` table in place of the client port's
subscription list. What `serve` returns (sends, ops) is compared with what nats-server's
`getNextWaiting` does: a request nobody listens to is removed without an answer when there is a
message for it, and the message goes to the next request that is listened to, or stays pending.
"""

from __future__ import annotations

from consumer_kit import SECOND, Cluster, store_with

from jsraft.replica.consumer_pull import Leading, serve

NOW = 2_000 * SECOND


def leading_with(*replies: str) -> tuple[Leading, object]:
    store = store_with(["a", "a"])
    cluster = Cluster(store)
    cluster.create("d", ack_policy="explicit")
    leading = Leading("S", cluster.set.consumers["d"], NOW)
    for reply in replies:
        assert leading.pull(reply, b'{"batch": 1, "expires": 60000000000}', store, NOW) is None
    return leading, store


def test_a_request_nobody_listens_to_is_dropped_and_the_next_one_served():
    leading, store = leading_with("gone", "here")
    ops, sends = serve(leading, store, NOW, {"gone": False, "here": True}.__getitem__)
    assert [(send.subject, send.shown) for send in sends] == [("here", "a")]  # seq 1, to the listened one
    assert len(ops) == 1 and len(leading.queue) == 0  # "gone" left unanswered, "here" fulfilled


def test_without_anyone_listening_the_messages_stay_pending():
    leading, store = leading_with("gone")
    ops, sends = serve(leading, store, NOW, lambda reply: False)
    assert (ops, sends, len(leading.queue)) == ([], [], 0)
    assert leading.leader.next_seq == 1  # nothing delivered: both messages still pending


def test_without_an_interest_table_every_request_is_served():
    leading, store = leading_with("anyone")
    _, sends = serve(leading, store, NOW)
    assert [send.subject for send in sends] == ["anyone"]
