"""`SimDisk`: an in-memory `Disk` with an exact durability model and injectable faults, for the simulator.

Owns: the simulated file system the deterministic simulator gives to `wal` and `store`. It never touches
the real file system, and every random choice comes from the `random.Random` it is given, so a run is
replayed exactly from its seed.

Durability model (the contract of `jsraft.disk.base`, modelled exactly):
  1. A file (inode) has *current* content (what reads return) and *durable* content (what survives a
     crash); `DiskFile.sync()` copies current to durable.
  2. A directory has an identity (like an inode) and current and durable entries; `Disk.sync_dir()`
     copies current to durable, and `makedirs` and `write_atomic` do so for the parent, as `OsDisk`
     does. Durable entries belong to the directory, not to its path, so a renamed directory keeps them
     under its new name, and an unsynced rename leaves them under the old one.
  3. `crash()` keeps only names reachable through durable entries from the root, with durable content;
     with `torn=True` a file with an unsynced change keeps a random prefix of it (the shadow disk's `torn`
     rule). Handles opened before the crash raise `SimDiskCrashed`.
  4. `arm_power_cut(path)`: the next `sync()` of that file raises `SimPowerCut` and syncs nothing — a power
     cut inside that fsync, for the simulator to crash the node at exactly that point.

Faults that break the contract (bit flips, cut tails, lost files, rolled-back 4 KiB chunks, read-time bit
flips) are *corruption*: applied only while `corruption_allowed`, so the simulator can confine them to a
minority of nodes; a refused one returns False. Every fault is logged in `events` for the trace.

Invariants:
  1. Without corruption faults, everything synced (content by `sync`, names by `sync_dir`) before a crash
     reads back byte for byte after it.
  2. Chunk history is bounded: at most `history_versions_max` earlier versions per 4 KiB chunk.

Imports: stdlib, `jsraft.disk.base`, `jsraft.errors`. Reference: DESIGN.md §11 (whole-cluster simulation).
"""

from __future__ import annotations

import dataclasses
import posixpath
import random
from collections import deque

from jsraft.disk.base import check_relative
from jsraft.errors import invariant
from jsraft.testing.simdisk_faults import CHUNK_BYTES, CorruptionFaults

ROOT_DIR = 0  # the root directory's identity


def _dir_entry(dir_id: int) -> int:
    """A directory entry's value: negative, so it never collides with a file's (positive) inode number."""
    return -1 - dir_id


def _entry_dir(value: int) -> int | None:
    return -1 - value if value < 0 else None


class SimPowerCut(Exception):
    """The power went out inside a `sync()` armed by `SimDisk.arm_power_cut`: the caller crashes the node."""


class SimDiskCrashed(Exception):
    """A handle opened before `crash()` was used after it: the process that held it is gone."""


