"""`FileStore.deleted_ranges`: the interior deletes from the block summaries equal what a walk finds.

Method: a real FileStore on `OsDisk` in a temporary directory, 64 KiB blocks of ~60 records of 1 KB, so they
roll often. Hypothesis drives random appends, skips, deletes (single and in runs, so whole blocks
empty and are removed), head compactions and purges by subject; after each program `deleted_ranges` over
the stream's `[first_seq, last_seq]` must equal the ranges found by walking the live messages with
`load_next` (the way `group_state_of` found them before), and the stream snapshot's group state built
from it must be the walk's. FileStore-only cases: a record repaired into another block (`moved`) is live,
not a hole; a faulted sequence raises `DamagedSequence` (as the walk's read did) and the snapshot is
refused; a sub-range of the stream reports only the holes inside it.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from store_helpers import put_many
from test_load_run import repaired_elsewhere

from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.store import StoreConfig
from jsraft.store.base import FaultKind
from jsraft.store.filestore import FileStore
from jsraft.stream.snapshot import GroupState, group_state_of


def walked(store, first: int, last: int) -> list[tuple[int, int]]:
    """The holes in `[first, last]` by walking `load_next` (group_state_of's way without the query)."""
    holes: list[tuple[int, int]] = []
    expected = first
    while expected <= last:
        try:
            seq = store.load_next(None, expected).seq
        except NoMessageFound:
            seq = last + 1
        seq = min(seq, last + 1)
        if seq > expected:
            holes.append((expected, seq - 1))
        expected = seq + 1
    return holes


PAYLOAD = b"p" * 1000  # ~60 records per 64 KiB block: blocks roll, empty and are removed


def _store(path) -> FileStore:
    return FileStore.open(OsDisk(str(path)), StoreConfig(name="S", block_size=64 * 1024))


OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(1, 120)),
    st.tuples(st.just("skip"), st.integers(1, 40)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.integers(1, 60)),
    st.tuples(st.just("compact"), st.integers(0, 10_000)),
    st.tuples(st.just("purge"), st.sampled_from(["a", "b", "c"])),
), min_size=1, max_size=25)


def _run(store: FileStore, ops) -> None:
    """Apply a program drawn from `OPS`."""
    for op in ops:
        state = store.state()
        if op[0] == "put":
            put_many(store, [("a", "b", "c")[i % 3] for i in range(op[1])], PAYLOAD)
        elif op[0] == "skip":
            store.skip(state.last_seq + 1, op[1])
        elif op[0] == "delete" and state.last_seq:
            start = state.first_seq + op[1] % max(1, state.last_seq - state.first_seq + 1)
            for seq in range(start, min(start + op[2], state.last_seq + 1)):
                store.delete(seq)
        elif op[0] == "compact" and state.last_seq:
            store.compact(state.first_seq + op[1] % max(1, state.last_seq - state.first_seq + 1))
        elif op[0] == "purge":
            store.purge(subject=op[1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_deleted_ranges_equal_the_walk_after_any_program(tmp_path_factory, ops):
    store = _store(tmp_path_factory.mktemp("s"))
    try:
        _run(store, ops)
        state = store.state()
        if not state.msgs:
            return
        assert store.deleted_ranges(state.first_seq, state.last_seq) == walked(store, state.first_seq, state.last_seq)
        group = group_state_of(store, state)
        assert group.deleted == tuple(walked(store, state.first_seq, state.last_seq))
        assert sum(hi - lo + 1 for lo, hi in group.deleted) == state.num_deleted
        GroupState.check(group)
    finally:
        store.close()


def test_a_sub_range_reports_only_the_holes_inside_it(tmp_path):
    store = _store(tmp_path / "msgs")
    put_many(store, ["a"] * 50)
    for seq in (3, 4, 10, 30, 31, 32):
        store.delete(seq)
    assert store.deleted_ranges(1, 50) == [(3, 4), (10, 10), (30, 32)]
    assert store.deleted_ranges(4, 31) == [(4, 4), (10, 10), (30, 31)] == walked(store, 4, 31)
    assert store.deleted_ranges(11, 29) == []
    assert store.deleted_ranges(9, 8) == []
    store.close()


def test_a_record_repaired_into_another_block_is_live_not_a_hole(tmp_path):
    store = FileStore.open(OsDisk(str(tmp_path / "msgs")), StoreConfig(name="S"))
    put_many(store, ["a"] * 10)
    store.delete(7)
    repaired_elsewhere(tmp_path, store, 4)  # its good copy is in the newest block (`moved`)
    assert store.deleted_ranges(1, 10) == [(7, 7)] == walked(store, 1, 10)
    store.close()


def test_a_faulted_sequence_raises_as_the_walk_did_and_the_snapshot_is_refused(tmp_path):
    store = _store(tmp_path / "msgs")
    put_many(store, ["a"] * 20)
    store.delete(2)
    store.fault_map.add(6, 7, FaultKind.missing)
    with pytest.raises(DamagedSequence) as raised:
        store.deleted_ranges(1, 20)
    assert raised.value.seq == 6
    assert store.deleted_ranges(8, 20) == []  # a range the fault does not touch still answers
    with pytest.raises(DamagedSequence):
        group_state_of(store)
    store.close()


def test_a_block_whose_every_message_was_deleted_is_one_hole_with_its_neighbours(tmp_path):
    store = _store(tmp_path / "msgs")
    put_many(store, ["a"] * 200, PAYLOAD)
    middle = store.blocks[1]
    first, last = middle.first_seq, middle.last_seq
    for seq in range(first - 1, last + 2):
        store.delete(seq)
    first, last = first - 1, last + 1
    assert store.deleted_ranges(1, 200) == [(first, last)] == walked(store, 1, 200)
    store.close()


def walked_count(store, first: int, last: int) -> int:
    """The live messages in `[first, last]` by walking `load_next` (`num_pending`'s way before)."""
    count, seq = 0, first
    while seq <= last:
        try:
            seq = store.load_next(None, seq).seq
        except NoMessageFound:
            break
        if seq > last:
            break
        count, seq = count + 1, seq + 1
    return count


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS, st.integers(0, 10_000), st.integers(0, 10_000))
def test_count_live_equals_the_walk_after_any_program(tmp_path_factory, ops, a, b):
    store = _store(tmp_path_factory.mktemp("s"))
    try:
        _run(store, ops)
        state = store.state()
        span = state.last_seq + 2
        first, last = sorted((a % span, b % span))
        assert store.count_live(first, last) == walked_count(store, first, last)
        assert store.count_live(1, state.last_seq) == state.msgs
        assert store.count_live(last + 1, last) == 0
    finally:
        store.close()


def test_count_live_counts_a_repaired_record_and_raises_on_a_fault(tmp_path):
    store = FileStore.open(OsDisk(str(tmp_path / "msgs")), StoreConfig(name="S"))
    put_many(store, ["a"] * 10)
    store.delete(7)
    repaired_elsewhere(tmp_path, store, 4)  # live in the newest block (`moved`), a hole in its own
    assert store.count_live(1, 10) == 9 == walked_count(store, 1, 10)
    assert store.count_live(4, 4) == 1 and store.count_live(5, 7) == 2
    store.fault_map.add(8, 8, FaultKind.missing)
    with pytest.raises(DamagedSequence) as raised:
        store.count_live(3, 9)
    assert raised.value.seq == 8 and store.count_live(1, 7) == 6
    store.close()
