"""SimDisk directory identity: a directory's durable entries move with it, as on a real file system.

Method: build a directory with synced files, rename it with and without syncing the parent, crash,
and check which name holds the files — the same outcomes OsDisk's shadow mode gives (tests/unit/test_disk.py).
"""

from __future__ import annotations

import random

from jsraft.testing.simdisk import SimDisk


def _disk_with_stream_dir() -> SimDisk:
    disk = SimDisk(random.Random(1))
    disk.makedirs("streams/ORDERS")
    handle = disk.open("streams/ORDERS/data", create=True)
    handle.append(b"payload")
    handle.sync()
    disk.sync_dir("streams/ORDERS")
    return disk


def test_synced_rename_keeps_the_contents_under_the_new_name():
    disk = _disk_with_stream_dir()
    disk.makedirs("quarantine")
    disk.rename("streams/ORDERS", "quarantine/ORDERS-1")
    disk.sync_dir("streams")
    disk.sync_dir("quarantine")
    disk.crash()
    assert disk.read_file("quarantine/ORDERS-1/data") == b"payload"
    assert not disk.exists("streams/ORDERS")


def test_unsynced_rename_leaves_the_contents_under_the_old_name():
    disk = _disk_with_stream_dir()
    disk.makedirs("quarantine")
    disk.rename("streams/ORDERS", "quarantine/ORDERS-1")
    disk.crash()
    assert disk.read_file("streams/ORDERS/data") == b"payload"
    assert not disk.exists("quarantine/ORDERS-1")


def test_entries_synced_after_an_unsynced_rename_belong_to_the_directory():
    """The directory is one object: a file made durable in it under its new name is there under the old."""
    disk = _disk_with_stream_dir()
    disk.rename("streams/ORDERS", "streams/ORDERS2")
    handle = disk.open("streams/ORDERS2/more", create=True)
    handle.append(b"more")
    handle.sync()
    disk.sync_dir("streams/ORDERS2")
    disk.crash()  # the rename itself was never made durable
    assert disk.read_file("streams/ORDERS/more") == b"more"
    assert disk.read_file("streams/ORDERS/data") == b"payload"


def test_recreated_path_starts_empty():
    disk = _disk_with_stream_dir()
    disk.remove_tree("streams/ORDERS")
    disk.sync_dir("streams")
    disk.makedirs("streams/ORDERS")
    disk.crash()
    assert disk.is_dir("streams/ORDERS") and disk.listdir("streams/ORDERS") == []


def test_sync_tree_makes_every_file_and_name_below_it_durable():
    """`sync_tree` (Disk contract 4): what the unsynced view wrote survives a crash only once it ran."""
    for synced in (True, False):
        disk = SimDisk(random.Random(2))
        disk.makedirs("streams")
        tree = disk.unsynced().sub("streams/.format-ORDERS")
        tree.sub("raft").open("wal.log", create=True).append(b"entries")
        tree.open("group", create=True).append(b"S-ORDERS-7")
        if synced:
            disk.sync_tree("streams/.format-ORDERS")
            disk.sync_dir("streams")
        disk.crash()
        if synced:
            assert disk.read_file("streams/.format-ORDERS/raft/wal.log") == b"entries"
            assert disk.read_file("streams/.format-ORDERS/group") == b"S-ORDERS-7"
        else:
            assert not disk.exists("streams/.format-ORDERS/group") or disk.read_file(
                "streams/.format-ORDERS/group") != b"S-ORDERS-7"
