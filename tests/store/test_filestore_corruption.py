"""FileStore damage detection: every damaged record is found, named exactly, and nothing else is lost.

Method: write a store with small blocks, note where each sequence's record lives (block file and
offset, from the store's own map), close it, damage the files the way disks do (a flipped bit, a cut
tail, a lost file, a zeroed index), reopen, and compare what the store reports and serves with what was
written. Compression runs the same cases with zstd-compressed sealed blocks.
"""

from __future__ import annotations

import os

import pytest

from jsraft.disk import OsDisk
from jsraft.errors import DamagedSequence
from jsraft.store import FaultKind, StoreConfig
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore

BLOCK_BYTES = 64 * 1024
COUNT = 3000


def _payload(seq: int) -> bytes:
    return (f"payload-{seq}-".encode() * 12)[:150]


def _write(root: str, compression: str = "none", count: int = COUNT, sync_last: bool = True):
    config = StoreConfig(block_size=BLOCK_BYTES, compression=compression)
    store = FileStore.open(OsDisk(root), config)
    batch = []
    for seq in range(1, count + 1):
        batch.append((seq, f"orders.{seq % 5}", b"", _payload(seq), 1_000 + seq))
        if len(batch) == 50:
            store.append_batch(batch)
            batch = []
    if batch:
        store.append_batch(batch)
    if sync_last:
        store.sync()
    where = {seq: (loc[0].number, loc[1], loc[2]) for seq in range(1, count + 1)
             if (loc := store.locate(seq)) is not None}
    state = store.state()
    return store, config, where, state


def _close_without_index(store: FileStore, root: str) -> None:
    store.close()
    os.remove(os.path.join(root, "index"))


def _flip(root: str, number: int, offset: int) -> None:
    path = os.path.join(root, block_name(number))
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ 0x10]))


