"""A consumer leader's kept num_pending (delivery rule 7) is always what a fresh count says.

Method: Hypothesis programs over both stores (a MemStore and a FileStore on `OsDisk` with 64 KiB blocks, so
they roll) interleave appends on a few subjects (with `max_msgs_per_subject` limits that remove messages
as they append), deletes, subject purges, head compactions, truncations and skips with delivery passes of
random sizes and acks, for consumers with no filter, a filter matching everything, and filters matching a
part, and a fixed list of every kind of change between two passes. Every new delivery's `num_pending` must equal `position.num_pending` counted from scratch above that
message at the time of the pass, and a pass after the store changed must not use the kept count (`changes`,
store invariant 7); after every step, the count consumer info reports (`ConsumerLeader.num_pending`) is the
fresh one too. A direct check counts the store reads of a filtered pass with nothing appended since the
last: none (it walked the shorter side of the cursor on every pass before).
"""

from __future__ import annotations

import hypothesis.strategies as st
from consumer_kit import SECOND, Cluster
from hypothesis import HealthCheck, given, settings

from jsraft.consumer import AckOp, ConsumerLeader
from jsraft.consumer.position import num_pending
from jsraft.disk import OsDisk
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore

T0 = 5_000 * SECOND
SUBJECTS = ("k.a", "k.b", "k.c", "x")
FILTERS = ([], ["k.*", "x"], ["k.a"], ["k.b", "x"], [">"])

OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=40)),
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("purge"), st.sampled_from(SUBJECTS)),
    st.tuples(st.just("compact"), st.integers(0, 10_000)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000)),
    st.tuples(st.just("skip"), st.integers(1, 5)),
    st.tuples(st.just("pass"), st.integers(1, 30), st.booleans()),
), min_size=1, max_size=30)


def _program(store, filters, ops) -> None:
    cluster = Cluster(store)
    cluster.create("C", ack_policy="explicit", filter_subjects=filters, max_ack_pending=100_000)
    leader = ConsumerLeader("S", cluster.set.consumers["C"], T0)
    for op in ops:
        state = store.state()
        span = max(1, state.last_seq - state.first_seq + 1)
        if op[0] == "put":
            for subject in op[1]:
                store.append(store.state().last_seq + 1, subject, b"", b"m" * 40, T0)
        elif op[0] == "delete" and state.msgs:
            store.delete(state.first_seq + op[1] % span)
        elif op[0] == "purge":
            store.purge(subject=op[1])
        elif op[0] == "compact" and state.last_seq:
            store.compact(state.first_seq + op[1] % span)
        elif op[0] == "truncate" and state.msgs:
            cut = state.first_seq - 1 + op[1] % (span + 1)
            if cut >= leader.next_seq - 1:  # a replica truncates only above what its log still holds
                store.truncate(cut)
        elif op[0] == "skip":
            store.skip(state.last_seq + 1, op[1])
        elif op[0] == "pass":
            plan = leader.next_deliveries(store, T0, op[1])
            for delivery in plan.deliveries:
                if delivery.delivery_count == 1:
                    assert delivery.num_pending == num_pending(store, filters, delivery.stream_seq), delivery
            if plan.ops:
                cluster.apply(*plan.ops)
            if op[2] and plan.deliveries:
                cluster.apply(AckOp(name="C", seqs=tuple(d.stream_seq for d in plan.deliveries)))
                leader.forget([d.stream_seq for d in plan.deliveries])
        # What consumer info reports (the leader's count above its live cursor), after every step.
        assert leader.num_pending(store) == num_pending(store, filters, leader.next_seq - 1), op


CONFIG = {"name": "S", "block_size": 64 * 1024, "max_msgs_per_subject": 25}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS, st.sampled_from(FILTERS))
def test_kept_num_pending_is_a_fresh_count_in_memory(ops, filters):
    _program(MemStore(StoreConfig.from_dict(CONFIG)), filters, ops)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS, st.sampled_from(FILTERS))
def test_kept_num_pending_is_a_fresh_count_on_files(tmp_path_factory, ops, filters):
    store = FileStore.open(OsDisk(str(tmp_path_factory.mktemp("s"))), StoreConfig.from_dict(CONFIG))
    try:
        _program(store, filters, ops)
    finally:
        store.close()


MUTATIONS = (
    [("delete", 40)], [("delete", 7)], [("purge", "k.a")], [("purge", "x")], [("compact", 30)],
    [("truncate", 50)], [("put", ["k.a"] * 30)],  # the limit of 25 a subject removes as it appends
    [("skip", 3), ("put", ["k.b", "x"])], [("put", ["k.c"] * 3)],
)


def _each_mutation(make_store) -> None:
    for filters in FILTERS:
        for mutation in MUTATIONS:
            store = make_store()
            try:
                _program(store, filters, [("put", list(SUBJECTS) * 15), ("pass", 10, True), ("pass", 3, False),
                                          *mutation, ("pass", 5, False), *mutation, ("pass", 40, True)])
            finally:
                store.close()


def test_every_kind_of_change_between_passes_is_counted_in_memory():
    _each_mutation(lambda: MemStore(StoreConfig.from_dict(CONFIG)))


def test_every_kind_of_change_between_passes_is_counted_on_files(tmp_path):
    paths = iter(range(1_000))
    _each_mutation(lambda: FileStore.open(OsDisk(str(tmp_path / str(next(paths)))), StoreConfig.from_dict(CONFIG)))


class CountingNext:
    def __init__(self, store) -> None:
        self.store, self.loads = store, 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def load_next(self, filters, seq):
        self.loads += 1
        return self.store.load_next(filters, seq)


def test_a_filtered_pass_with_nothing_new_counts_nothing_again(tmp_path):
    store = FileStore.open(OsDisk(str(tmp_path)), StoreConfig.from_dict({"name": "S", "block_size": 64 * 1024}))
    for seq in range(1, 2001):
        store.append(seq, ("k.a", "k.b")[seq % 2], b"", b"m" * 40, T0)
    counting = CountingNext(store)
    cluster = Cluster(counting)
    cluster.create("C", ack_policy="explicit", filter_subjects=["k.a"], max_ack_pending=100_000)
    leader = ConsumerLeader("S", cluster.set.consumers["C"], T0)
    plan = leader.next_deliveries(counting, T0, 500)  # the first pass counts, by walking
    cluster.apply(*plan.ops)
    counting.loads = 0
    plan = leader.next_deliveries(counting, T0, 10)
    assert len(plan.deliveries) == 10 and counting.loads <= 10  # at most one `load_next` a delivery: no walk
    assert plan.deliveries[-1].num_pending == num_pending(store, ["k.a"], plan.deliveries[-1].stream_seq)
    cluster.apply(*plan.ops)
    store.delete(1999)  # a change: the next pass counts afresh
    counting.loads = 0
    plan = leader.next_deliveries(counting, T0, 1)
    assert counting.loads > 100
    assert plan.deliveries[0].num_pending == num_pending(store, ["k.a"], plan.deliveries[0].stream_seq)
    store.close()
