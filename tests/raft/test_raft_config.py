"""RaftConfig validation, RestoredState structure and bootstrap.

Method: construct values directly and check `validate()` accepts good ones and names the broken rule
in bad ones; `RaftNode` refuses an invalid config at construction.
"""

from __future__ import annotations

import random

import attrs
import pytest

from jsraft.errors import InvalidConfig, InvariantViolation
from jsraft.raft import (
    ConfState, Entry, EntryType, HardState, RaftConfig, RaftNode, RestoredState, SnapshotMeta,
    decode_conf_change,
)


def test_defaults_are_valid():
    RaftConfig(node_id="n1").validate()


@pytest.mark.parametrize("changes, words", [
    ({"node_id": ""}, "node_id"),
    ({"heartbeat_ticks": 0}, "heartbeat_ticks"),
    ({"election_ticks": 2, "heartbeat_ticks": 2}, "election_ticks"),
    ({"max_inflight_msgs": 0}, "max_inflight_msgs"),
    ({"max_entries_per_msg": 0}, "max_entries_per_msg"),
    ({"max_bytes_per_msg": 0}, "max_bytes_per_msg"),
    ({"snapshot_chunk_bytes": 0}, "snapshot_chunk_bytes"),
    ({"snapshot_bytes_max": 10, "snapshot_chunk_bytes": 100}, "snapshot_bytes_max"),
    ({"learner_catchup_entries_max": -1}, "learner_catchup_entries_max"),
    ({"pending_reads_max": 0}, "pending_reads_max"),
])
def test_invalid_configs_are_named(changes, words):
    config = attrs.evolve(RaftConfig(node_id="n1"), **changes)
    with pytest.raises(InvalidConfig, match=words):
        config.validate()


def test_node_refuses_an_invalid_config():
    with pytest.raises(InvalidConfig):
        RaftNode(RaftConfig(node_id="n1", heartbeat_ticks=5, election_ticks=5), random.Random(0),
                 RestoredState.bootstrap(("n1",)))


def test_bootstrap_records_the_membership_as_committed_entries():
    restored = RestoredState.bootstrap(("n2", "n1"), learners=("n3",))
    assert [decode_conf_change(e.data).node_id for e in restored.entries] == ["n1", "n2", "n3"]
    assert all(e.type is EntryType.CONF_CHANGE and e.term == 1 for e in restored.entries)
    assert restored.hard_state == HardState(current_term=1, commit_index=3)
    assert not restored.entries_persisted
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(0), restored)
    assert node.conf == ConfState(voters=("n1", "n2"), learners=("n3",))
    # The first Ready writes the bootstrap entries and hard state, durably.
    rd = node.ready()
    assert [e.index for e in rd.entries] == [1, 2, 3] and rd.hard_state is not None and rd.must_sync


def test_every_initial_member_bootstraps_the_same_log():
    assert RestoredState.bootstrap(("a", "b", "c")).entries == RestoredState.bootstrap(("c", "b", "a")).entries


def _entry(index, term):
    return Entry(index=index, term=term)


@pytest.mark.parametrize("kwargs, why", [
    ({"entries": [_entry(1, 1), _entry(3, 1)]}, "contiguous"),
    ({"entries": [_entry(1, 2), _entry(2, 1)]}, "non-decreasing"),
    ({"entries": [_entry(1, 1)], "faulty": {0}}, "faulty"),
    ({"snapshot": SnapshotMeta(index=3, term=1, conf=ConfState(voters=("n1",)))}, "together"),
    ({"conf_state": ConfState(voters=("n1",))}, "base membership"),
])
def test_restored_state_structure_is_checked(kwargs, why):
    with pytest.raises(InvariantViolation, match=why):
        RestoredState(**kwargs).validate()


def test_faulty_placeholders_may_break_term_order():
    """A faulty record's term is not trusted, so it is exempt from the ordering check."""
    RestoredState(entries=[_entry(1, 1), _entry(2, 9), _entry(3, 1)], faulty={2}).validate()


def test_faulty_indexes_may_be_left_out_of_the_restored_entries():
    """Storage may report a damaged record as missing; the core puts a placeholder in its place."""
    entries = [_entry(1, 1), _entry(2, 1), _entry(4, 2)]
    restored = RestoredState(hard_state=HardState(current_term=2, acked_watermark=5), entries=entries,
                             faulty={3, 5})
    restored.validate()
    assert restored.last_index == 5
    assert [(e.index, e.term) for e in restored.contiguous_entries()] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(0), restored)
    assert node.repairing and node.log.last_index == 5 and node.log.faulty == {3, 5}
    assert node.log.term_at(3) is None and node.log.term_at(4) == 2
