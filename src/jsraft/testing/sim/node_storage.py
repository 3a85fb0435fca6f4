"""`NodeStorage`: the node-level half of a simulated node's storage, and the production glue that opens the
node's group through it.

Owns: what production keeps in a node's store directory beside its groups' directories — `node.json`
(`server.settings.identity.load_or_format`) and the record of the groups this storage started
(`runtime.group_record.GroupRecord`, `groups.rec`) — on a `SimDisk` of its own (the node root), and the
store directory's exclusive lock (`disk.lock.acquire_store_lock`), held for the life of each incarnation.
`open_group` is the start-up sequence of `server.node.Node.prepare` + `runtime.NodeRuntime.open_group`
for the one group a simulated node runs: lock, identity, record, `runtime.persist.open_storage` (the WAL,
the group marker and the record's verdict), and `set_lost_floor` once the group is open, as `Node.run`
does after the meta group opened. The simulator thereby runs the production rule "a group this storage
started never bootstraps again", and a fault that loses the group's directory, its marker or the record
reaches the same code a real node runs (`loss`).

Layout: the node root holds `node.json` and `groups.rec`; the group's directory (the WAL, its `group.json`
marker and, for the stream app, `stream/msgs`) is the driver's own `SimDisk`, as if mounted at
`groups/sim`. Two disks rather than one tree so that the group's files, their order and every random draw
of its disk are what they were before the node level existed: every seed's timeline is unchanged unless a
loss fault fires. The node root is never corrupted, draws nothing (no read flips; its files are written
only with `write_atomic`, so a crash has nothing to tear) and loses a file only through `loss`.

The lock: production's lock is `flock(2)` on `<store_dir>/LOCK`, which `SimDisk` cannot hold. Each node
gets a real, empty temporary directory standing for its store directory, and the production function
locks it: an incarnation acquires it at `open_group` and releases it when it crashes (the kernel drops a
dead holder's lock, lock invariant 2); a second opener is refused by the kernel as a second process
would be (the lock is per open file description). Nothing but the `LOCK` file is ever in it.

Invariants:
  1. A running incarnation holds its node's lock; a stopped node holds none (`release` at every crash).
  2. The group opens only through `open_storage` with this node's record: no other start-up path exists.
  3. `close()` releases the lock and removes the temporary directory; the simulation calls it at the end
     of every run.

Imports: stdlib, `jsraft.disk.lock`, `jsraft.runtime.group_record`, `jsraft.runtime.persist`,
`jsraft.server.settings.identity`, `jsraft.testing.simdisk`, `jsraft.wal`. Reference: issue #14.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import uuid
import weakref
import zlib

from jsraft.disk.lock import StoreLock, acquire_store_lock
from jsraft.runtime.group_record import GroupRecord
from jsraft.runtime.persist import open_storage
from jsraft.server.settings.identity import IDENTITY_FILE, load_or_format
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Recovered, Wal

CLUSTER = "sim"


class ForgetfulRecord(GroupRecord):
    """Mutant `forget-lost-groups` (`loss.LOSS_MUTANTS`): the record never says a group lost its storage,
    so a group whose directory is gone bootstraps a new log (issue #14, hole 1)."""

    def lost_storage(self, name: str, *, assigned_index: int | None) -> bool:
        return False


class CeilinglessRecord(GroupRecord):
    """Mutant `no-vote-ceiling` (`storage_faults.STORAGE_MUTANTS`): the record never raises a group's
    vote-term ceiling, so a group whose directory is gone has no bound on its lost votes. Before the term
    query it restored fenced only through term 1 (issue #14: a node that voted in T could be repaired by a
    lower-term leader, or vote in T again); now it asks every voter for the term first (`raft.term_query`)."""

    def _raise_ceiling(self, name: str, term: int) -> int | None:
        return None


class NodeStorage:
    def __init__(self, node_id: str, *, forgetful: bool = False, lock: bool = True,
                 ceiling: bool = True) -> None:
        self.node_id = node_id
        self.root = SimDisk(random.Random(0), corruption_allowed=False)
        self.record: GroupRecord | None = None
        self.lock_dir = tempfile.mkdtemp(prefix=f"jsraft-sim-{node_id}-")
        # Removed by `close()`, or when this object is collected (a driver built outside a simulation).
        self._remove_dir = weakref.finalize(self, shutil.rmtree, self.lock_dir, True)
        self._lock: StoreLock | None = None
        self._record_class = ForgetfulRecord if forgetful else GroupRecord if ceiling else CeilinglessRecord
        self._locks = lock  # False: mutant `no-store-lock`, the node never takes its lock

    @property
    def locked(self) -> bool:
        return self._lock is not None and self._lock.held

    def open_group(self, disk: SimDisk, group: str, segment_bytes: int) -> tuple[Wal, Recovered, bool]:
        """Production's start-up for group `group` on `disk` (module docstring): returns `open_storage`'s
        WAL, what it recovered and `formatted` (the marker, or the record's verdict)."""
        if self._locks:
            self._lock = acquire_store_lock(self.lock_dir)
        existed = self.root.exists(IDENTITY_FILE)
        storage_uuid = str(uuid.UUID(int=zlib.crc32(self.node_id.encode())))
        load_or_format(self.root, self.node_id, CLUSTER, rng_uuid=storage_uuid)
        self.record = record = self._record_class.open(self.root, node_existed=existed)
        return open_storage(disk, group, segment_bytes, record, assigned_index=None)

    def opened(self, last_index: int) -> None:
        """The group is open: a record found lost takes the group's last index as its floor (`Node.run`)."""
        if self.record is not None:
            self.record.set_lost_floor(last_index)

    def second_open(self) -> StoreLock:
        """What a second `jsraft serve` on this node's directory does first; raises `StoreLocked` while an
        incarnation holds the lock. The caller releases a lock it got (only a broken lock gives one)."""
        return acquire_store_lock(self.lock_dir)

    def release(self) -> None:
        """The process is gone (a crash): the kernel drops its lock."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self.record = None

    def crash(self) -> None:
        self.root.crash(torn=True)
        self.release()

    def close(self) -> None:
        self.release()
        self._remove_dir()
