"""A new store's files written ahead without an open (`store.blockfiles.make_new_store`, invariant 5), as
a stream's directory is formatted (`server.groups.stream_format` invariant 4).

Method: on a real `OsDisk` (its unsynced view, as the format builds, and a plain one) and on `SimDisk`:
one directory gets `FileStore.open` (what the format did before), another `make_new_store`; the block
file must be the same bytes, and `make_new_store` writes no index. The store opened over its files
recovers clean (empty state, no fault, nothing left unverified), appends into the block made ahead (no
new file) and reopens from a full scan with every message; on `SimDisk` a crash right after a plain
`make_new_store` keeps the block (its name and bytes were synced). A non-empty directory is refused.
"""

from __future__ import annotations

import random

import pytest

from jsraft.disk import OsDisk
from jsraft.errors import InvariantViolation
from jsraft.store import StoreConfig
from jsraft.store.blockfiles import make_new_store
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore
from jsraft.testing.simdisk import SimDisk

CONFIG = StoreConfig(block_size=65536)


def _fill_and_check(disk, last: int) -> None:
    store = FileStore.open(disk, CONFIG)
    state = store.state()
    assert (state.msgs, state.last_seq) == (0, 0)
    assert store.faults() == [] and not store.unverified
    for seq in range(1, last + 1):
        store.append(seq, "s.x", b"", b"m%d" % seq, 10 * seq)
    assert disk.listdir("") == [block_name(1)]  # the appends went into the block made ahead
    store.close()
    store = FileStore.open(disk, CONFIG, use_index=False)
    assert store.faults() == [] and store.state().msgs == last
    assert [store.load(seq).payload for seq in range(1, last + 1)] == [b"m%d" % seq for seq in range(1, last + 1)]
    store.close()


@pytest.mark.parametrize("view", ["unsynced", "plain"])
def test_the_block_is_the_one_an_open_makes_and_no_index_is_written(tmp_path, view: str) -> None:
    disk = OsDisk(str(tmp_path)) if view == "plain" else OsDisk(str(tmp_path)).unsynced()
    old, new = disk.sub("old"), disk.sub("new")
    FileStore.open(old, CONFIG).close()
    make_new_store(new)
    assert new.listdir("") == [block_name(1)] and "index" in old.listdir("")
    assert new.read_file(block_name(1)) == old.read_file(block_name(1))
    _fill_and_check(new, 5)


@pytest.mark.parametrize("seed", range(3))
def test_on_simdisk_the_made_block_survives_a_crash_and_takes_the_appends(seed: int) -> None:
    root = SimDisk(random.Random(seed), corruption_allowed=False)
    make_new_store(root.sub("msgs"))
    root.crash()
    assert root.listdir("msgs") == [block_name(1)]
    _fill_and_check(root.sub("msgs"), 4)


def test_a_new_store_is_written_only_into_an_empty_directory(tmp_path) -> None:
    disk = OsDisk(str(tmp_path)).sub("msgs")
    disk.write_atomic("index", b"x")
    with pytest.raises(InvariantViolation):
        make_new_store(disk)