class _Inode:
    """One file's bytes: current (page cache) and durable (medium), plus older durable chunk versions."""

    def __init__(self, number: int, data: bytes = b"", durable: bytes = b"") -> None:
        self.number = number
        self.data = bytearray(data)
        self.durable = bytearray(durable)
        self.dirty_lo: int | None = None if data == durable else 0  # first byte changed since last sync
        self.history: dict[int, deque[bytes]] = {}

    def touch(self, offset: int) -> None:  # bytes from `offset` on differ from the durable content
        self.dirty_lo = offset if self.dirty_lo is None else min(self.dirty_lo, offset)

    def sync(self, versions_max: int) -> None:
        if self.dirty_lo is None:
            return
        lo = min(self.dirty_lo, len(self.durable), len(self.data))
        end = max(len(self.durable), len(self.data))
        for chunk in range(lo // CHUNK_BYTES, (end + CHUNK_BYTES - 1) // CHUNK_BYTES):
            start = chunk * CHUNK_BYTES
            old = bytes(self.durable[start : start + CHUNK_BYTES])
            if old and old != self.data[start : start + CHUNK_BYTES]:
                self.history.setdefault(chunk, deque(maxlen=versions_max)).append(old)
        self.durable[lo:] = self.data[lo:]
        self.dirty_lo = None


@dataclasses.dataclass
class _State:
    """Everything one simulated disk holds; shared by the root `SimDisk` and its `sub()` views."""

    rng: random.Random
    corruption_allowed: bool
    read_flip_probability: float
    history_versions_max: int
    files: dict[str, _Inode] = dataclasses.field(default_factory=dict)  # current names
    dirs: dict[str, int] = dataclasses.field(default_factory=lambda: {"": ROOT_DIR})  # path -> identity
    durable_dirs: dict[int, dict[str, int]] = dataclasses.field(default_factory=lambda: {ROOT_DIR: {}})
    inodes: dict[int, _Inode] = dataclasses.field(default_factory=dict)  # every inode a name may reach
    next_number: int = 1
    next_dir: int = 1
    generation: int = 0  # bumped by every crash: older handles are dead
    power_cut_at: set[str] = dataclasses.field(default_factory=set)  # paths whose next sync() cuts the power
    events: list[str] = dataclasses.field(default_factory=list)

    def new_inode(self, data: bytes = b"", durable: bytes = b"") -> _Inode:
        inode = self.inodes[self.next_number] = _Inode(self.next_number, data, durable)
        self.next_number += 1
        return inode

    def new_dir(self, path: str) -> int:
        dir_id = self.dirs[path] = self.next_dir
        self.next_dir += 1
        self.durable_dirs[dir_id] = {}  # new and empty, whatever an unsynced removal left at this path
        return dir_id

    def sync_entries(self, directory: str) -> None:
        self.durable_dirs[self.dirs[directory]] = self.children(directory)

    def children(self, directory: str) -> dict[str, int]:
        """Current entries directly in `directory`: name -> inode number, or a directory's `_dir_entry`."""
        out = {d.rpartition("/")[2]: _dir_entry(i) for d, i in self.dirs.items() if d and posixpath.dirname(d) == directory}
        for path, inode in self.files.items():
            if posixpath.dirname(path) == directory:
                out[posixpath.basename(path)] = inode.number
        return out

    def maybe_flip_on_read(self, data: bytes, where: str) -> bytes:
        if not data or not self.corruption_allowed or self.rng.random() >= self.read_flip_probability:
            return data
        offset, bit = self.rng.randrange(len(data)), self.rng.randrange(8)
        self.events.append(f"simdisk read-flip {where} byte {offset} bit {bit}")
        flipped = bytearray(data)
        flipped[offset] ^= 1 << bit
        return bytes(flipped)


class SimFile:
    """An open simulated file. Like a POSIX descriptor it follows the inode, not the name."""

    def __init__(self, state: _State, inode: _Inode, path: str) -> None:
        self.path = path
        self._state, self._inode = state, inode
        self._generation, self._closed = state.generation, False

    def _live(self) -> _Inode:
        if self._generation != self._state.generation:
            raise SimDiskCrashed(f"{self.path}: handle from before a crash")
        if self._closed:
            raise ValueError(f"{self.path}: I/O on a closed file")
        return self._inode

    def size(self) -> int:
        return len(self._live().data)

    def pread(self, offset: int, length: int) -> bytes:
        return self._state.maybe_flip_on_read(bytes(self._live().data[offset : offset + length]), self.path)

    def pwrite(self, offset: int, data: bytes) -> None:
        inode = self._live()
        invariant(offset >= 0, "pwrite offset must not be negative")
        inode.data.extend(bytes(max(0, offset - len(inode.data))))
        inode.data[offset : offset + len(data)] = data
        inode.touch(offset)

    def append(self, data: bytes) -> int:
        offset = len(self._live().data)
        self.pwrite(offset, data)
        return offset

    def truncate(self, length: int) -> None:
        inode = self._live()
        del inode.data[length:]
        inode.data.extend(bytes(max(0, length - len(inode.data))))
        inode.touch(length)

    def sync(self) -> None:
        inode = self._live()
        if self.path in self._state.power_cut_at:  # `SimDisk.arm_power_cut`: the write stays unsynced
            self._state.power_cut_at.discard(self.path)
            raise SimPowerCut(f"power cut inside the fsync of {self.path}")
        inode.sync(self._state.history_versions_max)

    def close(self) -> None:
        self._closed = True  # nothing is flushed: closing a file is not a sync


class SimDisk(CorruptionFaults):
    """A simulated disk: the root, or a `sub()` view sharing the root's `_State` under a path prefix."""

    def __init__(
        self, rng: random.Random, *, corruption_allowed: bool = True, read_flip_probability: float = 0.0,
        history_versions_max: int = 4,
    ) -> None:
        invariant(0.0 <= read_flip_probability <= 1.0, "read_flip_probability is a probability")
        invariant(history_versions_max >= 1, "keep at least one earlier version per chunk")
        self._state = _State(rng, corruption_allowed, read_flip_probability, history_versions_max)
        self._prefix = ""
        self.events = self._state.events  # every fault, in order, shared with `sub()` views

    @property
    def corruption_allowed(self) -> bool:
        return self._state.corruption_allowed

    @corruption_allowed.setter
    def corruption_allowed(self, value: bool) -> None:
        self._state.corruption_allowed = value

    def _full(self, path: str) -> str:
        rel = check_relative(path)
        return f"{self._prefix}/{rel}" if self._prefix and rel else (rel or self._prefix)

    def sub(self, path: str) -> "SimDisk":
        self.makedirs(path)
        view = object.__new__(SimDisk)
        view._state, view._prefix, view.events = self._state, self._full(path), self.events
        return view

    def _file(self, full: str) -> _Inode:
        if full not in self._state.files:
            raise IsADirectoryError(full) if full in self._state.dirs else FileNotFoundError(full)
        return self._state.files[full]

    def _need_parent(self, full: str) -> str:
        if (parent := posixpath.dirname(full)) not in self._state.dirs:
            raise FileNotFoundError(f"{full}: parent directory does not exist")
        return parent

    def open(self, path: str, *, create: bool = False) -> SimFile:
        full = self._full(path)
        if create and full not in self._state.files and full not in self._state.dirs:
            self._need_parent(full)
            self._state.files[full] = self._state.new_inode()
        return SimFile(self._state, self._file(full), full)

    def read_file(self, path: str) -> bytes:
        full = self._full(path)
        return self._state.maybe_flip_on_read(bytes(self._file(full).data), full)

    def write_atomic(self, path: str, data: bytes) -> None:
        # One call, so there is no moment for a crash between the temp write and the rename: the new
        # inode is born durable and the parent directory is synced, exactly what `OsDisk` ends with.
        full = self._full(path)
        parent = self._need_parent(full)
        if full in self._state.dirs:
            raise IsADirectoryError(full)
        self._state.files[full] = self._state.new_inode(data, data)
        self._state.sync_entries(parent)

    def exists(self, path: str) -> bool:
        full = self._full(path)
        return full in self._state.files or full in self._state.dirs

    def is_dir(self, path: str) -> bool:
        return self._full(path) in self._state.dirs

    def listdir(self, path: str) -> list[str]:
        full = self._full(path)
        if full not in self._state.dirs:
            raise FileNotFoundError(full) if full not in self._state.files else NotADirectoryError(full)
        return sorted(self._state.children(full))

    def makedirs(self, path: str) -> None:
        full = self._full(path)
        missing: list[str] = []
        while full and full not in self._state.dirs:
            if full in self._state.files:
                raise FileExistsError(full)
            missing.append(full)
            full = posixpath.dirname(full)
        for directory in reversed(missing):
            self._state.new_dir(directory)
            # Like `OsDisk.makedirs`: a new directory's name is durable once its parent is synced.
            self._state.sync_entries(posixpath.dirname(directory))

    def remove(self, path: str) -> None:
        full = self._full(path)
        self._file(full)
        del self._state.files[full]

    def remove_tree(self, path: str) -> None:
        full = self._full(path)
        invariant(full != "", "refusing to remove the root of a simulated disk")
        below = f"{full}/"
        for name in [p for p in self._state.files if p == full or p.startswith(below)]:
            del self._state.files[name]
        self._state.dirs = {d: i for d, i in self._state.dirs.items() if not (d == full or d.startswith(below))}

    def rename(self, src: str, dst: str) -> None:
        full_src, full_dst = self._full(src), self._full(dst)
        self._need_parent(full_dst)
        if not self.exists(src):
            raise FileNotFoundError(full_src)
        if full_dst in self._state.dirs:
            raise IsADirectoryError(full_dst)
        below = f"{full_src}/"
        for name in [p for p in self._state.files if p == full_src or p.startswith(below)]:
            self._state.files[full_dst + name[len(full_src) :]] = self._state.files.pop(name)
        moved = {d: i for d, i in self._state.dirs.items() if d == full_src or d.startswith(below)}
        kept = {d: i for d, i in self._state.dirs.items() if d not in moved}
        # A directory keeps its identity (and so its durable entries) when it moves.
        self._state.dirs = kept | {full_dst + d[len(full_src) :]: i for d, i in moved.items()}

    def unsynced(self) -> "SimDisk":
        """The simulator keeps every sync here (stricter than contract 4 asks): the same view."""
        return self

    def sync_tree(self, path: str) -> None:
        top = self._full(path)
        below = f"{top}/" if top else ""
        for full, inode in self._state.files.items():
            if full.startswith(below):
                inode.sync(self._state.history_versions_max)
        for full in sorted((d for d in self._state.dirs if d == top or d.startswith(below)), key=len, reverse=True):
            self._state.sync_entries(full)

    def sync_dir(self, path: str) -> None:
        full = self._full(path)
        if full not in self._state.dirs:
            raise FileNotFoundError(full)
        self._state.sync_entries(full)

    def file_size(self, path: str) -> int:
        return len(self._file(self._full(path)).data)

    # --- Power loss ------------------------------------------------------------------------------

    def arm_power_cut(self, path: str) -> None:
        """The next `sync()` of `path` raises `SimPowerCut` instead of syncing: what was written to it since
        its last sync is still unsynced, so the crash that follows (`torn=True`) tears it. Not corruption:
        a power cut may strike any node. Disarmed by a crash."""
        self._state.power_cut_at.add(self._full(path))

    def disarm_power_cuts(self) -> None:
        self._state.power_cut_at.clear()

    def crash(self, *, torn: bool = False) -> dict[str, int]:
        """Lose everything not durable (see the module docstring); return counts for the trace."""
        state = self._state
        dirs, files = _durable_tree(state.durable_dirs)
        lost_names = len(set(state.files) - set(files)) + len(set(state.dirs) - set(dirs))
        survivors: dict[int, _Inode] = {}
        torn_files = 0
        for path in sorted(files):
            old = state.inodes[files[path]]
            if old.number in survivors:
                continue  # a second durable name for the same inode
            content = bytes(old.durable)
            if torn and old.dirty_lo is not None:
                content = _torn_content(content, bytes(old.data), old.dirty_lo, state.rng)
                torn_files += content != old.durable
            survivors[old.number] = _Inode(old.number, content, content)
            survivors[old.number].history = old.history
        state.inodes, state.dirs = survivors, dirs
        state.files = {path: survivors[number] for path, number in files.items()}
        reachable = set(dirs.values())
        state.durable_dirs = {d: entries for d, entries in state.durable_dirs.items() if d in reachable}
        state.generation += 1
        state.power_cut_at.clear()
        counts = {"files": len(state.files), "lost_names": lost_names, "torn_files": int(torn_files)}
        state.events.append(f"simdisk crash torn={torn} {counts}")
        return counts


def _durable_tree(durable: dict[int, dict[str, int]]) -> tuple[dict[str, int], dict[str, int]]:
    """Directories (path -> identity) and files (path -> inode) reachable from the root durably."""
    dirs, files, pending = {"": ROOT_DIR}, {}, [("", ROOT_DIR)]
    while pending:
        directory, dir_id = pending.pop()
        for name, value in sorted(durable.get(dir_id, {}).items()):
            path = f"{directory}/{name}" if directory else name
            child = _entry_dir(value)
            if child is not None:
                dirs[path] = child
                pending.append((path, child))
            else:
                files[path] = value
    return dirs, files


def _torn_content(durable: bytes, current: bytes, dirty_lo: int, rng: random.Random) -> bytes:
    """A random prefix of the unsynced change survives; an unsynced shrink does not."""
    if len(current) < len(durable) or current == durable:
        return durable
    start = min(dirty_lo, len(durable))
    first_diff = next((i for i in range(start, len(durable)) if durable[i] != current[i]), len(durable))
    cut = rng.randint(first_diff, len(current))
    return current[:cut] + durable[cut:]
