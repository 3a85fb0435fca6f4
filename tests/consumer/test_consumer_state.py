"""Replicated consumer state through `ConsumerSet`: ack policies, ack floor rules, max_deliver, pause.

Method: scripted logs against a MemStore (`consumer_kit.Cluster`), each step checked against what
nats-server's `consumerMemStore.UpdateDelivered` / `UpdateAcks` and `processTerm` would leave: the ack
floor advances over acked and terminated seqs, never back; for ack policy none it equals `delivered`;
ack-all acks everything up to the seq; acks of unknown or already-acked seqs are no-ops.
"""

from __future__ import annotations

import pytest
from consumer_kit import Cluster, store_with

from jsraft.consumer import AckOp, DeleteOp, DeliveredOp, PauseOp, SkipOp, TermOp
from jsraft.consumer.state import ConsumerState
from jsraft.errors import InvariantViolation


def delivered(name, *seqs, count=1, ts=10):
    return DeliveredOp(name=name, records=tuple((s, c, count, ts) for s, c in seqs))


def floors(state: ConsumerState):
    return ((state.delivered_consumer_seq, state.delivered_stream_seq),
            (state.ack_floor_consumer_seq, state.ack_floor_stream_seq))


@pytest.fixture
def cluster():
    return Cluster(store_with(["a"] * 10))


def test_explicit_acks_move_the_floor_over_contiguous_acks(cluster):
    cluster.create("C")
    cluster.apply(delivered("C", (1, 1), (2, 2), (3, 3), (4, 4)))
    state = cluster.state("C")
    assert floors(state) == ((4, 4), (0, 0)) and state.num_ack_pending == 4
    cluster.apply(AckOp(name="C", seqs=(2,)))
    assert floors(state)[1] == (0, 0)  # 1 still pending
    cluster.apply(AckOp(name="C", seqs=(1,)))
    assert floors(state)[1] == (2, 2)
    cluster.apply(AckOp(name="C", seqs=(4, 3)))
    assert floors(state) == ((4, 4), (4, 4)) and state.num_ack_pending == 0
    before = state.key()
    cluster.apply(AckOp(name="C", seqs=(1, 4, 99)))  # already acked / unknown: no-ops
    assert state.key() == before


def test_ack_all_acks_everything_up_to_the_seq(cluster):
    cluster.create("C", ack_policy="all")
    cluster.apply(delivered("C", (1, 1), (3, 2), (5, 3), (7, 4)))
    result = cluster.apply(AckOp(name="C", seqs=(5,)))
    state = cluster.state("C")
    assert list(state.pending) == [7]
    assert floors(state)[1] == (3, 5)  # the acked message (nats-server 2.15.1: filtered, ack all 5 -> 3/5)
    assert result.acked == (("C", (5,)),)
    cluster.apply(AckOp(name="C", seqs=(3,)))  # below the floor: no-op
    assert list(state.pending) == [7]


def test_ack_none_keeps_floor_at_delivered(cluster):
    cluster.create("C", ack_policy="none")
    cluster.apply(delivered("C", (2, 1), (4, 2)))
    state = cluster.state("C")
    assert floors(state) == ((2, 4), (2, 4)) and not state.pending
    cluster.apply(AckOp(name="C", seqs=(4,)))
    assert floors(state) == ((2, 4), (2, 4))


def test_redelivery_keeps_original_consumer_seq_and_counts(cluster):
    cluster.create("C", max_deliver=3)
    cluster.apply(delivered("C", (1, 1), (2, 2)))
    cluster.apply(delivered("C", (1, 3), count=2, ts=50))
    state = cluster.state("C")
    assert state.pending[1] == (1, 50) and state.redelivered == {1: 1}
    assert state.delivered_consumer_seq == 3 and state.num_redelivered == 1
    # The fourth record (count max_deliver + 1) gives the message up: it leaves pending, the floor passes it.
    cluster.apply(delivered("C", (1, 4), count=4, ts=60))
    assert 1 not in state.pending and floors(state)[1] == (1, 1)


def test_term_acts_like_an_ack_for_one_seq(cluster):
    cluster.create("C", ack_policy="all")
    cluster.apply(delivered("C", (1, 1), (2, 2)))
    cluster.apply(TermOp(name="C", seqs=(1,)))
    state = cluster.state("C")
    assert list(state.pending) == [2] and floors(state)[1] == (1, 1)


def test_stale_records_are_ignored(cluster):
    cluster.create("C")
    cluster.apply(delivered("C", (1, 1), (2, 2)))
    cluster.apply(AckOp(name="C", seqs=(1, 2)))
    before = cluster.state("C").key()
    cluster.apply(delivered("C", (2, 2)))  # an old leader's replay: below the ack floor
    cluster.apply(delivered("C", (5, 1)))  # a new message must get a new consumer seq
    assert cluster.state("C").key() == before


