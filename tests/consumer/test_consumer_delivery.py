"""The leader's pure delivery logic: `ConsumerLeader.next_deliveries` and its reactions to acks.

Method: a leader over a MemStore and a consumer created through the log; the clock is a plain integer
passed as `now_ns`. Each test proposes what the leader returns (applies its ops to the consumer set, as
the runtime would after commit) and checks what it delivers next: new messages by filter and policy,
redeliveries after `ack_wait` / `backoff`, `max_deliver` giving up, `max_ack_pending`, headers-only,
NAK with delay, `+WPI`, messages gone from the store, pause, and the rebuild after an election.
"""

from __future__ import annotations

import pytest
from consumer_kit import SECOND, Cluster, store_with

from jsraft.consumer import AckOp, ConsumerLeader, PauseOp, SkipOp, TermOp, parse_ack_subject
from jsraft.consumer.delivery import headers_only

T0 = 5_000 * SECOND


def setup(subjects, **fields):
    cluster = Cluster(store_with(subjects))
    cluster.create("C", **fields)
    leader = ConsumerLeader("S", cluster.set.consumers["C"], T0)
    return cluster, leader


def commit(cluster, plan):
    if plan.ops:
        cluster.apply(*plan.ops)


def seqs(plan):
    return [(d.stream_seq, d.consumer_seq, d.delivery_count) for d in plan.deliveries]


def test_new_messages_by_filter_with_reply_subjects_and_pending():
    cluster, leader = setup(["a", "b", "a", "a"], filter_subject="a")
    plan = leader.next_deliveries(cluster.store, T0, 2)
    assert seqs(plan) == [(1, 1, 1), (3, 2, 1)]
    assert [d.num_pending for d in plan.deliveries] == [2, 1]
    reply = parse_ack_subject(plan.deliveries[1].reply_subject)
    assert (reply.stream, reply.consumer, reply.delivery_count, reply.stream_seq, reply.consumer_seq,
            reply.pending) == ("S", "C", 1, 3, 2, 1)
    commit(cluster, plan)
    assert cluster.state("C").delivered_stream_seq == 3
    assert seqs(leader.next_deliveries(cluster.store, T0, 10)) == [(4, 3, 1)]
    assert leader.next_deliveries(cluster.store, T0, 10).deliveries == []


def test_redelivery_after_ack_wait_first_and_with_a_new_consumer_seq():
    cluster, leader = setup(["a", "a", "a"], ack_wait=10 * SECOND)
    commit(cluster, leader.next_deliveries(cluster.store, T0, 2))
    assert leader.next_deadline_ns() == T0 + 10 * SECOND
    assert leader.next_deliveries(cluster.store, T0 + 9 * SECOND, 0).deliveries == []
    plan = leader.next_deliveries(cluster.store, T0 + 10 * SECOND, 3)
    assert seqs(plan) == [(1, 3, 2), (2, 4, 2), (3, 5, 1)]
    commit(cluster, plan)
    state = cluster.state("C")
    assert state.pending[1][0] == 1 and state.redelivered == {1: 1, 2: 1}


def test_backoff_sets_each_deadline_and_max_deliver_gives_up():
    cluster, leader = setup(["a"], backoff=[1 * SECOND, 5 * SECOND], max_deliver=3)
    now = T0
    commit(cluster, leader.next_deliveries(cluster.store, now, 1))
    assert leader.next_deadline_ns() == now + SECOND
    now += SECOND
    commit(cluster, leader.next_deliveries(cluster.store, now, 1))  # 2nd delivery
    assert leader.next_deadline_ns() == now + 5 * SECOND
    now += 5 * SECOND
    commit(cluster, leader.next_deliveries(cluster.store, now, 1))  # 3rd delivery, backoff clamps
    assert leader.next_deadline_ns() == now + 5 * SECOND
    now += 5 * SECOND
    plan = leader.next_deliveries(cluster.store, now, 1)
    assert plan.deliveries == [] and plan.gave_up == [(1, 3)]
    commit(cluster, plan)
    state = cluster.state("C")
    assert state.pending == {} and state.ack_floor_stream_seq == 1


