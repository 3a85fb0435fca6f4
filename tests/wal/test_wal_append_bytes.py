"""The bytes `Wal.append` writes: a segment holds exactly `encode_entry`'s records, in order.

Method: entries of several sizes (empty, small, 64 KiB, 1 MiB) and types are appended in two calls, some
spilling into a second segment; each segment file must equal its preamble followed by `encode_entry` of
its entries (the append path builds records from two pieces joined once, the repair paths whole), and a
reopen must recover every entry with no fault.
"""

from __future__ import annotations

import os
import random

import pytest

from jsraft.disk.os_disk import OsDisk
from jsraft.raft.types import Entry, EntryType
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Wal
from jsraft.wal.format import WAL_DIR, encode_entry, encode_entry_parts, segment_name, segment_preamble

SIZES = [0, 1, 300, 64 << 10, 1 << 20, 5, 200_000, 7]


def _entries() -> list[Entry]:
    return [Entry(index=i + 1, term=1 + i // 4, type=EntryType.NORMAL if i % 3 else EntryType.NOOP,
                  data=bytes([i]) * size) for i, size in enumerate(SIZES)]


@pytest.mark.parametrize("kind", ["sim", "os"])
def test_segments_hold_exactly_the_encoded_records(kind, tmp_path, monkeypatch):
    """On real files a large append is one vectored write of the records' pieces (`OsFile.append_parts`),
    made to come up short here (the rest is written after): the same bytes."""
    vectored = []
    if kind == "os":
        real = os.pwritev

        def short(fd: int, parts, offset: int) -> int:
            vectored.append(len(parts))
            return real(fd, [b"".join(parts)[: 100_000]], offset)
        monkeypatch.setattr(os, "pwritev", short)
    disk = SimDisk(random.Random(1)) if kind == "sim" else OsDisk(str(tmp_path))
    segment_bytes = 1 << 20
    wal, _ = Wal.open(disk, segment_bytes=segment_bytes)
    entries = _entries()
    wal.append(entries[:3])
    wal.append(entries[3:])
    wal.sync()
    wal.close()
    expected: dict[int, list[bytes]] = {}  # first index of a segment -> its records
    first, size, prev_term = None, 0, 0
    for entry in entries:
        record = encode_entry(entry, prev_term)
        assert record == b"".join(encode_entry_parts(entry, prev_term))
        if first is None or size >= segment_bytes:  # a record goes in while the segment has room
            first, size = entry.index, len(segment_preamble(entry.index))
            expected[first] = []
        expected[first].append(record)
        size += len(record)
        prev_term = entry.term
    assert len(expected) > 1, "the test spans segments"
    for first_index, records in expected.items():
        content = disk.read_file(f"{WAL_DIR}/{segment_name(first_index)}")
        assert content == segment_preamble(first_index) + b"".join(records), f"segment {first_index}"
    wal, recovered = Wal.open(disk, segment_bytes=segment_bytes)
    assert not recovered.faulty
    assert wal.entries(1, len(entries) + 1) == entries
    wal.close()
    assert bool(vectored) == (kind == "os") and all(count > 1 for count in vectored)
