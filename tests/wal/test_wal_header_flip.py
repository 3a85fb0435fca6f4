"""A WAL file header's version byte read with one bit flipped: damage or a transient misread, never a crash.

Method: a real log is built (`wal_helpers.build`, on `OsDisk` and `SimDisk`); reads then go through a disk
that flips one bit of the version byte (offset 4 of the file header) the first time a named file is read —
a transient read flip, as the simulator's `read_flip` fault does (stream seed 10562 raised
`BadFileFormat: file format version 130 is newer than this build (2)` out of a restarting node). Checked on
`wal.format` directly and through `Wal.open` for a segment, the hard-state file and a snapshot: a version
read newer than the build (6 or 132 for segment format 4, since issue #14's log end; 7 or 131 for 3, 130
for 2 before) is read again before it is believed (the second reading is right: the WAL opens clean with
every entry); an implausible version (132 for 4) is damage, not "newer",
even when it is really on disk (the log opens repairing, its entries intact); a plausibly newer version
read twice is still refused (`BadFileFormat`), as before.
"""

from __future__ import annotations

import pytest
from wal_helpers import build, make_entries, reopen, segments

from jsraft.disk import Disk
from jsraft.errors import BadFileFormat
from jsraft.raft.types import ConfState, SnapshotMeta
from jsraft.wal import Wal
from jsraft.wal.format import (
    HARD_STATE_FILE, SEGMENT_FILE_TYPE, SNAPSHOT_DIR, WAL_DIR, file_header, file_header_version, read_checked,
)

LOG = make_entries(1, 30)
VERSION_OFFSET = 4  # FILE_HEADER: magic (4 bytes), version, type


class FlipOnceDisk:
    """`disk`, except that the first `read_file` of each path in `paths` has the version byte's `bit` flipped."""

    def __init__(self, disk: Disk, paths: set[str], bit: int) -> None:
        self._disk, self._pending, self._bit = disk, set(paths), bit
        self.flipped: list[str] = []

    def read_file(self, path: str) -> bytes:
        data = self._disk.read_file(path)
        if path not in self._pending:
            return data
        self._pending.discard(path)
        self.flipped.append(path)
        damaged = bytearray(data)
        damaged[VERSION_OFFSET] ^= 1 << self._bit
        return bytes(damaged)

    def __getattr__(self, name: str) -> object:
        return getattr(self._disk, name)


def test_the_header_rule() -> None:
    header = bytearray(file_header(SEGMENT_FILE_TYPE))
    assert file_header_version(bytes(header), SEGMENT_FILE_TYPE) == 4
    header[VERSION_OFFSET] = 132  # bit 7 of 4: no build wrote it
    assert file_header_version(bytes(header), SEGMENT_FILE_TYPE) == 0
    header[VERSION_OFFSET] = 6  # bit 1 of 4: a format a newer build could have written
    with pytest.raises(BadFileFormat):
        file_header_version(bytes(header), SEGMENT_FILE_TYPE)
    good = file_header(SEGMENT_FILE_TYPE)
    reads = iter([bytes(header), good])
    assert read_checked(lambda _: next(reads), "f", SEGMENT_FILE_TYPE) == good  # read again, believed then
    header[VERSION_OFFSET] = 132
    reads = iter([bytes(header), good])
    assert read_checked(lambda _: next(reads), "f", SEGMENT_FILE_TYPE) == good  # an implausible one too
    reads = iter([good, bytes(header)])
    assert read_checked(lambda _: next(reads), "f", SEGMENT_FILE_TYPE) == good  # a good header is read once


@pytest.mark.parametrize("bit", [1, 7])  # version 6 (plausibly newer) and 132 (implausible) for 4
def test_a_transient_flip_of_a_segment_version_reads_right_the_second_time(disk: Disk, bit: int) -> None:
    build(disk, LOG, watermark=29)
    names = {f"{WAL_DIR}/{name}" for name in segments(disk)}
    flipping = FlipOnceDisk(disk, names, bit)
    wal, recovered = Wal.open(flipping, segment_bytes=256)  # type: ignore[arg-type]
    assert len(flipping.flipped) == len(names) > 1
    assert recovered.entries == LOG and not recovered.repairing and recovered.faulty == frozenset()
    wal.close()


def test_a_transient_flip_of_the_hard_state_and_snapshot_versions_reads_right(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    wal, _ = reopen(disk)
    wal.save_snapshot(SnapshotMeta(index=10, term=1, conf=ConfState(voters=("n1",))), b"state at 10")
    wal.sync()
    wal.close()
    paths = {HARD_STATE_FILE} | {f"{SNAPSHOT_DIR}/{name}" for name in disk.listdir(SNAPSHOT_DIR)}
    flipping = FlipOnceDisk(disk, paths, 2)  # versions 7 for 3, 5 for 1: plausibly newer, read again
    wal, recovered = Wal.open(flipping, segment_bytes=256)  # type: ignore[arg-type]
    assert set(flipping.flipped) == paths and len(paths) == 2
    assert recovered.snapshot is not None and recovered.snapshot[1] == b"state at 10"
    assert not recovered.repairing and recovered.hard_state.acked_watermark == 29
    wal.close()


def test_an_implausible_version_on_disk_is_damage_not_a_newer_format(disk: Disk) -> None:
    build(disk, LOG, watermark=29)
    handle = disk.open(f"{WAL_DIR}/{segments(disk)[1]}")
    handle.pwrite(VERSION_OFFSET, bytes([130]))
    handle.close()
    _, recovered = reopen(disk)
    assert recovered.repairing and recovered.entries == LOG


def test_a_newer_version_read_twice_is_still_refused(disk: Disk) -> None:
    build(disk, LOG)
    handle = disk.open(f"{WAL_DIR}/{segments(disk)[0]}")
    handle.pwrite(VERSION_OFFSET, b"\x05")
    handle.close()
    with pytest.raises(BadFileFormat):
        reopen(disk)
