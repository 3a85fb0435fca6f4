"""`load_run`: a batched read gives exactly what successive `load_next` calls give, cut short anywhere.

Method: on both stores (the `make_store` fixture), streams with interior deletes, a compacted head,
subject filters, blocks small enough to roll every few hundred messages, compressed records and a large
message; each run is checked against the general way — `load_next(filters, seq)` repeated from the same
start — as a prefix of it, and reading a whole stream run after run (falling back to `load_next` where a
run is empty, as the consumer's delivery does) must list every message the general way lists. A
Hypothesis test does the same over random deletes and filters. FileStore-only cases damage a record at
rest (a flipped byte in the block file, cache dropped) in the middle of a run: the run stops before it
and records nothing; the following `load` of that sequence detaches and reports it, and `load_next`
passes it over. A sequence repaired into another block (`moved`) and a faulted one stop a run too.
`verify_run` (the snapshot read-back's check without decoding) must give every run's last sequence (0
for an empty one) in all of these, and leave the store as `load_run` does: nothing recorded.
"""

from __future__ import annotations

import os

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from store_helpers import put, put_many

from jsraft.codec.records import Kind
from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.store import StoreConfig
from jsraft.store.base import FaultKind
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore
from jsraft.store.fs_run import DENSITY_SUBJECTS_MAX, RUN_BYTES_MAX

SMALL_BLOCKS = {"name": "S", "block_size": 64 * 1024}


def general_way(store, start: int, filters=None, count: int | None = None) -> list:
    out = []
    seq = start
    while count is None or len(out) < count:
        try:
            msg = store.load_next(filters, seq)
        except NoMessageFound:
            return out
        out.append(msg)
        seq = msg.seq + 1
    return out


def read_by_runs(store, start: int, count: int, filters=None) -> tuple[list, int]:
    """The whole stream run after run (a `load_next` where a run is empty); and how many runs."""
    out, runs, seq = [], 0, start
    while True:
        run = store.load_run(seq, count, filters)
        if filters is None:
            assert store.verify_run(seq, count) == (run[-1].seq if run else 0)
        if run:
            runs += 1
            assert run == general_way(store, seq, filters, len(run))  # a prefix of the general way
        else:
            try:
                run = [store.load_next(filters, seq)]
            except NoMessageFound:
                return out, runs
        out += run
        seq = run[-1].seq + 1


def test_a_run_is_the_general_way_over_deletes(make_store):
    store = make_store()
    put_many(store, [f"s.{i % 3}" for i in range(40)])
    for seq in (1, 2, 7, 8, 9, 20, 40):
        store.delete(seq)
    run = store.load_run(1, 10)
    assert [m.seq for m in run] == [3, 4, 5, 6, 10, 11, 12, 13, 14, 15]
    assert run == general_way(store, 1, count=10)
    assert store.load_run(38, 10) == general_way(store, 38)  # the last live one; deleted 40 ends it
    assert store.load_run(40, 10) == [] and store.load_run(41, 10) == [] and store.load_run(5, 0) == []
    assert read_by_runs(store, 1, 7)[0] == general_way(store, 1)


def test_a_run_below_the_head_starts_at_the_first_live(make_store):
    store = make_store()
    put_many(store, ["a"] * 20)
    store.compact(8)
    assert store.load_run(1, 5) == general_way(store, 1, count=5)
    assert store.load_run(1, 5)[0].seq == 8


def test_a_filtered_run_passes_over_other_subjects(make_store):
    store = make_store()
    put_many(store, ["a.x", "b.y", "a.z", "c", "a.x", "b.y"] * 5)
    for filters in (["a.*"], "b.y", ["b.>", "c"], [">"], None):
        assert store.load_run(1, 50, filters) == general_way(store, 1, filters)[:50]
        assert read_by_runs(store, 1, 4, filters)[0] == general_way(store, 1, filters)


def test_runs_across_block_boundaries_list_every_message(make_store):
    store = make_store(SMALL_BLOCKS)
    put_many(store, ["a", "b"] * 600, payload=b"p" * 200)  # ~ 270 records a block
    for seq in range(250, 300, 7):
        store.delete(seq)
    listed, runs = read_by_runs(store, 1, 256)
    assert listed == general_way(store, 1)
    assert runs >= len(listed) // 256  # runs, not one message at a time
    if isinstance(store, FileStore):
        assert len(store.blocks) > 3
        block = store.blocks[0]
        run = store.load_run(block.last_seq - 3, 100)
        assert [m.seq for m in run] == list(range(block.last_seq - 3, block.last_seq + 1))  # ends with the block


