"""A record detached because it no longer reads back leaves a FileStore's `bytes` and subject counts exactly
as an undamaged replica holding the same messages reports them, whatever happens to its sequence next.

Method: two FileStores in real files get the same messages (64 KiB blocks, payloads of varied sizes, some
with headers): the *damaged* one has a record's bytes flipped on disk behind its back and finds it by a
scan (`scan()`, what the background verifier does) or a read (`load`); the *twin* stays intact. Each test
then does to the damaged store what a replica does with such a sequence (repair it, or delete it, cut it,
truncate it, because the group no longer holds it; reopen in between from the index) and to the twin
what the same history does to an intact replica. Their state tuples (bytes included), subject counts and
served messages must be equal, and both must match a recomputation from the live messages
(`assert_consistent`). Before the fix a detached record's size and subject stayed counted until a repair
(chaos S03-seed4: replicas with identical content and different `bytes`), and one reopen from the index
made the repair count them twice.
"""

from __future__ import annotations

import os

import pytest

from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence
from jsraft.store import StoreConfig
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore

from store_helpers import HEADERS, assert_consistent, live_messages

COUNT = 600


def _msg(seq: int) -> tuple[int, str, bytes, bytes, int]:
    """Sizes differ per sequence, so a wrong size left in the totals shows."""
    headers = HEADERS if seq % 4 == 0 else b""
    return seq, f"orders.{seq % 7}", headers, (f"p{seq}-".encode() * (20 + seq % 37))[: 60 + seq % 113], 1_000 + seq


def _open(root: str, config: StoreConfig, **kwargs) -> FileStore:
    return FileStore.open(OsDisk(root), config, **kwargs)


def _pair(tmp_path, compression: str = "none", **limits) -> tuple[FileStore, FileStore, StoreConfig]:
    config = StoreConfig(block_size=64 * 1024, compression=compression, **limits)
    stores = []
    for name in ("damaged", "twin"):
        store = _open(str(tmp_path / name), config)
        for first in range(1, COUNT + 1, 50):
            store.append_batch([_msg(seq) for seq in range(first, min(first + 50, COUNT + 1))])
        store.sync()
        stores.append(store)
    return stores[0], stores[1], config


def _root(store: FileStore) -> str:
    return store.disk.root


def _damage(store: FileStore, seq: int) -> None:
    """Flip a byte inside `seq`'s record on disk, where the running store does not look."""
    block, offset, length, _ = store.locate(seq)
    with open(os.path.join(_root(store), block_name(block.number)), "r+b") as handle:
        handle.seek(offset + length - 3)
        byte = handle.read(1)[0]
        handle.seek(offset + length - 3)
        handle.write(bytes([byte ^ 0x10]))
    store.files.drop_cache()


def _find_by_scan(store: FileStore, seqs: list[int]) -> None:
    for seq in seqs:
        _damage(store, seq)
    found = {s for f in store.scan() for s in range(f.first, f.last + 1)}
    assert found == set(seqs)


def _assert_same(damaged: FileStore, twin: FileStore) -> None:
    assert damaged.faults() == []
    assert damaged.state() == twin.state()
    assert damaged.subject_counts() == twin.subject_counts()
    assert [(m.seq, m.payload) for m in live_messages(damaged)] == [(m.seq, m.payload) for m in live_messages(twin)]
    assert_consistent(damaged)


def _repair(store: FileStore, seq: int) -> None:
    _, subject, headers, payload, timestamp_ns = _msg(seq)
    store.repair(seq, subject, headers, payload, timestamp_ns)


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("how", ["repair_deleted", "delete"])
def test_a_damaged_sequence_the_group_deleted_leaves_no_bytes_behind(tmp_path, compression, how):
    damaged, twin, _ = _pair(tmp_path, compression)
    _find_by_scan(damaged, [100])
    getattr(damaged, how)(*((100, 100) if how == "repair_deleted" else (100,)))
    twin.delete(100)
    _assert_same(damaged, twin)


@pytest.mark.parametrize("how", ["compact", "purge", "truncate"])
def test_a_damaged_sequence_cut_away_leaves_no_bytes_behind(tmp_path, how):
    damaged, twin, _ = _pair(tmp_path)
    _find_by_scan(damaged, [100])
    for store in (damaged, twin):
        if how == "compact":
            store.compact(150)
        elif how == "purge":
            store.purge(keep=COUNT - 120)
        else:
            store.truncate(90)
    _assert_same(damaged, twin)


def test_the_totals_of_a_damaged_store_cover_exactly_the_messages_it_serves(tmp_path):
    """While the faults are open, bytes and subject counts are those of the messages served, as msgs and the
    digest already were. Two damaged records in one block: the first one's block cannot be settled while
    the second one still counts as live (it does not read back either); the second one's detach settles
    both."""
    damaged, twin, _ = _pair(tmp_path)
    _find_by_scan(damaged, [100, 101, 350])
    assert_consistent(damaged)
    damaged.repair_deleted(100, 101)
    _repair(damaged, 350)
    for seq in (100, 101):
        twin.delete(seq)
    _assert_same(damaged, twin)


