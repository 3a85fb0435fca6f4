"""A WAL written by the segment format 2 writer (the vote fence a marker in `voted_for`) opens and carries on.

Method: `fixtures/format2_store` was written by the code before issue #14 made the vote fence its own
hard-state field (`fixtures/make_format2_store.py`, run against main at f2fced4): its hard-state file is
version 1 and its segments format 2, both holding version 1 hard-state bodies whose `voted_for` is the
marker "<fenced-through:5>". A copy is opened by this build: the marker must come back as
`vote_fence_term=5` with no vote, from the slot file and from the segment record alike; the next cycle
goes to a new segment of this build's format (4 since issue #14's log end) and rewrites the hard-state
file's header to this build's version (3; old segments untouched), and a reopen reads the new records. The old "<unknown>" marker reads as a fence through the
record's term.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from jsraft.codec.records import HEADER_BYTES, Kind, scan_records
from jsraft.disk import OsDisk
from jsraft.errors import CorruptRecord
from jsraft.raft.types import Entry, HardState
from jsraft.wal import Wal
from jsraft.wal.format import (
    HARD_STATE_FILE, HARD_STATE_FILE_TYPE, HARD_STATE_FORMAT_VERSION, SEGMENT_DATA_START, SEGMENT_FILE_TYPE,
    SEGMENT_FORMAT_VERSION, WAL_DIR, DecodedHardState, LogEnd, decode_hard_state, encode_hard_state,
    file_header_version,
)
from jsraft.wal.hardstate import read_slots

FIXTURE = Path(__file__).parent / "fixtures" / "format2_store"
OLD_ENTRIES = [Entry(index=i, term=1 if i < 8 else 2, data=b"old-%d" % i) for i in range(1, 13)]
OLD_HARD_STATE = HardState(current_term=4, voted_for=None, commit_index=10, acked_watermark=12, repairing=True,
                           vote_fence_term=5)


def _segment_versions(disk: OsDisk) -> dict[str, int]:
    return {name: file_header_version(disk.read_file(f"{WAL_DIR}/{name}"), SEGMENT_FILE_TYPE)
            for name in sorted(disk.listdir(WAL_DIR))}


def _copy(tmp_path: Path) -> OsDisk:
    shutil.copytree(FIXTURE, tmp_path / "g")
    return OsDisk(str(tmp_path / "g"))


def test_the_old_marker_reads_as_the_fence_field_from_slot_and_segment(tmp_path: Path) -> None:
    disk = _copy(tmp_path)
    assert file_header_version(disk.read_file(HARD_STATE_FILE), HARD_STATE_FILE_TYPE) == 1
    slots = read_slots(disk)
    newest = max(slots[:2], key=lambda slot: slot.sequence)
    assert newest.hard_state == OLD_HARD_STATE
    assert slots[2] == 1  # an older header: no damage, rewritten with the next save
    last = sorted(disk.listdir(WAL_DIR))[-1]
    buffer = disk.read_file(f"{WAL_DIR}/{last}")
    records = [r for r in scan_records(buffer, SEGMENT_DATA_START).records if r.kind == Kind.WAL_HARD_STATE]
    assert records, "the old writer put its hard state in the segment too"
    body = buffer[records[-1].offset + HEADER_BYTES : records[-1].offset + records[-1].length]
    assert decode_hard_state(body, 1).hard_state == OLD_HARD_STATE


def test_format2_store_opens_and_continues_in_the_current_format(tmp_path: Path) -> None:
    disk = _copy(tmp_path)
    old_versions = _segment_versions(disk)
    assert len(old_versions) >= 2 and set(old_versions.values()) == {2}
    wal, recovered = Wal.open(disk, segment_bytes=300)
    assert recovered.entries == OLD_ENTRIES and recovered.hard_state == OLD_HARD_STATE
    assert recovered.repairing and recovered.reasons == []
    new = [Entry(index=13, term=6, data=b"new-13")]
    voted = HardState(current_term=6, voted_for="n1", commit_index=12, acked_watermark=13, vote_fence_term=5)
    wal.append(new)
    wal.save_hard_state(voted)
    wal.sync()
    wal.close()
    versions = _segment_versions(disk)
    assert {name: versions[name] for name in old_versions} == old_versions  # old files untouched
    assert [v for name, v in versions.items() if name not in old_versions] == [SEGMENT_FORMAT_VERSION] == [4]
    header = file_header_version(disk.read_file(HARD_STATE_FILE), HARD_STATE_FILE_TYPE)
    assert header == HARD_STATE_FORMAT_VERSION == 3
    # One slot now holds this build's record, the other still the old writer's: both read.
    slots = sorted(read_slots(disk)[:2], key=lambda slot: slot.sequence)
    assert [slot.hard_state for slot in slots] == [OLD_HARD_STATE, voted]
    _, again = Wal.open(disk, segment_bytes=300)
    assert again.entries == OLD_ENTRIES + new and again.hard_state == voted and again.reasons == []


def test_the_old_vote_unknown_marker_reads_as_a_fence_through_its_term() -> None:
    vote = b"<unknown>"
    body = struct.pack("<QQQQBH", 7, 3, 4, 2, 1, len(vote)) + vote
    decoded = decode_hard_state(body, 1)
    hs, watermark_term = decoded.hard_state, decoded.watermark_term
    assert decoded.log_end is None and hs == HardState(current_term=7, commit_index=3, acked_watermark=4, repairing=True, vote_fence_term=7)
    assert watermark_term == 2
    # A real node id is kept as the vote; this build's body of that state is refused as version 1 (the
    # version comes from where a record sits, never from a guess).
    kept = struct.pack("<QQQQBH", 7, 3, 4, 2, 0, 2) + b"n2"
    assert decode_hard_state(kept, 1).hard_state.voted_for == "n2"
    state = HardState(current_term=7, voted_for="n2", commit_index=3, acked_watermark=4)
    log_end = LogEnd(index=9, term=2, anchor=17)
    new_body = encode_hard_state(state, 0, 2, log_end)[HEADER_BYTES:]
    assert decode_hard_state(new_body, 3) == DecodedHardState(state, 2, log_end)
    for older in (1, 2):
        with pytest.raises(CorruptRecord):
            decode_hard_state(new_body, older)
