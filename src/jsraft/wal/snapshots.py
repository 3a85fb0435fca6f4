"""Snapshot files of a Raft group: written atomically, verified in full on load (layer L2).

Owns: `snapshots/<term>-<index>.snap` under a WAL's disk.

Invariants:
  1. A snapshot file is complete or absent: it is written with `Disk.write_atomic` (temp, fsync, rename,
     directory fsync), and a leftover temp file is never read.
  2. A snapshot is used only if its file header, record frame, CRC, kind and identity (the name's term and
     index) all verify.
  3. An unreadable newest snapshot is reported, never skipped silently: the caller marks the replica
     repairing even when an older snapshot can still be used.
  4. The two newest snapshots are kept, so a damaged newest one still leaves a verified older one.
  5. `snapshots/` is made (durably: `Disk.makedirs` syncs its parent) by the first `save_snapshot`, not
     when the WAL is made or opened: a group that never snapshots never has one, which saves every new
     stream an inode and an fsync on its create's path (`bench/README.md`, "R1 stream create"). A missing
     `snapshots/` reads as "no snapshot", exactly as an empty one did (a WAL of an older build has one):
     a lost directory that held a snapshot is found as it was before, when the open made it again empty —
     its presence never vouched for anything.

Imports: L0, L1, attrs. Reference: DESIGN.md §3, §4 (an unreadable snapshot puts the replica in repairing).
"""

from __future__ import annotations

import struct

import attrs

from jsraft.codec.records import FILE_HEADER_BYTES, HEADER_BYTES, Kind, record_crc
from jsraft.disk.base import Disk
from jsraft.errors import CorruptRecord
from jsraft.raft.types import SnapshotMeta
from jsraft.wal.format import (
    SNAPSHOT_DIR,
    SNAPSHOT_FILE_TYPE,
    TEMP_SUFFIX,
    decode_snapshot_body,
    encode_snapshot,
    file_header_ok,
    parse_snapshot_name,
    read_checked,
    snapshot_name,
)

SNAPSHOTS_KEPT = 2
_HEADER = struct.Struct("<IIBQQ")


@attrs.frozen(kw_only=True)
class SnapshotLoad:
    """The newest readable snapshot (or None), and one line per unreadable snapshot newer than it."""

    snapshot: tuple[SnapshotMeta, bytes] | None
    problems: list[str]


def list_snapshots(disk: Disk) -> list[tuple[int, int, str]]:
    """`(index, term, name)` of every snapshot file, newest first; removes leftover temp files."""
    if not disk.is_dir(SNAPSHOT_DIR):
        return []
    found = []
    for name in disk.listdir(SNAPSHOT_DIR):
        if name.endswith(TEMP_SUFFIX):
            # An interrupted write_atomic: the rename never happened, so nothing refers to it.
            disk.remove(f"{SNAPSHOT_DIR}/{name}")
            continue
        parsed = parse_snapshot_name(name)
        if parsed is not None:
            term, index = parsed
            found.append((index, term, name))
    return sorted(found, reverse=True)


def read_snapshot(disk: Disk, name: str, index: int, term: int) -> tuple[SnapshotMeta, bytes]:
    """Verify and decode one snapshot file; raise `CorruptRecord` on any mismatch."""
    buffer = read_checked(disk.read_file, f"{SNAPSHOT_DIR}/{name}", SNAPSHOT_FILE_TYPE)
    if not file_header_ok(buffer, SNAPSHOT_FILE_TYPE):
        raise CorruptRecord("file header damaged")
    if len(buffer) < FILE_HEADER_BYTES + HEADER_BYTES:
        raise CorruptRecord("file too short")
    length, crc, kind, ident_a, ident_b = _HEADER.unpack_from(buffer, FILE_HEADER_BYTES)
    # The record must fill the file exactly: a short file is a lost tail, a longer one is garbage.
    if length != len(buffer) - FILE_HEADER_BYTES or record_crc(buffer, FILE_HEADER_BYTES, length) != crc:
        raise CorruptRecord("record length or CRC does not verify")
    if kind != Kind.SNAPSHOT or (ident_a, ident_b) != (index, term):
        raise CorruptRecord("record identity does not match the file name")
    body = buffer[FILE_HEADER_BYTES + HEADER_BYTES :]
    return decode_snapshot_body(index, term, body)


def load_newest(disk: Disk) -> SnapshotLoad:
    """Newest verified snapshot; every newer unreadable one is listed in `problems`."""
    problems = []
    for index, term, name in list_snapshots(disk):
        try:
            return SnapshotLoad(snapshot=read_snapshot(disk, name, index, term), problems=problems)
        except CorruptRecord as error:
            problems.append(f"snapshot {name} unreadable ({error.description})")
    return SnapshotLoad(snapshot=None, problems=problems)


def save_snapshot(disk: Disk, meta: SnapshotMeta, data: bytes) -> None:
    """Write the snapshot durably, then prune all but the `SNAPSHOTS_KEPT` newest."""
    disk.makedirs(SNAPSHOT_DIR)
    disk.write_atomic(f"{SNAPSHOT_DIR}/{snapshot_name(meta.term, meta.index)}", encode_snapshot(meta, data))
    old = list_snapshots(disk)[SNAPSHOTS_KEPT:]
    for _, _, name in old:
        disk.remove(f"{SNAPSHOT_DIR}/{name}")
    if old:
        disk.sync_dir(SNAPSHOT_DIR)
