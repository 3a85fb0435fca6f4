"""`ReplacementStore`: the fresh store a stream repair refills, kept apart from the old one until it
verified (layer L5).

Owns: production's side of DESIGN §8's "fresh store" repair (a store that cut its head beyond the group's
can only be refilled empty). For a file stream the new store is built beside the old one by
`store.swap.BesideBuild` (`msgs.repair-<n>/`, swapped in atomically); for a memory stream it is a new
`MemStore`, the old one kept until the swap. `start` hands the new store to the catch-up session (which
puts it into the machine), `roll_back` puts the old store back into the machine and the replica when the
session fails, is interrupted or is replaced, and `install` (given to `replica.stream_repair.finish_session`)
swaps the verified store in.

Invariants:
  1. The old store is never removed or written while a build runs; it is closed only by `install`, right
     before the swap (store.swap invariant 4), or by `roll_back` on a replica that closed meanwhile.
  2. `roll_back` and `install` leave the machine's store and `replica.store` the same object.

Imports: L2 (`store`), L4 (`runtime.workers`: the store-roll thread), server siblings. Reference: store/swap.py, DESIGN.md §8.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from jsraft.disk.base import Disk
from jsraft.runtime.workers import store_jobs
from jsraft.server.groups.memory_stream import STORE_DIR, is_memory
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore
from jsraft.store.swap import BesideBuild

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.repair")


class ReplacementStore:
    def __init__(self, replica: "StreamReplica") -> None:
        self.replica = replica
        self._beside: BesideBuild | None = None
        self._memory_old: Any = None  # a memory stream's old store while its replacement fills

    @property
    def active(self) -> bool:
        return self._memory_old is not None or (self._beside is not None and self._beside.active)

    def start(self) -> Any:
        """A fresh store for the catch-up session; the old one stays open and untouched (invariant 1)."""
        replica = self.replica
        machine = replica.machine
        assert machine is not None
        current = machine.store
        config = current.config
        if is_memory(replica.config):
            if self._memory_old is None:
                self._memory_old = current
            store: Any = MemStore(config)
        else:
            if self._beside is None:
                self._beside = BesideBuild(replica.disk, STORE_DIR, _opener(config))
            self._beside.open_store = _opener(config)
            store = self._beside.start(current)
            log.info("stream %s on %s: building a replacement store in %s beside the old one", replica.name,
                     replica.node_id, self._beside.build)
        replica.store = store
        return store

    def roll_back(self) -> None:
        """The session will not finish with this store: the old one is the machine's again (invariant 2)."""
        replica = self.replica
        if self._memory_old is not None:
            old, self._memory_old = self._memory_old, None
        elif self._beside is not None and self._beside.active:
            old = self._beside.abandon()
        else:
            return
        log.info("stream %s on %s: the repair's replacement store is dropped; the old store stays",
                 replica.name, replica.node_id)
        if replica.machine is not None:
            replica.machine.replace_store(old)
        replica.store = old
        if replica.closed:
            old.close()  # the replica closed its store meanwhile: that was the build (invariant 1)

    def install(self, verified: bytes) -> Any:
        """The session verified the new store: swap it in (store.swap), return it (invariant 2)."""
        replica = self.replica
        if self._memory_old is not None:
            self._memory_old.close()
            self._memory_old = None
            store = replica.machine.store if replica.machine is not None else replica.store
        else:
            assert self._beside is not None and replica.machine is not None
            # Reopened with the config the session left (finish_repair put the stream's limits back).
            self._beside.open_store = _opener(replica.machine.store.config)
            store = self._beside.install(verified)
            log.info("stream %s on %s: the replacement store verified and is swapped in", replica.name,
                     replica.node_id)
        replica.store = store
        return store


def _opener(config: Any) -> Any:
    """Every record read and checked at open, the index not trusted: the background verifier has ended
    for this replica (fs_verify: a store that replaces another is empty or fully scanned), and the store
    swapped in is read back whole once, from its new place, before it serves."""
    def open_store(disk: Disk, path: str) -> FileStore:
        # Rolls on the store-roll thread, as `memory_stream.open_store`'s (store/fs_append.py invariant 3).
        return FileStore.open(disk.sub(path), config, use_index=False, background=store_jobs().submit)
    return open_store
