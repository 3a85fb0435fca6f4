"""Tests for `jsraft.testing.simdisk.SimDisk`: the durability model and the injected faults.

Method: each test writes through the `Disk` protocol exactly as `wal` and `store` do, calls `crash()` (or a
corruption fault), and checks what reads back against the contract in `jsraft.disk.base`: content is
durable after `DiskFile.sync()`, names after `Disk.sync_dir()` of the parent, `write_atomic` is all or
nothing. Faults are checked to change only what they claim to, to be refused (and logged) when
`corruption_allowed` is false, and every run is checked to be a pure function of the seed.
"""

from __future__ import annotations

import random

import pytest

from jsraft.testing.simdisk import CHUNK_BYTES, SimDisk, SimDiskCrashed


def make(seed: int = 1, **kwargs: object) -> SimDisk:
    return SimDisk(random.Random(seed), **kwargs)  # type: ignore[arg-type]


def write_synced(disk: SimDisk, path: str, data: bytes) -> None:
    handle = disk.open(path, create=True)
    handle.pwrite(0, data)
    handle.sync()
    handle.close()
    disk.sync_dir(path.rpartition("/")[0])


# --- Durability model ------------------------------------------------------------------------------


def test_synced_content_and_name_survive_a_crash() -> None:
    disk = make()
    disk.makedirs("a/b")
    write_synced(disk, "a/b/f", b"hello")
    disk.crash()
    assert disk.read_file("a/b/f") == b"hello"


def test_unsynced_content_is_lost_but_synced_prefix_kept() -> None:
    disk = make()
    write_synced(disk, "f", b"durable")
    handle = disk.open("f")
    handle.append(b"-volatile")
    assert disk.read_file("f") == b"durable-volatile"
    disk.crash()
    assert disk.read_file("f") == b"durable"


def test_new_name_without_sync_dir_is_lost_even_if_content_synced() -> None:
    disk = make()
    handle = disk.open("f", create=True)
    handle.append(b"x")
    handle.sync()
    disk.crash()
    assert not disk.exists("f")


def test_name_synced_but_content_not_gives_an_empty_file() -> None:
    disk = make()
    handle = disk.open("f", create=True)
    handle.append(b"data")
    disk.sync_dir("")
    disk.crash()
    assert disk.read_file("f") == b""


def test_unsynced_remove_and_rename_are_undone() -> None:
    disk = make()
    write_synced(disk, "a", b"1")
    write_synced(disk, "b", b"2")
    disk.remove("a")
    disk.rename("b", "c")
    assert disk.listdir("") == ["c"]
    disk.crash()
    assert disk.listdir("") == ["a", "b"]
    disk.rename("b", "c")
    disk.sync_dir("")
    disk.crash()
    assert disk.listdir("") == ["a", "c"]


def test_write_atomic_is_durable_at_once() -> None:
    disk = make()
    disk.makedirs("d")
    disk.write_atomic("d/x", b"v1")
    disk.write_atomic("d/x", b"v2")
    disk.crash()
    assert disk.read_file("d/x") == b"v2"


def test_unsynced_truncate_is_undone_and_synced_one_kept() -> None:
    disk = make()
    write_synced(disk, "f", b"0123456789")
    handle = disk.open("f")
    handle.truncate(4)
    disk.crash()
    assert disk.read_file("f") == b"0123456789"
    handle = disk.open("f")
    handle.truncate(4)
    handle.sync()
    disk.crash()
    assert disk.read_file("f") == b"0123"


def test_torn_crash_keeps_a_prefix_of_the_unsynced_tail() -> None:
    outcomes = set()
    for seed in range(30):
        disk = make(seed)
        write_synced(disk, "f", b"base")
        disk.open("f").append(b"abcdefgh")
        disk.crash(torn=True)
        data = disk.read_file("f")
        assert (b"base" + b"abcdefgh").startswith(data) and data.startswith(b"base")
        outcomes.add(len(data))
    assert len(outcomes) > 3  # the cut point really varies with the seed


def test_handles_die_with_the_crash() -> None:
    disk = make()
    handle = disk.open("f", create=True)
    disk.crash()
    with pytest.raises(SimDiskCrashed):
        handle.append(b"x")


def test_open_follows_the_inode_across_rename() -> None:
    disk = make()
    handle = disk.open("a", create=True)
    disk.rename("a", "b")
    handle.append(b"x")
    assert disk.read_file("b") == b"x"


def test_sub_views_share_state_and_paths() -> None:
    disk = make()
    meta = disk.sub("meta")
    meta.makedirs("wal")
    write_synced(meta, "wal/f", b"z")
    assert disk.read_file("meta/wal/f") == b"z"
    assert disk.is_dir("meta/wal") and meta.listdir("") == ["wal"]
    with pytest.raises(ValueError):
        meta.read_file("../escape")


