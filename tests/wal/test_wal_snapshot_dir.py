"""`snapshots/` comes with a WAL's first snapshot, not with the WAL (`wal.snapshots` invariant 5).

Method: on `OsDisk` and `SimDisk` (the `disk` fixture). A new WAL, opened and synced, has no `snapshots/`
directory; its first `save_snapshot` makes it, durably: on `SimDisk` a crash right after the save keeps
the snapshot, and the WAL reopens from it clean. A WAL of an older build, with an empty `snapshots/`
made at its open, recovers exactly as one without it. A lost `snapshots/` that held the only snapshot
of a compacted log still puts the replica in repairing, as it did when the open made the directory again.
"""

from __future__ import annotations

from wal_helpers import build, make_entries, reopen

from jsraft.disk import Disk
from jsraft.raft.types import ConfState, SnapshotMeta
from jsraft.testing.simdisk import SimDisk
from jsraft.wal.format import SNAPSHOT_DIR

CONF = ConfState(voters=("n1",))


def test_a_new_wal_has_no_snapshot_directory_until_its_first_snapshot(disk: Disk) -> None:
    build(disk, make_entries(1, 20), watermark=19)
    wal, recovered = reopen(disk)
    assert not disk.is_dir(SNAPSHOT_DIR) and not recovered.reasons
    wal.save_snapshot(SnapshotMeta(index=10, term=1, conf=CONF), b"state at 10")
    assert disk.listdir(SNAPSHOT_DIR)
    if isinstance(disk, SimDisk):
        disk.crash()  # the directory's name and the file in it were durable when the save returned
    else:
        wal.close()
    wal, recovered = reopen(disk)
    assert recovered.snapshot is not None and recovered.snapshot[1] == b"state at 10"
    assert not recovered.repairing and not recovered.reasons, recovered.reasons
    assert recovered.entries == make_entries(11, 20)
    wal.close()


def test_an_older_wal_with_an_empty_snapshot_directory_recovers_the_same(disk: Disk) -> None:
    build(disk, make_entries(1, 20), watermark=19)
    disk.makedirs(SNAPSHOT_DIR)  # what an older build's open made
    wal, recovered = reopen(disk)
    assert recovered.entries == make_entries(1, 20) and not recovered.repairing and not recovered.reasons
    wal.save_snapshot(SnapshotMeta(index=10, term=1, conf=CONF), b"x")
    wal.close()
    _, recovered = reopen(disk)
    assert recovered.snapshot is not None and not recovered.reasons


def test_a_lost_snapshot_directory_of_a_compacted_log_is_still_found(disk: Disk) -> None:
    build(disk, make_entries(1, 60), watermark=59)
    wal, _ = reopen(disk)
    wal.save_snapshot(SnapshotMeta(index=40, term=1, conf=CONF), b"state at 40")
    wal.compact(40)
    wal.close()
    disk.remove_tree(SNAPSHOT_DIR)
    if not isinstance(disk, SimDisk):
        disk.sync_dir("")
    wal, recovered = reopen(disk)
    assert recovered.repairing and recovered.reasons
    wal.close()
