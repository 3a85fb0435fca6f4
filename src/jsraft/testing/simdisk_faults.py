"""Corruption faults for `SimDisk`: bit rot, cut tails, lost files, rolled-back chunks.

Owns: the faults that break the disk's durability contract. Each is applied only while the disk's
`corruption_allowed` is set (the simulator's fault atlas confines corruption to a minority of nodes); a
refused fault returns False and is logged as suppressed. Every fault is logged in `events`.

A mixin: `SimDisk` provides `_state` and `_full`; `_state.files` maps a path to its inode, whose `data`
is what reads return and `durable` what survives a crash.
"""

from __future__ import annotations

import posixpath

from jsraft.errors import invariant

CHUNK_BYTES = 4096


class CorruptionFaults:
    def _victim(self, what: str, path: str) -> tuple[str, "object | None"]:
        """The file a corruption fault targets, or None (logged) when this disk must not be corrupted."""
        full = self._full(path)
        inode = self._file(full)
        if self._state.corruption_allowed:
            return full, inode
        self._state.events.append(f"simdisk suppressed {what} {full} (corruption not allowed on this disk)")
        return full, None

    def flip_bit(self, path: str, offset: int | None = None) -> bool:
        """Flip one bit of the file, on the medium and in the cache (bit rot under the page cache)."""
        full, inode = self._victim("flip_bit", path)
        if inode is None or not inode.data:
            return False
        offset = self._state.rng.randrange(len(inode.data)) if offset is None else offset
        invariant(0 <= offset < len(inode.data), "flip_bit offset must be inside the file")
        bit = self._state.rng.randrange(8)
        inode.data[offset] ^= 1 << bit
        if offset < len(inode.durable):
            inode.durable[offset] ^= 1 << bit
        self._state.events.append(f"simdisk flip_bit {full} byte {offset} bit {bit}")
        return True

    def truncate_tail(self, path: str, nbytes: int) -> bool:
        """Cut `nbytes` off the end of the file, durably (a lost tail, not an unsynced one)."""
        full, inode = self._victim("truncate_tail", path)
        if inode is None:
            return False
        new_size = max(0, len(inode.data) - nbytes)
        del inode.data[new_size:]
        del inode.durable[new_size:]
        self._state.events.append(f"simdisk truncate_tail {full} to {new_size} bytes")
        return True

    def lose_file(self, path: str) -> bool:
        """Make the file vanish, name and content, durably."""
        full, inode = self._victim("lose_file", path)
        if inode is None:
            return False
        del self._state.files[full]
        parent, name = posixpath.split(full)
        entries = self._state.durable_dirs.get(self._state.dirs.get(parent, -1), {})
        if entries.get(name) == inode.number:
            del entries[name]
        self._state.events.append(f"simdisk lose_file {full}")
        return True

    def rollback_chunk(self, path: str, offset: int) -> bool:
        """The 4 KiB chunk at `offset` reverts to its content as of an earlier sync (a lost write); the file
        keeps its size, bytes the chunk lacked then read as zeros. False if there is no earlier version."""
        full, inode = self._victim("rollback_chunk", path)
        chunk = offset // CHUNK_BYTES
        start = chunk * CHUNK_BYTES
        if inode is None or not inode.history.get(chunk) or start >= len(inode.data):
            return False
        old = self._state.rng.choice(list(inode.history[chunk]))
        end = min(start + CHUNK_BYTES, len(inode.data))
        patch = (old + bytes(CHUNK_BYTES))[: end - start]
        inode.data[start:end] = patch
        inode.durable[start : min(end, len(inode.durable))] = patch[: max(0, len(inode.durable) - start)]
        self._state.events.append(f"simdisk rollback_chunk {full} chunk {chunk} ({end - start} bytes)")
        return True