def test_errors_match_the_os_disk() -> None:
    disk = make()
    with pytest.raises(FileNotFoundError):
        disk.open("missing")
    with pytest.raises(FileNotFoundError):
        disk.open("nodir/f", create=True)
    with pytest.raises(FileNotFoundError):
        disk.read_file("missing")
    disk.makedirs("d")
    with pytest.raises(IsADirectoryError):
        disk.open("d")


def test_remove_tree_and_makedirs_durability() -> None:
    disk = make()
    disk.makedirs("x/y")
    write_synced(disk, "x/y/f", b"1")
    disk.remove_tree("x")
    assert not disk.exists("x")
    disk.crash()
    assert disk.read_file("x/y/f") == b"1"  # the parent was never synced after the removal
    disk.remove_tree("x")
    disk.sync_dir("")
    disk.crash()
    assert not disk.exists("x")


# --- Corruption faults -----------------------------------------------------------------------------


def test_flip_bit_changes_exactly_one_bit_durably() -> None:
    disk = make()
    write_synced(disk, "f", bytes(64))
    assert disk.flip_bit("f", 10)
    disk.crash()
    data = disk.read_file("f")
    assert [i for i, b in enumerate(data) if b] == [10] and bin(data[10]).count("1") == 1


def test_truncate_tail_and_lose_file() -> None:
    disk = make()
    write_synced(disk, "f", b"0123456789")
    write_synced(disk, "g", b"g")
    assert disk.truncate_tail("f", 3)
    assert disk.lose_file("g")
    disk.crash()
    assert disk.read_file("f") == b"0123456" and not disk.exists("g")


def test_rollback_chunk_restores_an_earlier_synced_version() -> None:
    disk = make()
    handle = disk.open("f", create=True)
    disk.sync_dir("")
    handle.pwrite(0, b"A" * (2 * CHUNK_BYTES))
    handle.sync()
    handle.pwrite(0, b"B" * (2 * CHUNK_BYTES))
    handle.sync()
    assert disk.rollback_chunk("f", CHUNK_BYTES + 5)
    data = disk.read_file("f")
    assert data[:CHUNK_BYTES] == b"B" * CHUNK_BYTES and data[CHUNK_BYTES:] == b"A" * CHUNK_BYTES
    disk.crash()
    assert disk.read_file("f")[CHUNK_BYTES:] == b"A" * CHUNK_BYTES


def test_rollback_without_history_is_a_no_op() -> None:
    disk = make()
    write_synced(disk, "f", b"once")
    assert not disk.rollback_chunk("f", 0)


def test_chunk_history_is_bounded() -> None:
    disk = make(history_versions_max=2)
    handle = disk.open("f", create=True)
    for version in range(10):
        handle.pwrite(0, bytes([version]) * 8)
        handle.sync()
    seen = set()
    for _ in range(20):
        disk.rollback_chunk("f", 0)
        seen.add(disk.read_file("f")[0])
    assert seen <= {7, 8}


def test_corruption_refused_when_not_allowed_and_logged() -> None:
    disk = make(corruption_allowed=False, read_flip_probability=1.0)
    write_synced(disk, "f", b"data")
    assert not disk.flip_bit("f")
    assert not disk.truncate_tail("f", 1)
    assert not disk.lose_file("f")
    assert disk.read_file("f") == b"data"
    assert sum("suppressed" in event for event in disk.events) == 3


def test_read_flips_corrupt_only_what_is_returned() -> None:
    disk = make(read_flip_probability=1.0)
    write_synced(disk, "f", bytes(16))
    assert disk.read_file("f") != bytes(16)
    disk.corruption_allowed = False
    assert disk.read_file("f") == bytes(16)
    assert any("read-flip" in event for event in disk.events)


def test_every_fault_is_logged() -> None:
    disk = make()
    write_synced(disk, "f", bytes(16))
    disk.flip_bit("f")
    disk.truncate_tail("f", 1)
    disk.crash(torn=True)
    kinds = [event.split()[1] for event in disk.events]
    assert kinds == ["flip_bit", "truncate_tail", "crash"]


def test_runs_are_reproducible_from_the_seed() -> None:
    def run(seed: int) -> tuple[bytes, list[str]]:
        disk = make(seed)
        write_synced(disk, "f", bytes(100))
        disk.open("f").append(bytes(range(200)))
        disk.flip_bit("f")
        disk.crash(torn=True)
        return disk.read_file("f"), disk.events

    assert run(7) == run(7)
    assert any(run(7) != run(seed) for seed in range(8, 12))