def test_a_run_is_bounded_in_bytes_but_takes_one_large_message(make_store):
    store = make_store()
    big = b"B" * (RUN_BYTES_MAX + 10)
    put(store, "a", big)
    put_many(store, ["a"] * 3)
    run = store.load_run(1, 10)
    assert run[0].payload == big and run == general_way(store, 1, count=len(run))
    if isinstance(store, FileStore):
        assert len(run) == 1


def test_compressed_records_read_in_a_run(make_store):
    store = make_store({"name": "S", "compression": "zstd", "block_size": 64 * 1024})
    put_many(store, ["a"] * 400, payload=b"compress me " * 40)  # blocks roll, and are compressed sealed
    store.delete(4)
    if isinstance(store, FileStore):
        block = store.blocks[0]
        record = store.read_record(block, block.offsets[0], block.lengths[0])
        assert block.sealed and record[8] == Kind.MSG_ZSTD
    assert read_by_runs(store, 1, 50)[0] == general_way(store, 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["a", "b.x", "b.y", "c"]), min_size=1, max_size=80),
       st.sets(st.integers(1, 80)), st.sampled_from([None, ["a"], ["b.*"], ["a", "c"]]),
       st.integers(1, 20), st.integers(1, 90))
def test_runs_agree_with_load_next(make_store, subjects, deleted, filters, count, start):
    store = make_store()
    put_many(store, subjects)
    for seq in deleted:
        if seq <= len(subjects):
            store.delete(seq)
    run = store.load_run(start, count, filters)  # either store may stop early, never differ
    if filters is None:
        assert store.verify_run(start, count) == (run[-1].seq if run else 0)
    assert run == general_way(store, start, filters, len(run))
    assert read_by_runs(store, start, count, filters)[0] == general_way(store, start, filters)


# --- FileStore: damage, faults, moved records -------------------------------------------------------------

def _file_store(tmp_path) -> FileStore:
    return FileStore.open(OsDisk(str(tmp_path / "msgs")), StoreConfig(name="S"))


def _flip(tmp_path, store: FileStore, seq: int) -> None:
    """Damage `seq`'s record at rest: one byte of its payload flipped in the block file."""
    block = store.files.block_for(seq)
    offset = block.offsets[seq - block.first_seq] + block.lengths[seq - block.first_seq] - 1
    path = os.path.join(tmp_path, "msgs", block_name(block.number))
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x40]))
    store.files.drop_cache()


def test_a_damaged_record_in_the_middle_ends_the_run_and_load_settles_it(tmp_path):
    store = _file_store(tmp_path)
    put_many(store, ["a"] * 10)
    store.sync()
    _flip(tmp_path, store, 5)
    assert store.verify_run(1, 10) == 4 and store.verify_run(5, 10) == 0
    assert [m.seq for m in store.load_run(1, 10)] == [1, 2, 3, 4]
    assert store.faults() == [] and store.state().msgs == 10  # the runs recorded nothing
    assert store.load_run(5, 10) == []  # starting at it: nothing, the caller asks `load`
    with pytest.raises(DamagedSequence):
        store.load(5)
    assert [(f.first, f.last, f.kind) for f in store.faults()] == [(5, 5, FaultKind.corrupt)]
    assert store.load_next(None, 5).seq == 6
    assert store.load_run(5, 10) == []  # a fault now: `load` raises, `load_next` passes it over
    assert [m.seq for m in store.load_run(6, 10)] == [6, 7, 8, 9, 10]
    assert [m.seq for m in store.load_run(1, 10)] == [1, 2, 3, 4]


def test_last_matching_seq_is_load_lasts_seq_without_the_read(tmp_path):
    """`last_matching_seq` answers from the subject index: for a record that does not verify, the seq
    `load_last`'s `DamagedSequence` names (consumer `position` invariant 3), and nothing is read."""
    store = _file_store(tmp_path)
    put_many(store, ["a", "b", "a", "b", "c"])
    store.sync()
    _flip(tmp_path, store, 4)
    assert [store.last_matching_seq(f) for f in ("a", "b", "c", ">", "d", "*")] == [3, 4, 5, 5, 0, 5]
    assert store.faults() == []  # no record was read
    for subject_filter in ("a", "b", "c", ">", "*", "b"):  # "b" again once the read detached 4
        answered = store.last_matching_seq(subject_filter)
        try:
            seq = store.load_last(subject_filter).seq
        except DamagedSequence as error:
            seq = error.seq
        assert answered == seq
    assert [(f.first, f.last) for f in store.faults()] == [(4, 4)] and store.last_matching_seq("b") == 2
    with pytest.raises(NoMessageFound):
        store.load_last("d")


