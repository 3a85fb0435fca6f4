"""A compact (purge to a sequence) far past the end costs one block, not a slot per skipped sequence.

Method: real files. Purge a small store to a sequence 10**12 ahead and check the store's blocks hold no
slot for the jump (a purge API call used to allocate 12 bytes per skipped sequence, 12 TB here), that
appends continue at the new sequence, and that a clean reopen, a reopen without the index, and reopens
of the two states a crash can leave mid-jump (the new block's marker durable with the old block files
still there; the new block's records lost) each give the state the history allows.
"""

from __future__ import annotations

import os
import shutil

import pytest

from jsraft.disk import OsDisk
from jsraft.store import StoreConfig, fs_index
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore

FAR = 10**12
CONFIG = StoreConfig(name="S", block_size=65536)


def _store(root: str, count: int = 60) -> FileStore:
    store = FileStore.open(OsDisk(root), CONFIG)
    store.append_batch([(seq, f"s.{seq % 3}", b"", b"x" * 2000, 1_000 + seq) for seq in range(1, count + 1)])
    assert len(store.blocks) > 1  # the jump must deal with more than one old block
    return store


def _slots(store: FileStore) -> int:
    return sum(len(block.offsets) for block in store.blocks)


def _assert_jumped(store: FileStore, appended: int = 0) -> None:
    state = store.state()
    assert (state.first_seq, state.last_seq, state.msgs) == (FAR, FAR - 1 + appended, appended)
    assert _slots(store) == appended
    assert store.faults() == []
    for seq in range(FAR, FAR + appended):
        assert store.load(seq).payload == b"after"


@pytest.mark.parametrize("how", ["purge", "compact"])
def test_a_far_compact_holds_no_slot_for_the_jump_and_survives_reopen(tmp_path, how):
    root = str(tmp_path / "s")
    store = _store(root)
    removed = store.purge(seq=FAR) if how == "purge" else store.compact(FAR)
    assert removed == 60
    _assert_jumped(store)
    assert [b.number for b in store.blocks] == [max(int(n[:8]) for n in os.listdir(root) if n.endswith(".blk"))]
    store.append_batch([(FAR + i, "s.new", b"", b"after", 9_000 + i) for i in range(3)])
    _assert_jumped(store, 3)
    store.close()
    for remove_index in (False, True):
        if remove_index:
            os.remove(os.path.join(root, "index"))
        again = FileStore.open(OsDisk(root), CONFIG)
        _assert_jumped(again, 3)
        again.close()


def test_a_crash_mid_jump_recovers_either_side_of_it(tmp_path):
    """Copies of the directory taken at the two points a crash can stop `jump` at, opened cold."""
    root, before, after_marker = (str(tmp_path / name) for name in ("s", "before", "marker"))
    store = _store(root)
    store.sync()
    fs_index.write_index(store)  # an index of the old blocks, which a crash mid-jump leaves valid
    old_blocks = sorted(n for n in os.listdir(root) if n.endswith(".blk"))
    removed_files: dict[str, bytes] = {}
    original_remove = store.files.remove

    def keep_copy(block):  # what the old block files held just before the jump removed them
        path = os.path.join(root, block_name(block.number))
        with open(path, "rb") as handle:
            removed_files[block_name(block.number)] = handle.read()
        original_remove(block)

    store.files.remove = keep_copy
    store.compact(FAR)
    store.files.abandon()
    assert sorted(removed_files) == old_blocks
    new_blocks = [n for n in os.listdir(root) if n.endswith(".blk")]
    # 1. The new block's marker synced, the old files not yet removed.
    shutil.copytree(root, after_marker)
    for name, data in removed_files.items():
        with open(os.path.join(after_marker, name), "wb") as handle:
            handle.write(data)
    # 2. Nothing of the new block reached the disk but its preamble: the old state, emptied or not.
    shutil.copytree(after_marker, before)
    for name in new_blocks:
        with open(os.path.join(before, name), "r+b") as handle:
            data = handle.read()
            handle.truncate(_preamble_length(data))
    for use_index in (True, False):
        jumped = FileStore.open(OsDisk(after_marker), CONFIG, use_index=use_index)
        assert (jumped.recovery_report.get("index") == "used") == use_index
        _assert_jumped(jumped)
        assert [b.number for b in jumped.blocks] == [int(new_blocks[0][:8])]  # recovery finished the removal
        jumped.files.abandon()
        not_jumped = FileStore.open(OsDisk(before), CONFIG, use_index=use_index)
        state = not_jumped.state()
        assert state.last_seq == 60 and state.msgs == 0 and not_jumped.faults() == []
        assert _slots(not_jumped) <= 60
        not_jumped.files.abandon()
    not_jumped = FileStore.open(OsDisk(before), CONFIG)
    not_jumped.compact(FAR)  # what the replay of the purge entry does next
    _assert_jumped(not_jumped)


def _preamble_length(data: bytes) -> int:
    from jsraft.codec.records import FILE_HEADER_BYTES, scan_records

    first = scan_records(data, FILE_HEADER_BYTES).records[0]
    return first.offset + first.length  # the file header and the BLOCK_HEADER record