def test_skip_moves_delivered_and_floor(cluster):
    cluster.create("C")
    cluster.apply(SkipOp(name="C", stream_seq=6))
    assert floors(cluster.state("C")) == ((0, 6), (0, 6))
    cluster.apply(SkipOp(name="C", stream_seq=3))  # never back
    assert floors(cluster.state("C")) == ((0, 6), (0, 6))


def test_replayed_entry_index_is_ignored(cluster):
    cluster.create("C")
    cluster.apply(delivered("C", (1, 1)))
    before = cluster.set.key()
    cluster.set.apply(cluster.index, b"\x01\x01\x00\x04\x01C\x01\x00\x00\x00" + (1).to_bytes(8, "little"))
    assert cluster.set.key() == before


def test_pause_delete_and_ops_for_unknown_consumers(cluster):
    cluster.create("C")
    cluster.apply(PauseOp(name="C", until_ns=99))
    assert cluster.set.consumers["C"].paused_until_ns == 99
    result = cluster.apply(AckOp(name="nobody", seqs=(1,)), DeleteOp(name="C"), DeleteOp(name="C"))
    assert result.deleted == ("C",) and "C" not in cluster.set.consumers


def test_create_twice_updates_config_and_keeps_state(cluster):
    cluster.create("C")
    cluster.apply(delivered("C", (1, 1)))
    result = cluster.create("C", description="new")
    assert result.updated == ("C",) and cluster.state("C").num_ack_pending == 1
    assert cluster.create("C", description="new").updated == ()


def test_undecodable_config_makes_the_consumer_offline(cluster):
    result = cluster.create("C", some_future_field=True)
    entry = cluster.set.consumers["C"]
    assert result.created == ("C",) and entry.offline and "some_future_field" in entry.offline_reason
    cluster.apply(delivered("C", (1, 1)))  # ignored
    assert entry.state.delivered_stream_seq == 0 and entry.needs(1, "anything")


def test_ack_floor_moving_back_is_a_bug():
    state = ConsumerState()
    state.ack_floor_stream_seq = 5
    state.delivered_stream_seq = 3
    with pytest.raises(InvariantViolation, match="moved back"):
        state.apply_purge(1)


def test_the_floor_moves_on_acks_only_as_nats_server_moves_it():
    # Observed on nats-server 2.15.1 (nats-py, pull consumers; info after each step), stream
    # s.a s.b s.a s.b s.a s.b s.a s.b (seqs 1..8):
    #   explicit, filter s.a, fetch 1 3 5 7, ack 1 -> floor 1/2; term 5 -> 1/2; term 3 -> 3/6
    #   explicit, filter s.a, fetch 1, ack 1 -> 1/1; fetch 3 -> 1/1 (a delivery never moves it)
    #   explicit, unfiltered, fetch 1 2 3 -> 0/0; ack 2 -> 0/0; ack 1 -> 2/2; ack 3 -> 3/3
    c = Cluster(store_with(["a", "b"] * 4))
    c.create("F", filter_subject="a")
    c.apply(delivered("F", (1, 1)))
    c.apply(AckOp(name="F", seqs=(1,)))
    assert floors(c.state("F"))[1] == (1, 1)
    c.apply(delivered("F", (3, 2)))
    assert floors(c.state("F"))[1] == (1, 1)  # jsraft said 1/2 here before (first pending - 1 on delivery)
    c.apply(delivered("F", (5, 3), (7, 4)))
    c.apply(TermOp(name="F", seqs=(5,)))
    assert floors(c.state("F"))[1] == (1, 1)  # not the lowest pending: stays
    c.apply(AckOp(name="F", seqs=(3,)))
    assert floors(c.state("F"))[1] == (3, 6)
    c.create("E")
    c.apply(delivered("E", (1, 1), (2, 2), (3, 3)))
    c.apply(AckOp(name="E", seqs=(2,)))
    assert floors(c.state("E"))[1] == (0, 0)
    c.apply(AckOp(name="E", seqs=(1,)))
    assert floors(c.state("E"))[1] == (2, 2)
    c.apply(AckOp(name="E", seqs=(3,)))
    assert floors(c.state("E"))[1] == (3, 3)


def test_stored_configs_get_the_streams_defaults_and_updates_change_pause():
    from jsraft.consumer import ConsumerSet
    from jsraft.jsapi.stream_config import ConsumerLimits, StreamConfig

    stream = StreamConfig(name="S", subjects=("a",), consumer_limits=ConsumerLimits(max_ack_pending=7))
    cluster = Cluster(store_with(["a"]))
    cluster.set = ConsumerSet(cluster.store, stream=stream)
    cluster.create("C")
    assert cluster.set.consumers["C"].config.max_ack_pending == 7
    cluster.create("C", pause_until="1970-01-01T00:00:05Z")
    assert cluster.set.consumers["C"].paused_until_ns == 5_000_000_000
