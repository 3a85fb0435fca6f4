"""The segment files of an open `Wal`: open handles, rolling to a new segment, removal (layer L2).

Owns: `SegmentFiles`, the base class of `log.Wal` that keeps which segment files are open (the active one
and those waiting for their fsync), fsyncs them, makes a new WAL's first segment ahead, starts a new
segment, reads through an open or a fresh handle, rewrites a segment with repaired entries, and removes a
segment durably. `Wal` decides what to write and when to fsync; this only handles the files. Also
`make_new_wal`: a new WAL's files written ahead, for a directory built whole (invariant 4).

Invariants:
  1. A segment file stays open while it is the active one or dirty (written since its last fsync).
  2. A new segment is created only for the index after the log's end, never over an existing file (an
     entry-less segment of that name that appends may not go to is removed first, after a checkpoint).
  3. Each removal is durable (directory fsync) before the next: a crash leaves a prefix, never a gap.
  4. `make_new_wal` writes, into a directory with no WAL, the same files with the same bytes as
     `Wal.open` followed by `make_first_segment` leave there (the zero hard state in both slots, `wal/`
     with the first segment's header, no `snapshots/` yet; tests/wal/test_make_new_wal.py compares them), without
     the recovery an open makes of what is not there. Whoever opens the WAL later recovers it as any.

`keep_faulty`: what a re-read of an open log may not un-fault (`log.Wal` invariant 6).

Imports: L0, L1 (`disk` protocol, `raft.types`), siblings `format`, `hardstate`, `scan`, `segment`.
"""

from __future__ import annotations

from jsraft.disk.base import Disk, DiskFile
from jsraft.errors import invariant
from jsraft.raft.types import Entry, HardState
from jsraft.wal.format import (
    HARD_STATE_FILE, SEGMENT_DATA_START, SEGMENT_FORMAT_VERSION, SNAPSHOT_DIR, WAL_DIR, segment_name, segment_preamble,
)
from jsraft.wal.hardstate import HardStateFile
from jsraft.wal.scan import LogScan
from jsraft.wal.segment import Segment, new_segment_content, rebuild


def make_new_wal(disk: Disk) -> None:
    """Invariant 4: a new, empty WAL's files under `disk`, its first segment made (`make_first_segment`)."""
    invariant(not any(disk.exists(name) for name in (HARD_STATE_FILE, WAL_DIR, SNAPSHOT_DIR)),
              "a new WAL's files are written only where no WAL is")
    disk.makedirs(WAL_DIR)  # `snapshots/` comes with the first snapshot (`snapshots` invariant 5)
    HardStateFile.create(disk, HardState())
    handle = disk.open(f"{WAL_DIR}/{segment_name(1)}", create=True)
    try:
        handle.append(segment_preamble(1))
    finally:
        handle.close()


