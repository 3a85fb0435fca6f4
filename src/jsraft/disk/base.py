"""The `Disk` and `DiskFile` protocols.

Durability contract (what `OsDisk` provides and `SimDisk` models):
  1. Bytes written to a file are durable only after `DiskFile.sync()` returns.
  2. A file's *name* (creation, rename, removal) is durable only after `Disk.sync_dir()` of its parent.
  3. `write_atomic` makes the new content and its name durable before returning: after a crash the
     path holds either the old content or the new, never a mix.
  4. Except through an `unsynced()` view, where 1–3 wait for a later `sync_tree()` covering the path:
     nothing written through that view may be relied on before it.
"""

from __future__ import annotations

import posixpath
from typing import Protocol


def check_relative(path: str) -> str:
    """Normalize a relative path; refuse absolute paths and escapes from the root."""
    if path and path[0] not in "/." and path[-1] != "/" and "//" not in path and "/." not in path:
        return path  # no empty, "." or ".." component and no leading or trailing "/": normal already
    if path.startswith("/"):
        raise ValueError(f"disk paths are relative to the disk root: {path!r}")
    normal = posixpath.normpath(path) if path else "."
    if normal == ".." or normal.startswith("../"):
        raise ValueError(f"disk path escapes its root: {path!r}")
    return "" if normal == "." else normal


class DiskFile(Protocol):
    path: str

    def size(self) -> int: ...

    def pread(self, offset: int, length: int) -> bytes: ...

    def pwrite(self, offset: int, data: bytes) -> None: ...

    def append(self, data: bytes) -> int:
        """Write `data` at the end of the file; return the offset it was written at."""
        ...

    def truncate(self, length: int) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


# A write of pieces this large goes to a file that takes pieces (`OsFile.append_parts`) unjoined.
GATHER_BYTES_MIN = 64 << 10
IOV_PARTS_MAX = 1024  # Linux's IOV_MAX: the most pieces one vectored write takes


def append_pieces(file: DiskFile, pieces: list, length: int) -> int:
    """`file.append(b"".join(pieces))` (`length`: their total), without the join when the file writes
    pieces as they are (`append_parts`) and the write is large enough for the copy to matter."""
    gather = getattr(file, "append_parts", None)
    if gather is not None and length >= GATHER_BYTES_MIN and len(pieces) <= IOV_PARTS_MAX:
        return gather(pieces, length)
    return file.append(b"".join(pieces))


class Disk(Protocol):
    def open(self, path: str, *, create: bool = False) -> DiskFile: ...

    def read_file(self, path: str) -> bytes: ...

    def write_atomic(self, path: str, data: bytes) -> None: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None:
        """Create `path` and any missing parents, making each new name durable."""
        ...

    def remove(self, path: str) -> None: ...

    def remove_tree(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def sync_dir(self, path: str) -> None: ...

    def file_size(self, path: str) -> int: ...

    def sub(self, path: str) -> "Disk":
        """A disk rooted at `path` below this one, sharing its durability tracking."""
        ...

    def unsynced(self) -> "Disk":
        """This disk with its file and directory syncs skipped (contract 4): for formatting a tree."""
        ...

    def sync_tree(self, path: str) -> None:
        """fsync every file and directory under `path`, each directory after its children."""
        ...
