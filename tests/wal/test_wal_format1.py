"""A WAL written by the format 1 writer (hard state in the slot file only) opens and carries on.

Method: `fixtures/format1_store` was written by the code before issue #18 (`fixtures/make_format1_store.py`,
run against that checkout). A copy is opened by this build: every entry and the hard state must read
back; the next cycle must go to a new segment of the current format (format 1 files never receive the new records) and
survive a reopen; and a crash after it must still find everything.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from jsraft.disk import OsDisk
from jsraft.raft.types import Entry, HardState
from jsraft.wal import Wal
from jsraft.wal.format import SEGMENT_FILE_TYPE, SEGMENT_FORMAT_VERSION, WAL_DIR, file_header_version

FIXTURE = Path(__file__).parent / "fixtures" / "format1_store"
OLD_ENTRIES = [Entry(index=i, term=1 if i < 8 else 2, data=b"old-%d" % i) for i in range(1, 13)]
OLD_HARD_STATE = HardState(current_term=3, voted_for="n2", commit_index=10, acked_watermark=12)


def _versions(disk: OsDisk) -> dict[str, int]:
    return {name: file_header_version(disk.read_file(f"{WAL_DIR}/{name}"), SEGMENT_FILE_TYPE)
            for name in sorted(disk.listdir(WAL_DIR))}


def test_format1_store_opens_and_continues_in_the_current_format(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "g")
    disk = OsDisk(str(tmp_path / "g"))
    old_versions = _versions(disk)
    assert len(old_versions) >= 2 and set(old_versions.values()) == {1}
    wal, recovered = Wal.open(disk, segment_bytes=300)
    assert recovered.entries == OLD_ENTRIES and recovered.hard_state == OLD_HARD_STATE
    assert recovered.reasons == [] and not recovered.repairing
    new = [Entry(index=13, term=3, data=b"new-13")]
    voted = HardState(current_term=4, voted_for="n1", commit_index=12, acked_watermark=13)
    wal.append(new)
    wal.save_hard_state(voted)
    wal.sync()
    wal.close()
    versions = _versions(disk)
    assert {name: versions[name] for name in old_versions} == old_versions  # old files untouched
    assert [v for name, v in versions.items() if name not in old_versions] == [SEGMENT_FORMAT_VERSION]
    _, again = Wal.open(disk, segment_bytes=300)
    assert again.entries == OLD_ENTRIES + new and again.hard_state == voted and again.reasons == []
