"""Memory streams in the running node: their store, and the rule for a replica that restarted without its
messages (layer L5).

Owns: `open_store` (a `MemStore` for `storage: memory`, else the `FileStore` under `msgs/`, after finishing
or undoing a repair's store swap a crash interrupted: `store.swap.recover_swap`),
`start_store_tasks` (the store's background work: none for a store with no message, as a new stream's) and `MemoryLoss`, the task that decides when a memory
stream's lost messages are lost for good.

Rules (DESIGN §8; nats-server keeps a memory stream's messages only in the process too):
  1. A memory replica's Raft log and hard state stay on disk like any group's: a publish is acknowledged
     once a majority fsynced its entry, and votes survive a restart. Its messages live only in the
     process: nothing is written under `msgs/`.
  2. A memory replica that opens over a group that ran here before (its `raft/` directory exists) holds
     none of its messages: `StreamAdapter.mark_store_lost`. The WAL replay then moves only the group
     position; the replica is `repairing`, so it neither serves reads nor leads (`can_lead` is False and a
     Raft leadership is handed over, stream_repair invariant 4), and the audit takes no report from it.
  3. It becomes current by the ordinary resync from the stream leader (snapshot, then range catch-up):
     a minority restart loses nothing, since the replicas that kept running still hold every message.
  4. The loss is accepted only when no replica holds the messages: this node leads the group's Raft log
     (so it applied what the log committed), its own store is lost, and every other peer of the
     assignment answered `replica.state` with `store_lost` true. Then the stream goes on empty at the
     log's position (first_seq = last_seq + 1: no sequence is handed out twice) and the other replicas
     resync from it. A peer that does not answer may hold the messages: no acceptance while one is silent.
  5. A lost replica that leads hands the leadership to a current peer (this task, not stream_repair's
     step-down, decides for a lost replica: the step-down would hand a full loss round and round).

Imports: stdlib, L0, L1 (`disk`, `jsapi`, `raft`), L2 (`store`), L3 (`stream`), L4 (`runtime.workers`: the
store-roll thread), trio, sibling `stream_options`.
Reference: nats-server `server/memstore.go`, `jetstream_cluster.go` (createRaftGroup: a memory stream's
messages are in memory only).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from jsraft.disk.base import Disk
from jsraft.errors import JsraftError
from jsraft.jsapi import StreamConfig
from jsraft.jsapi import StorageType
from jsraft.raft.status import Role
from jsraft.runtime.workers import store_jobs
from jsraft.server.groups.stream_options import StreamOptions
from jsraft.store.base import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.store.fs_verify import settle, verify_in_background
from jsraft.store.memstore import MemStore
from jsraft.store.swap import recover_swap
from jsraft.stream import Finding, FindingKind, Health

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.stream")

STORE_DIR = "msgs"


def is_memory(config: StreamConfig) -> bool:
    return config.storage is StorageType.memory


def open_store(disk: Disk, config: StreamConfig, store_config: StoreConfig) -> Any:
    """The replica's store (rule 1): in memory, or the FileStore under `msgs/` (opened from its index when
    that checks, the rest verified in the background: `store/fs_verify.py`)."""
    if is_memory(config):
        return MemStore(store_config)
    recover_swap(disk, STORE_DIR)  # a repair's swap a crash interrupted: completed or undone (store/swap.py)
    # A block roll's fsyncs run on the store-roll thread, not on the event loop (store/fs_append.py inv. 3).
    return FileStore.open(disk.sub(STORE_DIR), store_config, background=store_jobs().submit)


def start_store_tasks(replica: "StreamReplica", nursery: trio.Nursery) -> None:
    """The store's own background work: a lost memory store waits for its loss to be settled
    (`MemoryLoss`); a FileStore opened from its index is verified block by block, not while the log
    replays (it would compete with the replay for the interpreter; every read is CRC-checked meanwhile)."""
    if is_memory(replica.config):
        if replica.memory_loss.lost:
            nursery.start_soon(replica.memory_loss.run)
        return
    store = replica.store
    if store.state().msgs == 0:
        # No message: the blocks' verification reads nothing (`settle` without a region reads record by
        # record, and there is none), so it is done here, with no task and no worker-thread call.
        for number, limit in list(store.unverified.items()):
            settle(store, number, limit, None)
    if not store.unverified:
        return
    nursery.start_soon(verify_in_background,
                       lambda: replica.store if replica.machine is not None and not replica.machine.replaying else None,
                       trio.to_thread.run_sync, trio.sleep, replica.repair.wake)


class MemoryLoss:
    """Rules 2 and 4 for one memory replica; `lost` is what `replica.state` reports as `store_lost`."""

    def __init__(self, replica: "StreamReplica", *, call_peer: Any, options: StreamOptions) -> None:
        self.replica = replica
        self.call_peer = call_peer
        self.interval_s = options.tick_s * 5  # a few ticks: well inside an election timeout
        self.rpc_timeout_s = options.rpc_timeout_s
        self.lost = False
        self.accepted = 0  # losses this node accepted (rule 4)

    def mark(self) -> None:
        """Rule 2: the replica reopened without its messages."""
        adapter = self.replica.adapter
        assert adapter is not None
        self.lost = True
        adapter.mark_store_lost(Finding(kind=FindingKind.memory_lost, detail=(
            "memory storage: the messages were held by the process that stopped")))

    async def run(self) -> None:
        """Until the replica holds its messages again; a store is lost only at open, so this task ends."""
        while self.lost:
            await trio.sleep(self.interval_s)
            machine = self.replica.machine
            if machine is None:
                continue
            if machine.health is Health.current:
                self.lost = False  # a resync from a peer made it whole (rule 3)
                return
            if not self._may_decide():
                continue
            holder = await self._holder()
            if holder is None and self._may_decide():
                self._accept()
            elif holder and self._may_decide():
                self.replica.repair.hand_over(holder, "its memory store lost the messages")  # rule 5

    def _may_decide(self) -> bool:
        replica, adapter = self.replica, self.replica.adapter
        if adapter is None or replica.machine is None or replica.closed or not self.lost:
            return False
        if replica.machine.replaying or adapter.resync_pending is not None or adapter.plan is not None:
            return False  # a peer's copy is on its way, or the replay has not reached the log's end
        try:
            status = replica.runtime.status(replica.group).raft
        except JsraftError:
            return False
        return (status.role is Role.LEADER and status.applied_index >= status.last_index
                and adapter.noop_term == status.current_term)

    async def _holder(self) -> str | None:
        """None when every other peer answered that it lost the messages too (rule 4); else a current peer
        to hand the leadership to, or "" when some peer is silent or not current either."""
        replica = self.replica
        silent = False
        for peer in replica.peers:
            if peer == replica.node_id:
                continue
            try:
                answer, _ = await self.call_peer(peer, "replica.state", {"stream": replica.name},
                                                 timeout_s=self.rpc_timeout_s)
            except JsraftError:
                silent = True  # a silent peer may hold them (rule 4)
                continue
            if not isinstance(answer, dict) or answer.get("store_lost") is not True:
                if isinstance(answer, dict) and answer.get("health") == str(Health.current):
                    return peer
                silent = True
        return "" if silent else None

    def _accept(self) -> None:
        replica = self.replica
        assert replica.adapter is not None and replica.machine is not None
        replica.adapter.accept_store_loss()
        self.lost = False
        self.accepted += 1
        log.warning("stream %s: no replica holds its messages (memory storage, every replica restarted): "
                    "%s goes on empty after sequence %d", replica.name, replica.node_id, replica.machine.last_seq)