def test_max_ack_pending_stops_new_deliveries_until_acks_commit():
    cluster, leader = setup(["a"] * 5, max_ack_pending=2)
    plan = leader.next_deliveries(cluster.store, T0, 10)
    assert [d.stream_seq for d in plan.deliveries] == [1, 2]
    assert leader.next_deliveries(cluster.store, T0, 10).deliveries == []  # counting uncommitted ones
    commit(cluster, plan)
    cluster.apply(AckOp(name="C", seqs=(1,)))
    assert [d.stream_seq for d in leader.next_deliveries(cluster.store, T0, 10).deliveries] == [3]


def test_ack_none_tracks_no_deadlines():
    cluster, leader = setup(["a"] * 3, ack_policy="none")
    commit(cluster, leader.next_deliveries(cluster.store, T0, 10))
    assert leader.next_deadline_ns() is None
    assert cluster.state("C").ack_floor_stream_seq == 3


def test_headers_only_and_max_bytes():
    cluster, leader = setup(["a", "a"], headers_only=True)
    plan = leader.next_deliveries(cluster.store, T0, 1)
    assert plan.deliveries[0].payload == b"" and plan.deliveries[0].headers == b"NATS/1.0\r\nNats-Msg-Size: 4\r\n\r\n"
    assert headers_only(b"NATS/1.0\r\nX: 1\r\n\r\n", 7) == b"NATS/1.0\r\nX: 1\r\nNats-Msg-Size: 7\r\n\r\n"
    cluster, leader = setup(["a", "a"])
    assert leader.next_deliveries(cluster.store, T0, 5, max_bytes=10).too_large
    plan = leader.next_deliveries(cluster.store, T0, 5, max_bytes=40)
    assert len(plan.deliveries) == 1 and not plan.too_large


def test_nak_with_delay_is_replicated_and_plain_nak_redelivers_now():
    cluster, leader = setup(["a", "a"], ack_wait=30 * SECOND)
    commit(cluster, leader.next_deliveries(cluster.store, T0, 2))
    op = leader.nak(1, 5 * SECOND, T0)
    assert op.records == ((1, 1, 1, T0 - 30 * SECOND + 5 * SECOND),)
    commit(cluster, type("P", (), {"ops": [op]}))
    assert leader.nak(2, None, T0) is None
    assert seqs(leader.next_deliveries(cluster.store, T0, 5)) == [(2, 3, 2)]
    assert seqs(leader.next_deliveries(cluster.store, T0 + 5 * SECOND, 5)) == [(1, 4, 2)]


def test_progress_extends_the_deadline():
    cluster, leader = setup(["a"], ack_wait=10 * SECOND)
    commit(cluster, leader.next_deliveries(cluster.store, T0, 1))
    op = leader.progress(1, T0 + 8 * SECOND)
    assert op.records == ((1, 1, 1, T0 + 8 * SECOND),)
    assert leader.next_deliveries(cluster.store, T0 + 12 * SECOND, 1).deliveries == []
    assert seqs(leader.next_deliveries(cluster.store, T0 + 18 * SECOND, 1)) == [(1, 2, 2)]


def test_pending_message_gone_from_the_store_is_terminated():
    cluster, leader = setup(["a", "a"], ack_wait=SECOND)
    commit(cluster, leader.next_deliveries(cluster.store, T0, 2))
    cluster.store.delete(1)
    plan = leader.next_deliveries(cluster.store, T0 + SECOND, 5)
    assert [type(op) for op in plan.ops][-1] is TermOp and seqs(plan) == [(2, 3, 2)]
    commit(cluster, plan)
    assert list(cluster.state("C").pending) == [2]


