"""A new WAL's files written ahead without an open (`wal.files.make_new_wal`, invariant 4), as a stream's
directory is formatted (`stream_format` invariant 8).

Method: on a real `OsDisk` (its unsynced view, as the format builds) and on `SimDisk`: one directory gets
`Wal.open` then `make_first_segment` then `close`, another `make_new_wal`; every file and directory of the
two is compared byte for byte. The WAL then opened over `make_new_wal`'s files recovers clean (no entry,
the zero hard state, no finding, not repairing) and its first append goes into the segment made ahead (no
new file). Neither has a `snapshots/` directory (`wal.snapshots` invariant 5). Writing a new WAL where one is (a hard-state file, a `wal/` or `snapshots/` directory) is refused.
"""

from __future__ import annotations

import os
import random

import pytest
from wal_helpers import make_entries

from jsraft.disk import OsDisk
from jsraft.errors import InvariantViolation
from jsraft.raft.types import HardState
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Wal
from jsraft.wal.files import make_new_wal
from jsraft.wal.format import HARD_STATE_FILE, SNAPSHOT_DIR, WAL_DIR, segment_name


def _opened_the_old_way(disk) -> None:
    wal, _ = Wal.open(disk)
    wal.make_first_segment()
    wal.close()


def _tree(root: str) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(directory, name), root)] = None
        for name in files:
            with open(os.path.join(directory, name), "rb") as file:
                found[os.path.relpath(os.path.join(directory, name), root)] = file.read()
    return found


def test_the_files_are_those_an_open_and_a_first_segment_leave(tmp_path) -> None:
    disk = OsDisk(str(tmp_path)).unsynced()
    _opened_the_old_way(disk.sub("old"))
    make_new_wal(disk.sub("new"))
    old, new = _tree(str(tmp_path / "old")), _tree(str(tmp_path / "new"))
    assert set(old) == {HARD_STATE_FILE, WAL_DIR, f"{WAL_DIR}/{segment_name(1)}"}  # no `snapshots/` yet
    assert new == old


@pytest.mark.parametrize("seed", range(3))
def test_on_simdisk_too_and_the_wal_recovers_clean_and_appends_in_the_made_segment(seed: int) -> None:
    root = SimDisk(random.Random(seed), corruption_allowed=False)
    old, new = root.sub("old"), root.sub("new")
    _opened_the_old_way(old)
    make_new_wal(new)
    for name in (HARD_STATE_FILE, f"{WAL_DIR}/{segment_name(1)}"):
        assert new.read_file(name) == old.read_file(name)
    assert new.listdir(WAL_DIR) == old.listdir(WAL_DIR) and not new.is_dir(SNAPSHOT_DIR) and not old.is_dir(SNAPSHOT_DIR)
    wal, recovered = Wal.open(new)
    assert recovered.entries == [] and recovered.reasons == [] and not recovered.repairing
    assert recovered.hard_state == HardState()
    wal.append(make_entries(1, 3, term=1))
    wal.sync()
    assert new.listdir(WAL_DIR) == [segment_name(1)]
    wal.close()


@pytest.mark.parametrize("existing", [HARD_STATE_FILE, WAL_DIR, SNAPSHOT_DIR])
def test_a_new_wal_is_written_only_where_none_is(tmp_path, existing: str) -> None:
    disk = OsDisk(str(tmp_path)).sub("g")
    if existing == HARD_STATE_FILE:
        disk.write_atomic(HARD_STATE_FILE, b"x")
    else:
        disk.makedirs(existing)
    with pytest.raises(InvariantViolation):
        make_new_wal(disk)