class SegmentFiles:
    """Segment-file bookkeeping shared by `Wal`'s methods (the attributes are set by `Wal.__init__`)."""

    _disk: Disk
    _segment_bytes: int
    _segments: list[Segment]
    _handles: dict[str, DiskFile]
    _dirty: set[str]
    _dir_dirty: bool
    _active: str | None
    _last_index: int

    def _checkpoint(self) -> None:
        raise NotImplementedError  # `Wal`: the hard state to the witness file

    def _trusted_term(self, index: int) -> int:
        raise NotImplementedError  # `Wal`: the term of a good index, else 0

    def sync_log(self) -> None:
        """`Wal.sync`'s first part (segments, directory): the cycle's records are durable, the witness not."""
        self._sync_segments()

    def _sync_segments(self) -> None:
        """Fsync every dirty segment (oldest first), then `wal/` if a segment was created since."""
        for name in sorted(self._dirty):
            self._handles[name].sync()
        self._dirty.clear()
        self._close_idle()
        if self._dir_dirty:
            self._disk.sync_dir(WAL_DIR)
            self._dir_dirty = False

    def make_first_segment(self) -> None:
        """Create now the segment a new WAL's first append goes to (`log` invariant 5): for a directory made
        whole and synced as one tree (`Disk.sync_tree`), whose sync then makes the segment's name durable,
        so the group's first cycle fsyncs the segment alone, not the `wal/` directory as well. The file holds
        only its header; recovery keeps such a segment and appends go on in it (`Wal._adopt`)."""
        invariant(not self._segments and self._last_index == 0 and self._active is None,
                  "only a new, empty WAL gets its first segment made ahead")
        self._roll(1)
        self._sync_segments()

    def _close_idle(self) -> None:
        """Close every segment file that is neither the active one nor waiting for its fsync."""
        for name in [name for name in self._handles if name != self._active and name not in self._dirty]:
            self._handles.pop(name).close()

    def _pread(self, segment: Segment, offset: int, length: int) -> bytes:
        name = segment.name
        invariant(name is not None, "only good entries are read, and the head holds none")
        handle = self._handles.get(name or "")
        if handle is not None:
            return handle.pread(offset, length)
        handle = self._disk.open(f"{WAL_DIR}/{name}")
        try:
            return handle.pread(offset, length)
        finally:
            handle.close()

    def _writable_segment(self, first_index: int) -> Segment:
        invariant(first_index == self._last_index + 1, "appends continue at last_index() + 1")
        if self._active is not None:
            segment = self._segments[-1]
            if segment.size < self._segment_bytes or segment.last < segment.first:
                return segment
        return self._roll(first_index)

    def _roll(self, first_index: int) -> Segment:
        """Start a new segment; the previous one stays open until `sync()` has made it durable."""
        name = segment_name(first_index)
        path = f"{WAL_DIR}/{name}"
        last = self._segments[-1] if self._segments else None
        if last is not None and last.name == name and last.last < last.first:
            # An entry-less segment appends may not go to (format 1, bad header) has this name: it goes,
            # after a checkpoint of the hard state its records may hold.
            self._checkpoint()
            self._remove_segment(self._segments.pop())
        invariant(not self._disk.exists(path), f"segment {name} already exists")
        if self._active is not None and self._active not in self._dirty:
            self._handles.pop(self._active).close()
        handle = self._disk.open(path, create=True)
        handle.append(segment_preamble(first_index))
        segment = Segment(first_index, name)
        segment.size = segment.junk_at = SEGMENT_DATA_START
        segment.header_ok = True
        segment.version = SEGMENT_FORMAT_VERSION
        self._segments.append(segment)
        self._handles[name] = handle
        self._dirty.add(name)
        self._dir_dirty = True
        self._active = name
        return segment

    def _remove_segment(self, segment: Segment) -> None:
        if segment.name is None:
            return
        handle = self._handles.pop(segment.name, None)
        if handle is not None:
            handle.close()
        self._disk.remove(f"{WAL_DIR}/{segment.name}")
        # Each removal is durable before the next, newest first: a crash leaves a prefix, never a gap.
        self._disk.sync_dir(WAL_DIR)

    def _rewrite(self, segment: Segment, group: dict[int, Entry]) -> None:
        """Write `segment` anew with the entries of `group` in place, atomically (`segment.rebuild`)."""
        if segment.name is None:
            name, content = new_segment_content([group[i] for i in sorted(group)], self._trusted_term)
        else:
            name = segment.name
            buffer = self._disk.read_file(f"{WAL_DIR}/{name}")
            is_last = segment is self._segments[-1]
            content = rebuild(segment, buffer, group, self._trusted_term, keep_tail_junk=is_last)
            handle = self._handles.pop(name, None)
            if handle is not None:
                handle.close()
        self._disk.write_atomic(f"{WAL_DIR}/{name}", content)


def keep_faulty(scan: LogScan, faulty: set[int]) -> None:
    """`log.Wal` invariant 6: every index of `faulty` that `scan` holds stays faulty in it, its term unknown."""
    for index in faulty - scan.faulty:
        for segment in scan.segments:
            if segment.first <= index <= segment.last:
                scan.faulty.add(index)
                segment.terms[index - segment.first] = 0
                break
