"""`InstallMark`: the durable note that a leader's snapshot is installed but the store does not hold it yet
(layer L3½).

Owns: one small file beside a stream replica's store naming the index of the leader's snapshot
(Raft InstallSnapshot) whose repair plan is not carried out yet.

Why: the runtime makes a leader's snapshot durable in the WAL before the store has been brought to it
(the repair fetches from peers afterwards). After a crash in between, the WAL's snapshot looks like this
replica's own, and this replica's own snapshot is restored leniently (`store_may_be_ahead`: the store may
already hold later entries, which the replay verifies): a store that disagrees with it in content, not
in position, would pass as current (simulator stream seeds 10313, 10601). The mark says "the snapshot at
this index is the leader's, and nothing after it was applied to the store": restored at open, it is
compared with the store as strictly as when it was installed.

Invariants:
  1. `set(index)` is durable before it returns (`Disk.write_atomic`), and it is called before the WAL
     holds the snapshot at `index` (`StreamAdapter.prepare_install`).
  2. `clear()` is durable before it returns; it is called once the store holds the group's state
     (an empty plan, a finished repair) and before any entry after the snapshot is applied to the store,
     and before this replica's own snapshot is saved (which could otherwise share the marked index).
  3. `pending()` reads what is there: a missing, unreadable or malformed mark is "none" (a damaged disk
     is in the fault atlas, whose replicas the next audit settles).

Imports: L1 (`disk`), stdlib. Must not import trio, `runtime` or `server`.
"""

from __future__ import annotations

from jsraft.disk.base import Disk
from jsraft.errors import JsraftError

MARK_FILE = "install_pending"


class InstallMark:
    def __init__(self, disk: Disk, path: str = MARK_FILE) -> None:
        self._disk = disk
        self._path = path
        self._set = self.pending() is not None  # avoid a write for each clear when nothing is marked

    def pending(self) -> int | None:
        """The marked snapshot index, or None."""
        try:
            if not self._disk.exists(self._path):
                return None
            text = self._disk.read_file(self._path).decode("ascii").strip()
        except (OSError, JsraftError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def set(self, index: int) -> None:
        self._disk.write_atomic(self._path, f"{index}\n".encode("ascii"))
        self._set = True

    def clear(self) -> None:
        if self._set:
            self._disk.write_atomic(self._path, b"0\n")
            self._set = False
