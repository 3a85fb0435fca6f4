"""Replica determinism of `ConsumerSet`, as a Hypothesis property over random op logs.

Method: draw a random log of CONSUMER entries — creates (several configs, ack policies, filters),
deliveries that a leader could send (new seqs with new consumer seqs) mixed with stale and nonsensical
records, acks and terms of random seqs, skips, pauses, deletes — and apply it to two replicas over two
stores holding the same messages. After every entry: the replicas are equal, their `removable` answers are
equal (and the caller deletes them from both stores), every consumer passes `ConsumerState.check()`, no
ack floor moved back, pending is within delivered, and snapshot -> restore gives an equal set.
"""

from __future__ import annotations

import json

import hypothesis.strategies as st
from consumer_kit import store_with
from hypothesis import given, settings

from jsraft.consumer import (
    AckOp, ConsumerSet, CreateOp, DeleteOp, DeliveredOp, PauseOp, SkipOp, TermOp, encode_ops,
    encode_snapshot, restore_snapshot,
)
from jsraft.jsapi.stream_config import Retention

SUBJECTS = ["a.1", "b.1", "a.2", "c.1"] * 10  # 40 messages
CONFIGS = [
    {}, {"ack_policy": "all"}, {"ack_policy": "none", "deliver_policy": "new"},
    {"filter_subject": "a.>", "max_deliver": 2}, {"filter_subjects": ["b.1", "c.*"], "deliver_policy": "last"},
    {"filter_subject": "c.1"},
]
NAMES = ["P", "Q", "R"]


@st.composite
def op_for(draw, name: str, next_cseq: list[int]):
    kind = draw(st.sampled_from(["create", "delivered", "delivered", "ack", "ack", "term", "skip", "pause",
                                 "delete", "stale"]))
    seq = st.integers(min_value=1, max_value=45)
    if kind == "create":
        config = dict(draw(st.sampled_from(CONFIGS)), durable_name=name)
        return CreateOp(name=name, config=json.dumps(config).encode(), created_ns=draw(st.integers(0, 99)))
    if kind == "delivered":
        records = []
        for _ in range(draw(st.integers(1, 4))):
            next_cseq[0] += 1
            records.append((draw(seq), next_cseq[0], draw(st.integers(1, 4)), draw(st.integers(0, 10**6))))
        return DeliveredOp(name=name, records=tuple(records))
    if kind == "ack":
        return AckOp(name=name, seqs=tuple(draw(st.lists(seq, min_size=1, max_size=4))))
    if kind == "term":
        return TermOp(name=name, seqs=tuple(draw(st.lists(seq, min_size=1, max_size=2))))
    if kind == "skip":
        return SkipOp(name=name, stream_seq=draw(st.integers(0, 45)))
    if kind == "pause":
        return PauseOp(name=name, until_ns=draw(st.integers(0, 10)))
    if kind == "delete":
        return DeleteOp(name=name)
    return DeliveredOp(name=name, records=((draw(seq), draw(st.integers(1, 5)), 1, 0),))


def _floors(consumers: ConsumerSet) -> dict[str, tuple[int, int]]:
    return {n: (e.state.ack_floor_consumer_seq, e.state.ack_floor_stream_seq) for n, e in consumers.consumers.items()}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list(Retention)), st.data())
def test_replicas_fed_the_same_log_agree(retention, data):
    stores = [store_with(SUBJECTS), store_with(SUBJECTS)]
    replicas = [ConsumerSet(store, retention) for store in stores]
    next_cseq = [0]
    for index in range(1, data.draw(st.integers(5, 40)) + 1):
        ops = [data.draw(op_for(data.draw(st.sampled_from(NAMES)), next_cseq)) for _ in range(data.draw(st.integers(1, 3)))]
        body = encode_ops(ops)
        before = _floors(replicas[0])
        results = [replica.apply(index, body) for replica in replicas]
        assert results[0].removable == results[1].removable
        assert results[0].created == results[1].created and results[0].deleted == results[1].deleted
        for store, result in zip(stores, results):
            for seq in result.removable:
                assert store.delete(seq)
        assert replicas[0] == replicas[1]
        after = _floors(replicas[0])
        for name, floor in after.items():
            if name in before and name not in results[0].created:
                assert floor[0] >= before[name][0] and floor[1] >= before[name][1], "ack floor moved back"
        for entry in replicas[0].consumers.values():
            entry.state.check()
        restored = restore_snapshot(encode_snapshot(replicas[1]), stores[1], retention)
        assert restored == replicas[1]
    assert stores[0].state().agreement_key() == stores[1].state().agreement_key()
