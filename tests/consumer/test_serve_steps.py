"""A pull pass in steps (`replica.consumer_pull.serve_steps`, used by `server.groups.consumer_pass`): the
same ops and sends as one `serve`, cut after each plan, the first plan at most `first_max` messages.

Method: the synchronous core alone — a consumer set over a memory store (`consumer_kit`) holding 600
messages, two identical `Leading`s with the same pull requests queued; one is served by `serve`, the other
step by step. The concatenated steps must equal `serve`'s result exactly (every delivery, its ack reply,
every status, every DELIVERED record, in order), and the step sizes must follow the plan bounds.
"""

from __future__ import annotations

from consumer_kit import SECOND, Cluster, store_with

from jsraft.replica.consumer_pull import DELIVER_BATCH_MAX, Leading, serve, serve_steps

NOW = 2_000 * SECOND


def _leading(store) -> Leading:
    cluster = Cluster(store)
    cluster.create("d", ack_policy="explicit", max_ack_pending=10_000)
    leading = Leading("S", cluster.set.consumers["d"], NOW)
    for reply, batch in (("r1", 500), ("r2", 30)):
        assert leading.pull(reply, b'{"batch": %d, "expires": 60000000000}' % batch, store, NOW) is None
    return leading


def test_the_steps_add_up_to_one_serve_and_the_first_is_small():
    store = store_with(["a", "b"] * 300)
    whole_ops, whole_sends = serve(_leading(store), store, NOW)
    steps = list(serve_steps(_leading(store), store, NOW, None, 64))
    # Cut at other places, the DELIVERED records are the same, in the same order.
    assert [r for ops, _ in steps for op in ops for r in op.records] == [r for op in whole_ops for r in op.records]
    assert [send for _, sends in steps for send in sends] == whole_sends
    delivered = [sum(1 for send in sends if send.shown is not None) for _, sends in steps]
    assert delivered[0] == 64 and max(delivered[1:]) <= DELIVER_BATCH_MAX
    assert sum(delivered) == 530 and delivered[-1] == 0  # the last step: the statuses of what is left
    assert [send.subject for send in whole_sends if send.shown is not None] == ["r1"] * 500 + ["r2"] * 30