def test_paused_consumer_delivers_nothing():
    cluster, leader = setup(["a"])
    cluster.apply(PauseOp(name="C", until_ns=T0 + SECOND))
    assert leader.next_deliveries(cluster.store, T0, 5).deliveries == []
    assert len(leader.next_deliveries(cluster.store, T0 + SECOND, 5).deliveries) == 1


def test_last_per_subject_delivers_only_the_last_of_each_subject_then_everything():
    cluster, leader = setup(["x.1", "x.2", "x.1", "x.2", "x.3"], deliver_policy="last_per_subject",
                            filter_subject="x.*")
    plan = leader.next_deliveries(cluster.store, T0, 10)
    assert [d.stream_seq for d in plan.deliveries] == [3, 4, 5]
    cluster.store.append(6, "x.1", b"", b"new", T0)
    assert [d.stream_seq for d in leader.next_deliveries(cluster.store, T0, 10).deliveries] == [6]


def test_skipped_message_below_a_later_delivery_needs_no_skip_op():
    cluster, leader = setup(["x.1", "x.1", "x.2"], deliver_policy="last_per_subject", filter_subject="x.1")
    plan = leader.next_deliveries(cluster.store, T0, 10)
    assert [d.stream_seq for d in plan.deliveries] == [2]
    assert not any(isinstance(op, SkipOp) for op in plan.ops)


def test_rebuild_after_election_gives_fresh_deadlines_and_continues_after_delivered():
    cluster, leader = setup(["a"] * 4, ack_wait=10 * SECOND)
    commit(cluster, leader.next_deliveries(cluster.store, T0, 2))
    leader.next_deliveries(cluster.store, T0, 1)  # proposed, never committed: the old leader died
    new_leader = ConsumerLeader("S", cluster.set.consumers["C"], T0 + 100 * SECOND)
    assert new_leader.next_deadline_ns() == T0 + 110 * SECOND
    assert seqs(new_leader.next_deliveries(cluster.store, T0 + 100 * SECOND, 5)) == [(3, 3, 1), (4, 4, 1)]


@pytest.mark.parametrize("count", [0, -1])
def test_no_budget_no_delivery(count):
    cluster, leader = setup(["a"])
    assert leader.next_deliveries(cluster.store, T0, count).deliveries == []


def test_an_ack_none_pass_records_its_last_delivery_only_and_the_state_is_the_same():
    """Rule 8: an ack-none consumer's DELIVERED op carries the pass's last record; applied, it leaves the
    state (cursors, ack floor, nothing pending) where every record of the pass would have; an explicit-ack
    consumer's op still has one record per message (each one is pending)."""
    from jsraft.consumer import DeliveredOp

    cluster, leader = setup(["a", "b", "a", "a", "b"], ack_policy="none")
    plan = leader.next_deliveries(cluster.store, T0, 10)
    assert seqs(plan) == [(1, 1, 1), (2, 2, 1), (3, 3, 1), (4, 4, 1), (5, 5, 1)]
    (op,) = plan.ops
    assert type(op) is DeliveredOp and [record[:3] for record in op.records] == [(5, 5, 1)]
    every = Cluster(store_with(["a", "b", "a", "a", "b"]))
    every.create("C", ack_policy="none")
    every.apply(DeliveredOp(name="C", records=tuple((s, s, 1, T0) for s in range(1, 6))))
    commit(cluster, plan)
    for state in (cluster.state("C"), every.state("C")):
        assert (state.delivered_stream_seq, state.delivered_consumer_seq, state.ack_floor_stream_seq,
                state.ack_floor_consumer_seq, state.pending) == (5, 5, 5, 5, {})
    explicit, leader = setup(["a", "b", "a"])
    (op,) = leader.next_deliveries(explicit.store, T0, 10).ops
    assert [record[:3] for record in op.records] == [(1, 1, 1), (2, 2, 1), (3, 3, 1)]
