"""Quarantine of unassigned local stream directories: renamed aside and reported, never deleted.

Method: a data directory with assigned and unassigned `streams/<name>/` trees (and a stray file) is
swept on `OsDisk` and on `SimDisk` (fixture `disk`). Every file that existed before must exist after,
byte for byte, at its old or new path; a sweep with incomplete meta state must change nothing at all;
`restore_quarantined` must be the exact inverse. Durability of the rename is checked with the shadow
disk's power cut (drop mode: only fsynced data and synced directory entries survive).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from meta_helpers import create, new_cluster

from jsraft.disk import Disk, OsDisk, power_cut
from jsraft.meta import (
    MetaProgress,
    QuarantineConflict,
    list_quarantined,
    quarantine_unknown_streams,
    restore_quarantined,
)
from jsraft.testing.simdisk import SimDisk

COMPLETE = MetaProgress(applied_index=42, leader_commit_index=42)
FILES = {
    "streams/ORDERS/msgs/00000001.blk": b"orders block",
    "streams/ORDERS/config.json": b'{"name":"ORDERS"}',
    "streams/LOST/msgs/00000001.blk": b"acknowledged data nobody assigned",
    "streams/LOST/raft/hardstate": b"hs",
    "streams/EMPTY-DIR/.keep": b"",
    "streams/stray.tmp": b"not a directory",
}


@pytest.fixture(params=["os", "sim"])
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Disk:
    root: Disk = OsDisk(str(tmp_path / "data")) if request.param == "os" else SimDisk(random.Random(3))
    _populate(root)
    return root


def _populate(disk: Disk) -> None:
    for path, data in FILES.items():
        disk.makedirs(path.rsplit("/", 1)[0])
        disk.write_atomic(path, data)


def _tree(disk: Disk, top: str = "") -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for entry in disk.listdir(top) if (not top or disk.is_dir(top)) else []:
        path = f"{top}/{entry}" if top else entry
        if disk.is_dir(path):
            found.update(_tree(disk, path))
        else:
            found[path] = disk.read_file(path)
    return found


def test_unknown_directories_are_renamed_aside_and_reported(disk):
    before = _tree(disk)
    report = quarantine_unknown_streams(disk, {"ORDERS"}, COMPLETE)
    assert report.performed and report.reason is None
    assert report.unknown == ("EMPTY-DIR", "LOST") and report.kept == ("ORDERS",)
    assert report.ignored == ("stray.tmp",)
    assert [(q.name, q.source, q.destination) for q in report.quarantined] == [
        ("EMPTY-DIR", "streams/EMPTY-DIR", "quarantine/EMPTY-DIR-42"),
        ("LOST", "streams/LOST", "quarantine/LOST-42"),
    ]
    after = _tree(disk)
    moved = {path.replace("streams/LOST/", "quarantine/LOST-42/").replace(
        "streams/EMPTY-DIR/", "quarantine/EMPTY-DIR-42/"): data for path, data in before.items()}
    assert after == moved  # nothing deleted, nothing changed: only two directories renamed
    assert list_quarantined(disk) == ["EMPTY-DIR-42", "LOST-42"]


@pytest.mark.parametrize("progress", [
    MetaProgress(applied_index=42, leader_commit_index=42, repairing=True),
    MetaProgress(applied_index=42, leader_commit_index=None),
    MetaProgress(applied_index=41, leader_commit_index=42),
])
def test_incomplete_meta_state_touches_nothing(disk, progress):
    before = _tree(disk)
    # The Jepsen case: a partial meta state assigns nothing, so every stream looks unknown.
    report = quarantine_unknown_streams(disk, set(), progress)
    assert not report.performed and report.reason and report.quarantined == ()
    assert report.unknown == ("EMPTY-DIR", "LOST", "ORDERS")
    assert _tree(disk) == before and not disk.exists("quarantine")


def test_restore_is_the_inverse(disk):
    before = _tree(disk)
    quarantine_unknown_streams(disk, {"ORDERS"}, COMPLETE)
    assert restore_quarantined(disk, "LOST-42") == "streams/LOST"
    assert restore_quarantined(disk, "EMPTY-DIR-42") == "streams/EMPTY-DIR"
    assert _tree(disk) == before and list_quarantined(disk) == []


def test_restore_never_overwrites(disk):
    quarantine_unknown_streams(disk, {"ORDERS"}, COMPLETE)
    disk.makedirs("streams/LOST")
    with pytest.raises(QuarantineConflict, match="exists") as error:
        restore_quarantined(disk, "LOST-42")
    assert error.value.err_code == 20303
    with pytest.raises(QuarantineConflict, match="no quarantined"):
        restore_quarantined(disk, "NOPE-1")
    assert restore_quarantined(disk, "LOST-42", name="LOST2") == "streams/LOST2"


def test_the_same_name_twice_gets_a_new_destination(disk):
    quarantine_unknown_streams(disk, {"ORDERS", "EMPTY-DIR"}, COMPLETE)
    disk.makedirs("streams/LOST")
    disk.write_atomic("streams/LOST/again", b"second")
    report = quarantine_unknown_streams(disk, {"ORDERS", "EMPTY-DIR"}, COMPLETE)
    assert [q.destination for q in report.quarantined] == ["quarantine/LOST-42.1"]
    assert disk.read_file("quarantine/LOST-42/raft/hardstate") == b"hs"
    assert disk.read_file("quarantine/LOST-42.1/again") == b"second"


def test_no_streams_directory_is_an_empty_sweep(tmp_path):
    report = quarantine_unknown_streams(OsDisk(str(tmp_path / "fresh")), {"A"}, COMPLETE)
    assert report.performed and report.unknown == report.quarantined == ()


def test_assigned_names_come_from_the_meta_state(disk):
    machine = new_cluster(("n1", "n2"))
    create(machine, "ORDERS", num_replicas=1)  # on n1
    create(machine, "LOST", num_replicas=1)  # on n2: this node (n1) should not hold its data
    report = quarantine_unknown_streams(disk, machine.names_for("n1"), COMPLETE)
    assert [q.name for q in report.quarantined] == ["EMPTY-DIR", "LOST"]


def test_quarantine_survives_a_power_cut(tmp_path):
    root = str(tmp_path / "data")
    disk = OsDisk(root, shadow=True)
    _populate(disk)
    quarantine_unknown_streams(disk, {"ORDERS"}, COMPLETE)
    power_cut(root, "drop", seed=1)
    after = _tree(OsDisk(root))
    assert after["quarantine/LOST-42/msgs/00000001.blk"] == FILES["streams/LOST/msgs/00000001.blk"]
    assert "streams/LOST/raft/hardstate" not in after and after["streams/ORDERS/config.json"]


def test_quarantine_survives_a_simdisk_crash():
    disk = SimDisk(random.Random(5))
    _populate(disk)
    quarantine_unknown_streams(disk, {"ORDERS"}, COMPLETE)
    disk.crash()
    assert disk.read_file("quarantine/LOST-42/raft/hardstate") == b"hs"
