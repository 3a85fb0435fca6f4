"""A WAL written by the segment format 3 writer (no log end in its hard states) opens and carries on.

Method: `fixtures/format3_store` was written by the code before issue #14 gave every hard state its log end
and anchor (`fixtures/make_format3_store.py`, run against main at acc5267): hard-state file version 2,
segments format 3, a conflict truncation at 13 in its history. A copy is opened by this build: it must read
entries 1..12 and the saved hard state with no finding at all (rule R7 has nothing to check a hard state
without a log end against, and must not invent a stale tail); the next cycle goes to a new format 4 segment
and rewrites the hard-state file to version 3 (old segments untouched); a reopen is clean; and a cycle whose
hard-state record never became durable, after the upgrade, keeps its entries (they follow the newest
record, an old-format one).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from jsraft.disk import OsDisk
from jsraft.raft.types import Entry, HardState
from jsraft.wal import Wal
from jsraft.wal.format import (
    HARD_STATE_FILE, HARD_STATE_FILE_TYPE, SEGMENT_FILE_TYPE, WAL_DIR, file_header_version,
)

FIXTURE = Path(__file__).parent / "fixtures" / "format3_store"
OLD_ENTRIES = [Entry(index=i, term=1 if i < 8 else 2, data=b"old-%d" % i) for i in range(1, 13)]
OLD_HARD_STATE = HardState(current_term=4, voted_for="n2", commit_index=10, acked_watermark=12,
                           vote_fence_term=3)


def _copy(tmp_path: Path) -> OsDisk:
    shutil.copytree(FIXTURE, tmp_path / "g")
    return OsDisk(str(tmp_path / "g"))


def _segment_versions(disk: OsDisk) -> dict[str, int]:
    return {name: file_header_version(disk.read_file(f"{WAL_DIR}/{name}"), SEGMENT_FILE_TYPE)
            for name in sorted(disk.listdir(WAL_DIR))}


def test_format3_store_opens_clean_and_continues_in_format4(tmp_path: Path) -> None:
    disk = _copy(tmp_path)
    old_versions = _segment_versions(disk)
    assert len(old_versions) >= 2 and set(old_versions.values()) == {3}
    assert file_header_version(disk.read_file(HARD_STATE_FILE), HARD_STATE_FILE_TYPE) == 2
    wal, recovered = Wal.open(disk, segment_bytes=300)
    assert recovered.entries == OLD_ENTRIES and recovered.hard_state == OLD_HARD_STATE
    assert recovered.reasons == [] and not recovered.repairing
    new = [Entry(index=13, term=4, data=b"new-13")]
    wal.append(new)
    wal.save_hard_state(HardState(current_term=4, voted_for="n2", commit_index=12, acked_watermark=13,
                                  vote_fence_term=3))
    wal.sync()
    wal.close()
    versions = _segment_versions(disk)
    assert {name: versions[name] for name in old_versions} == old_versions  # old files untouched
    assert [v for name, v in versions.items() if name not in old_versions] == [4]
    assert file_header_version(disk.read_file(HARD_STATE_FILE), HARD_STATE_FILE_TYPE) == 3
    _, again = Wal.open(disk, segment_bytes=300)
    assert again.entries == OLD_ENTRIES + new and again.reasons == [] and not again.repairing


def test_a_torn_cycle_right_after_the_upgrade_keeps_its_entries(tmp_path: Path) -> None:
    disk = _copy(tmp_path)
    wal, _ = Wal.open(disk, segment_bytes=300)
    new = [Entry(index=13, term=4, data=b"new-13"), Entry(index=14, term=4, data=b"new-14")]
    wal.append(new)
    wal.sync()  # the cycle's hard-state record never made it
    wal.close()
    _, recovered = Wal.open(disk, segment_bytes=300)
    assert recovered.entries == OLD_ENTRIES + new and recovered.reasons == [], recovered.reasons
