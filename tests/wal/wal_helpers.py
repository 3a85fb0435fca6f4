"""Helpers shared by the WAL tests: entries with recognisable data, disk edits made through the `Disk`
protocol (so the same damage can be done to an `OsDisk` and a `SimDisk`), and a SimDisk random source whose
torn crashes tear inside a small write."""

from __future__ import annotations

import random

from jsraft.codec.records import Kind, scan_records
from jsraft.disk import Disk
from jsraft.raft.types import Entry, HardState
from jsraft.wal import Recovered, Wal
from jsraft.wal.format import SEGMENT_KINDS, WAL_DIR

SMALL_SEGMENT_BYTES = 256
TEAR_WITHIN_BYTES = 40  # shorter than a hard-state slot record, so the tear always lands inside it


def make_entries(lo: int, hi: int, term: int = 1, size: int = 20) -> list[Entry]:
    """Entries `lo .. hi-1`; data names index and term, so a wrong entry cannot pass for a right one."""
    return [Entry(index, term, data=(f"e{index}t{term}-".encode() * size)[:size]) for index in range(lo, hi)]


def build(
    disk: Disk,
    entries: list[Entry],
    *,
    watermark: int | None = None,
    term: int | None = None,
    segment_bytes: int = SMALL_SEGMENT_BYTES,
) -> None:
    """Open, append and sync `entries`, save hard state (term = last entry's term), close."""
    wal, _ = Wal.open(disk, segment_bytes=segment_bytes)
    wal.append(entries)
    wal.sync()
    last_term = entries[-1].term if entries else 0
    hs = HardState(
        current_term=term if term is not None else last_term,
        voted_for="n1",
        acked_watermark=watermark if watermark is not None else 0,
    )
    wal.save_hard_state(hs)
    wal.sync()
    wal.close()


def reopen(disk: Disk, segment_bytes: int = SMALL_SEGMENT_BYTES) -> tuple[Wal, Recovered]:
    return Wal.open(disk, segment_bytes=segment_bytes)


def segments(disk: Disk) -> list[str]:
    return [name for name in disk.listdir(WAL_DIR) if name.endswith(".log")]


def spans(disk: Disk, name: str) -> dict[int, tuple[int, int]]:
    """`index -> (offset, length)` of every valid entry record in segment `name`."""
    buffer = disk.read_file(f"{WAL_DIR}/{name}")
    records = scan_records(buffer, 0, SEGMENT_KINDS).records
    return {r.ident_a: (r.offset, r.length) for r in records if r.kind == Kind.WAL_ENTRY}


def locate(disk: Disk, index: int) -> tuple[str, int, int]:
    """`(segment name, offset, length)` of the record for `index`."""
    for name in segments(disk):
        found = spans(disk, name).get(index)
        if found is not None:
            return (name, *found)
    raise KeyError(index)


def flip(disk: Disk, path: str, offset: int, mask: int = 0x01) -> None:
    handle = disk.open(path)
    byte = handle.pread(offset, 1)
    handle.pwrite(offset, bytes([byte[0] ^ mask]))
    handle.sync()
    handle.close()


def cut(disk: Disk, path: str, length: int) -> None:
    handle = disk.open(path)
    handle.truncate(length)
    handle.sync()
    handle.close()


def append_raw(disk: Disk, path: str, data: bytes) -> None:
    handle = disk.open(path)
    handle.append(data)
    handle.sync()
    handle.close()


def flip_entry(disk: Disk, index: int) -> None:
    """Damage the body of `index`'s record (its frame stays intact)."""
    name, offset, length = locate(disk, index)
    flip(disk, f"{WAL_DIR}/{name}", offset + length - 1)


class TearInsideTheWrite(random.Random):
    """SimDisk draws a torn crash's cut with `randint(first changed byte, file length)`, and without
    corruption faults that is its only draw; most cuts of a 12 KiB file keep a ~100-byte slot write
    whole. This keeps only the first few changed bytes, so the slot record is always torn."""

    def randint(self, a: int, b: int) -> int:
        return a + self.randrange(min(b - a, TEAR_WITHIN_BYTES) + 1)