def _assert_all_but(store: FileStore, damaged: set[int], count: int = COUNT) -> None:
    for seq in range(1, count + 1):
        if seq in damaged:
            with pytest.raises(DamagedSequence):
                store.load(seq)
        else:
            msg = store.load(seq)
            assert msg.payload == _payload(seq) and msg.subject == f"orders.{seq % 5}"


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("position", ["first", "middle", "last"])
def test_bit_flip_in_sealed_block_names_exactly_that_sequence(tmp_path, compression, position):
    root = str(tmp_path / "s")
    store, config, where, _ = _write(root, compression)
    blocks = sorted({number for number, _, _ in where.values()})
    target_block = blocks[1]  # a sealed block in the middle of the store
    seqs = sorted(s for s, (n, _, _) in where.items() if n == target_block)
    seq = {"first": seqs[0], "middle": seqs[len(seqs) // 2], "last": seqs[-1]}[position]
    number, offset, length = where[seq]
    _close_without_index(store, root)
    _flip(root, number, offset + length - 3)  # inside the body (compressed or not)
    reopened = FileStore.open(OsDisk(root), config)
    assert [(f.first, f.last, f.kind) for f in reopened.faults()] == [(seq, seq, FaultKind.corrupt)]
    _assert_all_but(reopened, {seq})
    assert reopened.state().msgs == COUNT - 1


@pytest.mark.parametrize("field_offset", [0, 2, 8, 12])
def test_damaged_header_of_a_middle_record_resyncs_to_the_next(tmp_path, field_offset):
    """Damage in the length, crc, kind or sequence field: the scanner resumes at the next record."""
    root = str(tmp_path / "s")
    store, config, where, _ = _write(root)
    seq = 1234
    number, offset, _ = where[seq]
    _close_without_index(store, root)
    _flip(root, number, offset + field_offset)
    reopened = FileStore.open(OsDisk(root), config)
    assert [(f.first, f.last, f.kind) for f in reopened.faults()] == [(seq, seq, FaultKind.corrupt)]
    _assert_all_but(reopened, {seq})


def test_bit_flip_in_last_synced_record_of_newest_block_is_corruption_not_a_torn_tail(tmp_path):
    root = str(tmp_path / "s")
    store, config, where, _ = _write(root)
    number, offset, length = where[COUNT]
    _close_without_index(store, root)
    _flip(root, number, offset + length - 3)
    reopened = FileStore.open(OsDisk(root), config)
    # The STORE_SYNC record after it proves it was synced: it is reported, nothing is cut.
    assert [(f.first, f.last, f.kind) for f in reopened.faults()] == [(COUNT, COUNT, FaultKind.corrupt)]
    assert reopened.recovery_report["torn_bytes_cut"] == 0
    _assert_all_but(reopened, {COUNT})


def test_truncated_newest_block_loses_only_the_unsynced_tail(tmp_path):
    root = str(tmp_path / "s")
    store, config, where, _ = _write(root, count=COUNT)
    store.append_batch([(COUNT + i, "orders.x", b"", b"unsynced", 9_000 + i) for i in range(1, 11)])
    newest = store.newest()
    size = newest.size
    store.files.abandon()  # simulate a crash: no close, no index, no sync of the last batch
    path = os.path.join(root, block_name(newest.number))
    os.truncate(path, size - 40)  # a torn write in the middle of the unsynced batch
    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.faults() == []
    assert reopened.recovery_report["torn_bytes_cut"] > 0
    state = reopened.state()
    assert COUNT <= state.last_seq < COUNT + 10
    _assert_all_but(reopened, set())


def test_deleted_middle_block_is_a_missing_range(tmp_path):
    root = str(tmp_path / "s")
    store, config, where, _ = _write(root)
    blocks = sorted({number for number, _, _ in where.values()})
    lost = blocks[2]
    lost_seqs = sorted(s for s, (n, _, _) in where.items() if n == lost)
    _close_without_index(store, root)
    os.remove(os.path.join(root, block_name(lost)))
    reopened = FileStore.open(OsDisk(root), config)
    assert [(f.first, f.last, f.kind) for f in reopened.faults()] == [
        (lost_seqs[0], lost_seqs[-1], FaultKind.missing)
    ]
    _assert_all_but(reopened, set(lost_seqs))


def test_deleted_first_block_is_a_missing_head(tmp_path):
    root = str(tmp_path / "s")
    store, config, where, _ = _write(root)
    first_seqs = sorted(s for s, (n, _, _) in where.items() if n == 1)
    _close_without_index(store, root)
    os.remove(os.path.join(root, block_name(1)))
    reopened = FileStore.open(OsDisk(root), config)
    assert [(f.first, f.last, f.kind) for f in reopened.faults()] == [
        (1, first_seqs[-1], FaultKind.missing)
    ]
    _assert_all_but(reopened, set(first_seqs))


def test_purged_head_is_not_reported_missing(tmp_path):
    root = str(tmp_path / "s")
    store, config, _, _ = _write(root)
    store.purge(seq=1500)
    state = store.state()
    _close_without_index(store, root)
    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.faults() == []
    assert reopened.state() == state
    assert not os.path.exists(os.path.join(root, block_name(1)))


@pytest.mark.parametrize("damage", ["zeroed", "truncated", "garbage"])
def test_damaged_index_is_ignored_and_rebuilt(tmp_path, damage):
    root = str(tmp_path / "s")
    store, config, _, _ = _write(root)
    store.delete(17)
    state = store.state()
    store.close()
    path = os.path.join(root, "index")
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        if damage == "zeroed":
            handle.write(bytes(size))
        elif damage == "truncated":
            handle.truncate(size // 2)
        else:
            handle.seek(size // 2)
            handle.write(b"\xff" * 64)
    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.state() == state
    assert reopened.recovery_report.get("index") != "used"
    assert reopened.faults() == []


def test_stale_index_is_checked_against_block_tails(tmp_path):
    """An index written before more appends is used, and the newer records are scanned on top."""
    root = str(tmp_path / "s")
    store, config, _, _ = _write(root)
    store.close()
    store = FileStore.open(OsDisk(root), config)
    store.append_batch([(COUNT + i, "orders.new", b"", b"after-index", 5_000 + i) for i in range(1, 6)])
    store.delete(5)
    store.sync()
    state = store.state()
    store.files.abandon()  # crash: the index on disk predates the appends
    reopened = FileStore.open(OsDisk(root), config)
    assert reopened.recovery_report.get("index") == "used"
    assert reopened.state() == state


def test_bit_flip_found_by_scan_of_a_running_store(tmp_path):
    root = str(tmp_path / "s")
    store, _, where, _ = _write(root)
    number, offset, length = where[900]
    _flip(root, number, offset + length - 5)
    store.files.drop_cache()
    assert [(f.first, f.last) for f in store.scan()] == [(900, 900)]
    with pytest.raises(DamagedSequence):
        store.load(900)


def test_repair_fills_a_damaged_sequence_durably(tmp_path):
    root = str(tmp_path / "s")
    store, config, where, _ = _write(root)
    number, offset, length = where[700]
    _close_without_index(store, root)
    _flip(root, number, offset + length - 3)
    damaged = FileStore.open(OsDisk(root), config)
    damaged.repair(700, "orders.0", b"", _payload(700), 1_700)
    assert damaged.faults() == []
    damaged.close()
    for remove_index in (False, True):
        if remove_index:
            os.remove(os.path.join(root, "index"))
        again = FileStore.open(OsDisk(root), config)
        assert again.faults() == []
        _assert_all_but(again, set())
        again.close()


def test_repairing_a_lost_head_restores_first_seq(tmp_path):
    """Regression: a repair below the cached first-live sequence must move first_seq back down."""
    root = str(tmp_path / "s")
    store, config, where, state = _write(root)
    first_seqs = sorted(s for s, (n, _, _) in where.items() if n == 1)
    _close_without_index(store, root)
    os.remove(os.path.join(root, block_name(1)))
    damaged = FileStore.open(OsDisk(root), config)
    assert damaged.state().first_seq == first_seqs[-1] + 1
    for seq in first_seqs:
        damaged.repair(seq, f"orders.{seq % 5}", b"", _payload(seq), 1_000 + seq)
    assert damaged.faults() == []
    assert damaged.state() == state
    _assert_all_but(damaged, set())


def test_limit_enforcement_fails_loudly_on_a_subject_count_with_no_live_message(tmp_path):
    """Broken accounting (a subject counted above its live messages) is an invariant violation, never an
    endless loop trying to remove a first message that is not there."""
    from jsraft.disk import OsDisk
    from jsraft.errors import InvariantViolation
    from jsraft.store.base import StoreConfig
    from jsraft.store.filestore import FileStore

    store = FileStore.open(OsDisk(str(tmp_path / "s")), StoreConfig(name="S", max_msgs_per_subject=2))
    for seq in range(1, 3):
        store.append(seq, "a", b"", b"x", 1000 + seq)
    store.psim["a"][0] += 5  # what the double-count bug used to leave behind
    with pytest.raises(InvariantViolation, match="first live one is missing"):
        store.append(3, "a", b"", b"x", 1003)
