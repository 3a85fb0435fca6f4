"""`IndexMark` and `InstallMark`: small durable notes beside a stream replica's store, each naming one
Raft index (layer L3½).

Owns: `IndexMark`, one small file holding an index (or none), written atomically and durably;
`InstallMark`, the note that a leader's snapshot is installed but the store does not hold it yet; and
`AuditMark`, the note that the store awaits an audit's confirmation (what it means: replica/judgement.py).

Why the install mark: the runtime makes a leader's snapshot (Raft InstallSnapshot) durable in the WAL
before the store has been brought to it (the repair fetches from peers afterwards). After a crash in
between, the WAL's snapshot looks like this replica's own, and this replica's own snapshot is restored
leniently (`store_may_be_ahead`: the store may already hold later entries, which the replay verifies): a
store that disagrees with it in content, not in position, would pass as current (simulator stream seeds
10313, 10601). The mark says "the snapshot at this index is the leader's, and nothing after it was
applied to the store": restored at open, it is compared with the store as strictly as when it was
installed.

Invariants:
  1. `set(index)` is durable before it returns (`Disk.write_atomic`), and it is called before the WAL
     holds the snapshot at `index` (`StreamAdapter.prepare_install`).
  2. `clear()` is durable before it returns; it is called once the store holds the group's state
     (an empty plan, a finished repair) and before any entry after the snapshot is applied to the store,
     and before this replica's own snapshot is saved (which could otherwise share the marked index).
  3. `pending()` reads what is there: a missing or cleared mark is "none"; an unreadable or malformed one
     is `damaged` (the install mark takes it as "none": a damaged disk is in the fault atlas, whose
     replicas the next audit settles; the judgement mark takes it as set, the safe side there).

Imports: L1 (`disk`), stdlib. Must not import trio, `runtime` or `server`.
"""

from __future__ import annotations

from jsraft.disk.base import Disk
from jsraft.errors import JsraftError

MARK_FILE = "install_pending"
AUDIT_MARK_FILE = "audit_pending"  # replica/judgement.py's


class IndexMark:
    def __init__(self, disk: Disk, path: str) -> None:
        self._disk = disk
        self._path = path
        self._set = self.pending(damaged=0) is not None  # avoid a write for each clear when nothing is marked

    def pending(self, *, damaged: int | None = None) -> int | None:
        """The marked index, None when nothing is marked, `damaged` when the file does not read (inv. 3)."""
        try:
            if not self._disk.exists(self._path):
                return None
            text = self._disk.read_file(self._path).decode("ascii").strip()
        except (OSError, JsraftError, UnicodeDecodeError):
            return damaged
        if not text.isdigit():
            return damaged
        return int(text) if int(text) > 0 else None

    def set(self, index: int) -> None:
        self._disk.write_atomic(self._path, f"{index}\n".encode("ascii"))
        self._set = True

    def clear(self) -> None:
        if self._set:
            self._disk.write_atomic(self._path, b"0\n")
            self._set = False


class InstallMark(IndexMark):
    def __init__(self, disk: Disk, path: str = MARK_FILE) -> None:
        super().__init__(disk, path)


class AuditMark(IndexMark):
    def __init__(self, disk: Disk, path: str = AUDIT_MARK_FILE) -> None:
        super().__init__(disk, path)
