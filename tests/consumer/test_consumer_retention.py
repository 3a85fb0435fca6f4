"""Start positions per deliver policy, and interest / work-queue retention decisions.

Method: build a store whose contents make each policy's answer distinct, create consumers through
CREATE ops (so the start is computed at apply time, as on every replica), and check the cursor; for
retention, script acks and compare `ApplyResult.removable` with nats-server's rules (interest: removable
when every interested consumer is done; work queue: removed on ack, kept when no consumer matches,
multiple/overlapping consumers refused with 10099/10100).
"""

from __future__ import annotations

import pytest
from consumer_kit import Cluster, store_with

from jsraft.consumer import AckOp, DeleteOp, DeliveredOp, StateOp, TermOp, decode_consumer, encode_consumer
from jsraft.jsapi.consumer_config import ConsumerConfigError, parse_consumer_config
from jsraft.jsapi.stream_config import Retention

SUBJECTS = ["a.1", "b.1", "a.2", "a.1", "b.1", "a.2"]  # seqs 1..6, timestamps 1000 s + i


@pytest.mark.parametrize(("fields", "delivered", "start_last"), [
    ({}, 0, 0),
    ({"deliver_policy": "new"}, 6, 0),
    ({"deliver_policy": "last"}, 5, 0),
    ({"deliver_policy": "last", "filter_subject": "a.1"}, 3, 0),
    ({"deliver_policy": "by_start_sequence", "opt_start_seq": 4}, 3, 0),
    ({"deliver_policy": "by_start_time", "opt_start_time": "1970-01-01T00:16:42Z"}, 2, 0),  # ts 1002 s
    ({"deliver_policy": "by_start_time", "opt_start_time": "2030-01-01T00:00:00Z"}, 6, 0),
    ({"deliver_policy": "last_per_subject", "filter_subject": "a.*"}, 3, 6),
])
def test_start_positions(fields, delivered, start_last):
    cluster = Cluster(store_with(SUBJECTS))
    cluster.create("C", **fields)
    entry = cluster.set.consumers["C"]
    assert (entry.state.delivered_stream_seq, entry.start_last_seq) == (delivered, start_last)
    assert entry.state.ack_floor_stream_seq == delivered


def test_interest_removes_when_every_interested_consumer_is_done():
    cluster = Cluster(store_with(SUBJECTS), Retention.interest)
    cluster.create("A", filter_subject="a.>")
    cluster.create("ALL")
    cluster.apply(DeliveredOp(name="A", records=((1, 1, 1, 0), (3, 2, 1, 0))))
    cluster.apply(DeliveredOp(name="ALL", records=tuple((s, s, 1, 0) for s in range(1, 4))))
    assert cluster.apply(AckOp(name="A", seqs=(1, 3))).removable == ()
    assert cluster.apply(AckOp(name="ALL", seqs=(1, 2))).removable == (1, 2)  # 2 (b.1) only ALL wanted
    assert cluster.apply(TermOp(name="ALL", seqs=(3,))).removable == (3,)


def test_interest_publish_without_interest_and_consumer_delete():
    cluster = Cluster(store_with(SUBJECTS), Retention.interest)
    cluster.create("A", filter_subject="a.>")
    assert cluster.set.removable_on_publish([(7, "b.9"), (8, "a.9")]) == [7]
    cluster.apply(DeliveredOp(name="A", records=((1, 1, 1, 0),)))
    # Deleting the only consumer: nothing needs any message any more.
    assert cluster.apply(DeleteOp(name="A")).removable == tuple(range(1, 7))


def test_limits_never_removes():
    cluster = Cluster(store_with(SUBJECTS), Retention.limits)
    cluster.create("C")
    cluster.apply(DeliveredOp(name="C", records=((1, 1, 1, 0),)))
    assert cluster.apply(AckOp(name="C", seqs=(1,))).removable == ()
    assert cluster.apply(DeleteOp(name="C")).removable == ()


def test_work_queue_removes_on_ack_and_keeps_unmatched():
    cluster = Cluster(store_with(SUBJECTS), Retention.workqueue)
    cluster.create("A", filter_subject="a.>")
    cluster.apply(DeliveredOp(name="A", records=((1, 1, 1, 0), (3, 2, 1, 0))))
    assert cluster.apply(AckOp(name="A", seqs=(3,))).removable == (3,)
    assert cluster.set.removable_on_publish([(7, "b.1")]) == []
    assert cluster.apply(DeleteOp(name="A")).removable == ()  # a work queue keeps its messages


def test_work_queue_consumers_must_not_overlap():
    cluster = Cluster(store_with(SUBJECTS), Retention.workqueue)
    cluster.create("A", filter_subject="a.>")
    refused = cluster.create("B", filter_subject="a.1").refused
    assert [(name, error.err_code) for name, error in refused] == [("B", 10100)]
    assert "B" not in cluster.set.consumers
    assert cluster.create("U").refused[0][1].err_code == 10099
    assert cluster.create("B2", filter_subject="b.>").created == ("B2",)
    with pytest.raises(ConsumerConfigError) as caught:
        cluster.set.check_create("X", parse_consumer_config(b'{"filter_subject":"b.1"}')[0])
    assert caught.value.err_code == 10100


def test_purge_forgets_messages_below_the_new_first_seq():
    cluster = Cluster(store_with(SUBJECTS))
    cluster.create("C")
    cluster.apply(DeliveredOp(name="C", records=((1, 1, 1, 0), (2, 2, 1, 0), (5, 3, 1, 0))))
    cluster.set.on_purge(4)
    state = cluster.state("C")
    assert list(state.pending) == [5] and (state.ack_floor_consumer_seq, state.ack_floor_stream_seq) == (2, 4)


def test_a_state_op_gives_a_fresh_consumer_the_original_state():
    """A restore: a consumer's state through `encode_consumer`/`decode_consumer` and one STATE op equals the
    original's (delivered, ack floor, pending with consumer seqs, redelivery counts), and a work queue
    removes what the restored state no longer needs, the pending messages kept."""
    original = Cluster(store_with(SUBJECTS), Retention.workqueue)
    original.create("W", ack_policy="explicit")
    original.apply(DeliveredOp(name="W", records=tuple((s, s, 1, 10 + s) for s in range(1, 6))))
    original.apply(AckOp(name="W", seqs=(1, 2, 4)))
    original.apply(DeliveredOp(name="W", records=((3, 6, 2, 99),)))  # seq 3 redelivered
    state = original.state("W")
    assert (len(state.pending), len(state.redelivered)) == (2, 1)
    saved = decode_consumer(encode_consumer(original.set.consumers["W"]))

    restored = Cluster(store_with(SUBJECTS), Retention.workqueue)
    restored.create("W", ack_policy="explicit")
    applied = restored.apply(StateOp.of("W", saved.state))
    assert restored.state("W") == state
    assert applied.removable == (1, 2, 4)  # 3 and 5 are pending, 6 not delivered yet
    again = restored.apply(DeliveredOp(name="W", records=((3, 7, 3, 120),)))  # the next redelivery of 3
    assert again.removable == () and restored.state("W").redelivered == {3: 2}