def test_a_record_damaged_on_read_then_deleted(tmp_path):
    damaged, twin, _ = _pair(tmp_path)
    _damage(damaged, 200)
    with pytest.raises(DamagedSequence):
        damaged.load(200)
    damaged.delete(200)
    twin.delete(200)
    _assert_same(damaged, twin)


def test_open_from_an_index_written_while_a_record_was_detached_then_repair(tmp_path):
    """The index carries what the store owes for a detached record: the reopened store neither counts it
    twice when it is repaired nor keeps it when it is deleted."""
    damaged, twin, config = _pair(tmp_path)
    root = _root(damaged)
    _find_by_scan(damaged, [100, 300])
    damaged.close()  # the index is written with the faults open
    reopened = _open(root, config)
    assert reopened.recovery_report.get("index") == "used"
    _repair(reopened, 100)
    reopened.repair_deleted(300, 300)
    twin.delete(300)
    _assert_same(reopened, twin)
    reopened.sync()
    reopened.files.abandon()  # a crash: the index on disk predates the repair, which is scanned after it
    crashed = _open(root, config)
    assert crashed.recovery_report.get("index") == "used"
    _assert_same(crashed, twin)
    crashed.close()
    assert _open(root, config, use_index=False).state() == twin.state()


def test_a_damaged_repair_record_deleted_afterwards(tmp_path):
    damaged, twin, _ = _pair(tmp_path)
    _find_by_scan(damaged, [100])
    _repair(damaged, 100)
    assert damaged.state() == twin.state()
    _find_by_scan(damaged, [100])  # now the repair record, in the newest block, is the one damaged
    damaged.repair_deleted(100, 100)
    twin.delete(100)
    _assert_same(damaged, twin)


def test_an_erase_lost_to_a_crash_reopens_from_the_older_index_with_the_right_bytes(tmp_path):
    """The index vouches for the erased record's slot; the tombstone after it removes a record that now
    reads back as `ERASED` (unreadable): its bytes must leave all the same."""
    damaged, twin, config = _pair(tmp_path)
    root = _root(damaged)
    damaged.close()
    reopened = _open(root, config)
    reopened.erase(100)
    reopened.files.abandon()  # a crash: the index predates the erase
    again = _open(root, config)
    assert again.recovery_report.get("index") == "used"
    twin.delete(100)
    _assert_same(again, twin)


def test_a_per_subject_limit_after_the_first_of_its_subject_was_found_damaged(tmp_path):
    """The subject's first-sequence hint pointed at the detached record, and its count still held it: the
    limit either tripped the invariant or removed one live message too many."""
    damaged, twin, _ = _pair(tmp_path, max_msgs_per_subject=COUNT)
    _find_by_scan(damaged, [7])  # the first message of `orders.0`
    twin.delete(7)
    config = StoreConfig(block_size=64 * 1024, max_msgs_per_subject=80)
    for store in (damaged, twin):
        store.update_config(config)
        store.append(COUNT + 1, *_msg(COUNT + 1)[1:])
    damaged.repair_deleted(7, 7)  # the group removed it meanwhile
    _assert_same(damaged, twin)


def test_a_block_owing_across_a_truncate_and_the_same_sequence_damaged_again(tmp_path):
    """Seq 50 does not read back either, so detaching 100 cannot settle block 1: it owes 100's record. A
    truncate below 100 and the same messages appended again (block 1 is the newest then); the new record of
    100 damaged too: the block owes two records of seq 100 at once, both settled when 50 is found."""
    damaged, twin, _ = _pair(tmp_path)
    assert damaged.locate(50)[0] is damaged.locate(100)[0]
    _damage(damaged, 50)
    _damage(damaged, 100)
    with pytest.raises(DamagedSequence):
        damaged.load(100)
    assert damaged.unaccounted  # block 1 could not be settled: 50 still counts as live
    for store in (damaged, twin):
        store.truncate(99)
        store.append_batch([_msg(seq) for seq in range(100, 121)])
    _damage(damaged, 100)
    with pytest.raises(DamagedSequence):
        damaged.load(100)
    with pytest.raises(DamagedSequence):
        damaged.load(50)
    assert not damaged.unaccounted
    assert_consistent(damaged)
    damaged.repair_deleted(50, 50)
    _repair(damaged, 100)
    twin.delete(50)
    _assert_same(damaged, twin)


def test_a_damaged_repair_record_in_a_block_a_truncate_removes_becomes_a_fault_to_repair(tmp_path):
    """The repair record of a sequence below the cut lies in a block the truncate removes and does not
    read back, so it cannot be carried over: the sequence is detached as a `corrupt` fault (repaired from a
    peer like any damaged record), not left pointing at the removed block (a read then raised `KeyError`)."""
    damaged, twin, _ = _pair(tmp_path)
    _find_by_scan(damaged, [100])
    _repair(damaged, 100)
    repaired_in = damaged.locate(100)[0].number
    _damage(damaged, 100)  # the repair record, in the newest block, behind the store's back
    for store in (damaged, twin):
        store.truncate(300)
    assert repaired_in not in {block.number for block in damaged.blocks}
    assert [(f.first, f.last, f.kind.value) for f in damaged.faults()] == [(100, 100, "corrupt")]
    with pytest.raises(DamagedSequence):
        damaged.load(100)
    assert_consistent(damaged)
    _repair(damaged, 100)
    _assert_same(damaged, twin)