def test_a_faulted_sequence_ends_the_run(tmp_path):
    store = _file_store(tmp_path)
    put_many(store, ["a"] * 10)
    store.fault_map.add(6, 7, FaultKind.missing)
    assert [m.seq for m in store.load_run(2, 10)] == [2, 3, 4, 5]
    assert store.load_run(6, 10) == []
    assert store.verify_run(2, 10) == 5 and store.verify_run(6, 10) == 0


def repaired_elsewhere(tmp_path, store: FileStore, seq: int) -> None:
    """Damage `seq` at rest, let `load` find it, and repair it: the good copy goes to the newest block."""
    store.sync()
    _flip(tmp_path, store, seq)
    with pytest.raises(DamagedSequence):
        store.load(seq)
    store.repair(seq, "a", b"", b"x", seq * 10)
    assert seq in store.moved


def test_a_repaired_record_in_another_block_ends_the_run(tmp_path):
    store = _file_store(tmp_path)
    put_many(store, ["a"] * 10)
    repaired_elsewhere(tmp_path, store, 4)
    assert [m.seq for m in store.load_run(1, 10)] == [1, 2, 3]
    assert store.load_run(4, 10) == []
    assert store.verify_run(1, 10) == 3 and store.verify_run(4, 10) == 0
    assert store.load(4).payload == b"x"
    assert read_by_runs(store, 1, 10)[0] == general_way(store, 1)


def test_run_pays_where_most_of_the_block_matches(make_store):
    store = make_store(SMALL_BLOCKS)
    put_many(store, ["orders.new"] * 300, payload=b"p" * 200)  # the first block: one subject
    put_many(store, ["orders.new", "orders.old", "orders.old"] * 200, payload=b"p" * 200)  # later: 1 in 3
    if not isinstance(store, FileStore):
        assert not store.run_pays(["orders.new"], 1)  # a run saves nothing in memory
        return
    first, last = store.blocks[0], store.blocks[-1]
    assert first.subjects.keys() == {"orders.new"} and last.subjects.keys() == {"orders.new", "orders.old"}
    assert store.run_pays(["orders.new"], 1) and store.run_pays("orders.new", first.last_seq)
    assert store.run_pays(["orders.*"], 1) and store.run_pays([">"], last.first_seq)
    assert store.run_pays(["orders.old"], last.first_seq)  # two in three
    assert not store.run_pays(["orders.new"], last.first_seq)  # one in three
    assert not store.run_pays(["other"], 1)
    assert not store.run_pays(["orders.new"], store.state().last_seq + 1)  # no block holds it
    # Deleting "orders.old" messages of the newest block until half of it is "orders.new".
    olds = [seq for seq in range(last.first_seq, last.last_seq + 1) if store.load(seq).subject == "orders.old"]
    for seq in olds[: len(olds) // 2 + 1]:
        store.delete(seq)
    assert store.run_pays(["orders.new"], last.first_seq)
    for filters in (["orders.new"], ["orders.old"]):
        assert read_by_runs(store, 1, 256, filters)[0] == general_way(store, 1, filters)


def test_run_pays_samples_a_block_of_many_subjects(make_store):
    """Of a KV-like block (more subjects than `DENSITY_SUBJECTS_MAX`) the first that many subjects are
    counted: a filter on the whole bucket (`keys()`) reads runs, one key's watch does not. A sample can
    mislead (here `a.*` matches its first 64 subjects and then none): a run then reads more than it
    delivers, and still delivers exactly what the general way does."""
    store = make_store(SMALL_BLOCKS)
    put_many(store, [f"kv.{i}" for i in range(200)])
    if isinstance(store, FileStore):
        assert len(store.blocks[0].subjects) == 200 > DENSITY_SUBJECTS_MAX
        assert store.run_pays(["kv.*"], 1) and store.run_pays([">"], 1)
        assert not store.run_pays(["kv.7"], 1) and not store.run_pays(["kv.7", "kv.150"], 1)
    for filters in (["kv.*"], ["kv.7"], ["kv.7", "kv.150"]):
        assert read_by_runs(store, 1, 256, filters)[0] == general_way(store, 1, filters)
    mixed = make_store(SMALL_BLOCKS)
    put_many(mixed, [f"a.{i}" for i in range(DENSITY_SUBJECTS_MAX)] + [f"b.{i}" for i in range(136)])
    if isinstance(mixed, FileStore):
        assert len(mixed.blocks[0].subjects) == 200
        assert mixed.run_pays(["a.*"], 1)  # misled: 64 of 200 match
    for filters in (["a.*"], ["b.*"], ["b.7"]):
        assert read_by_runs(mixed, 1, 256, filters)[0] == general_way(mixed, 1, filters)
