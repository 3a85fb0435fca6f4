"""`StreamReplica` (L5): one stream group here — store, state machine, Raft group, its `StreamLeader` and pump.

Owns: opening a replica (its store: the `streams/<name>/msgs` FileStore or a MemStore, `memory_stream`;
`config.json` with the raw config, `group` with the Raft group name, Raft WAL under `streams/<name>/raft`),
following leadership, coalescing publishes into `StreamLeader.decide` batches, and the leader-side
operations (delete, purge, config). Its repairs, audits and a memory store's loss are tasks of their own
(`stream_repair.RepairWorker`, `stream_audit.AuditRunner`, `memory_stream.MemoryLoss`).

Invariants:
  1. A `StreamLeader` exists only while this node leads, its term's NOOP has applied and every entry of
     its log has applied (nothing of an earlier leader is still in flight); it is dropped on any
     leadership change or failed proposal and rebuilt under the same conditions (stream/leader.py 4).
  2. Proposals are submitted one at a time under `_propose_lock`, in the order they were decided, each
     after the one before (`NodeRuntime.submit(after=...)`): an entry enters the log only behind its
     predecessor, in the same term, so the sequences a `decide` assigned are never overtaken or skipped.
     The chain restarts with each new `StreamLeader`. The pump does not wait for a batch to commit
     before it decides the next (`publish_pipeline`); the rare other proposals (CONFIG, DELETE, PURGE,
     EXPIRE) wait for their outcome under the lock, an AUDIT only for its submission (stream_audit 5).
  3. Publishes that arrive while the pump decides wait in `_queue` (bounded by `PUBLISHES_QUEUED_MAX`;
     beyond it a publish is refused with 503) and are decided together.
  4. A publish is answered with its sequence only after the entry carrying it applied here; a duplicate
     of a publish still in flight is answered as its original, once the original's entry applied
     (`publish_pipeline` invariants 2 and 3). Each is answered once, through its `done` callback.
  5. The group's config follows the meta assignment by version: while `config_index` (the meta log index
     that set `raw`) is above the machine's `config_meta_index`, the leader proposes CONFIG before deciding
     anything else — so an update survives a leader change between the meta apply and the proposal, and a
     new group's first entry fixes its config for every replica's replay.
  6. While a consumer this node cannot run exists (`stopped_reason`, PR #7158) the stream is stopped here:
     as leader it decides no publish (answered 10194), delivers nothing, proposes no expiry — only the
     consumer's deletion. The group still replicates what a leader that can run it commits (one log).

Imports: stdlib, L0, L1 (`disk`, `raft`, `jsapi`), L2 (`store`), L3 (`stream`), L3½ (`replica`), L4, trio, siblings.
Reference: DESIGN.md §2, §6; stream/machine.py lifecycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from jsraft.disk.base import Disk
from jsraft.errors import JsraftError
from jsraft.jsapi import StreamConfig
from jsraft.raft import NotLeader, RaftConfig, Role
from jsraft.runtime import NodeRuntime
from jsraft.runtime.locks import FastLock
from jsraft.runtime.proposals import Proposal
from jsraft.replica.advisories import AdvisoryLog
from jsraft.server.groups.consumer_service import ConsumerService
from jsraft.server.errors import RemoteError, StreamRestoreRace
from jsraft.server.groups.first_election import FirstElection
from jsraft.replica.publish_pipeline import BatchAnswers, Done, InFlightBatches, Queued
from jsraft.replica.install_mark import AuditMark, InstallMark
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.server.groups.stream_audit import AuditRunner
from jsraft.server.groups.stream_config_follow import ConfigFollowing
from jsraft.server.groups.stream_options import StreamOptions, snapshot_pace
from jsraft.server.groups.stream_repair import CallPeer, RepairWorker, no_peers
from jsraft.server.groups.stream_republish import attach_republisher
from jsraft.replica.stream_events import leader_elected
from jsraft.server.groups.versioning import OfflineWarnings, StoppedWatch
from jsraft.server.groups.stream_members import check_members, loop_may_sleep
from jsraft.replica.stream_leading import leader_ready
from jsraft.server.groups.memory_stream import MemoryLoss, start_store_tasks
from jsraft.server.groups.stream_format import ReplicaFiles, open_files, open_replica_files
from jsraft.stream import ApiError, ApplyResult, PubOutcome, StreamLeader, StreamStateMachine
from jsraft.stream.batches import node_budget

log = logging.getLogger("jsraft.server.stream")

PUBLISHES_QUEUED_MAX = 65536
DECIDE_BATCH_MAX = 4096  # publishes per decide: bounds the work of one pump turn
MEMBERS_EVERY_TICKS = 5  # how often the leader steps membership toward the assignment (and a leaver checks)
LEADER_RECHECK_S = 0.005  # `wait_leader` also looks this often (a change outside a cycle: the replica closing)


def api_error(error: ApiError) -> RemoteError:
    return RemoteError(error.code, error.err_code, error.description, "ApiError")


class StreamReplica(ConfigFollowing):
    def __init__(self, *, node_id: str, name: str, group: str, config: StreamConfig, raw: bytes,
                 peers: tuple[str, ...], disk: Disk, runtime: NodeRuntime, raft_config: RaftConfig,
                 config_index: int = 0, bootstrap: bool = True, options: StreamOptions | None = None,
                 call_peer: CallPeer | None = None, advisories: AdvisoryLog | None = None,
                 offline_warnings: OfflineWarnings | None = None) -> None:
        self.node_id, self.name, self.group = node_id, name, group
        self.options = options or StreamOptions()
        call_peer = call_peer or no_peers  # repairs (stream_repair) and audits (stream_audit) go over `$rpc`
        advisories = advisories if advisories is not None else AdvisoryLog(node_id)
        self.repair = RepairWorker(self, call_peer=call_peer, advisories=advisories, options=self.options)
        self.audit = AuditRunner(self, call_peer=call_peer, advisories=advisories, options=self.options)
        self.peers = peers  # the assignment's peers: the group's voters, once its leader has made them so
        # Start the group with `peers` as its first voters (a new group); else join blank and be added.
        self.bootstrap = bootstrap
        self.leaving = False  # the assignment no longer has this node: run until the group let us go
        self.left = trio.Event()
        self._members_task = False
        self.disk = disk
        self.runtime = runtime
        self.raft_config = raft_config
        self.config, self.raw = config, raw
        # The meta log index that set `raw` (invariant 5): the leader makes the group's config catch up.
        self.config_index = config_index
        self._config_task = False
        self.store: Any = None
        self.machine: StreamStateMachine | None = None
        self.adapter: StreamAdapter | None = None
        self.leader: StreamLeader | None = None
        # Wall-clock time this node took over as leader (its first StreamLeader of this Raft leadership):
        # stream info's `cluster.leader_since`; None while it does not lead.
        self.leader_since_ns: int | None = None
        self._advised_term = 0
        self._queue: list[Queued] = []
        self._batches = InFlightBatches(lambda: RemoteError(
            503, 10008, "publish outcome unknown: its entry did not apply here", "OutcomeUnknown"))
        self._chain: Proposal | None = None  # the last proposal submitted (invariant 2)
        self._queue_event = trio.Event()
        self._propose_lock = FastLock()  # free on nearly every publish: taken without a scheduling point
        self.scope = trio.CancelScope()
        self.closed = False
        self.consumers = ConsumerService(self)  # its consumers, led while this node leads (DESIGN §7)
        # Invariant 6: a consumer this node cannot run (its API level, its config) stops the stream here.
        self.stopped = StoppedWatch(name, node_id, self.options.api_level, offline_warnings, advisories.queue)
        self.memory_loss = MemoryLoss(self, call_peer=call_peer, options=self.options)  # a memory store lost

    # --- Opening and closing ----------------------------------------------------------------------

    async def open(self, assigned_index: int = 0, files: ReplicaFiles | None = None) -> None:
        """Recover the store and WAL (`files`: `stream_format.open_files`'s, else opened here), open the group."""
        if files is None:
            files = await trio.to_thread.run_sync(open_files, self.disk, self.config, lambda: open_replica_files(
                self.disk, self.group, self.config, self.raw, self.options), self.runtime, self.group, assigned_index)
        self.store, lost = files.store, files.memory_lost  # memory_stream rule 2: its messages are gone
        try:  # the WAL is the group's once `open_group` returned; closed here if it never got there
            self.machine = StreamStateMachine(self.store, self.config, self.raw)
            pace = snapshot_pace(self.options, lambda: self.runtime.request_snapshot(self.group))
            self.adapter = StreamAdapter(self.machine, on_audit=self.audit.on_applied_report, on_change=self.repair.wake,
                                         install_mark=InstallMark(self.disk), audit_mark=AuditMark(self.disk), pace=pace)
            attach_republisher(self)  # the stream's `republish`, sent through the node's client port
            if lost:
                self.memory_loss.mark()  # before the replay: no entry may write into the lost store
            await self.runtime.open_group(self.group, voters=self.peers if self.bootstrap else None, peers=self.peers,
                                          state_machine=self.adapter, raft_config=self.raft_config,
                                          disk=self.disk.sub("raft"), assigned_index=assigned_index,
                                          snapshot_every_entries=self.options.snapshot_every_entries, storage=files.storage)
        except BaseException:
            files.storage[0].close()
            raise
        if lost:
            self.memory_loss.mark()  # again: restoring this replica's own snapshot left a plan or none
        self.adapter.recovery_target = self.runtime.status(self.group).raft.last_index
        self.adapter.check_recovery()
        self.first_election = FirstElection(self.runtime, self.group, self.node_id,
                                            self.peers if self.bootstrap else (), self.raft_config.election_ticks)

    async def close(self, *, close_group: bool = True, close_store: bool = True) -> None:
        """Stop the replica's tasks; close its Raft group (unless the runtime already stopped) and its
        store (unless the node is being killed: a crash closes nothing)."""
        self.closed = True
        self.scope.cancel()
        self._fail_queue(NotLeader(None))
        if close_group and self.group in self.runtime.group_names():
            await self.runtime.close_group(self.group)
        if close_store and self.store is not None:
            self.store.close()

    # --- Leadership ---------------------------------------------------------------------------------

    @property
    def stopped_reason(self) -> str | None:
        """Why this stream is stopped on this node (invariant 6), or None while it runs."""
        return self.stopped.reason(self.adapter.consumers.consumers if self.adapter is not None else None)

    def leader_id(self) -> str | None:
        """The group's leader as this node knows it; O(1): publishes ask it for every message."""
        try:
            return self.runtime.leader_id(self.group)
        except JsraftError:
            return None

    def _leader_ready(self) -> bool:
        status = self.runtime.status(self.group).raft
        return self.adapter is not None and leader_ready(
            is_leader=status.role is Role.LEADER, noop_term=self.adapter.noop_term, current_term=status.current_term,
            applied_index=status.applied_index, last_index=status.last_index, machine=self.machine)

    def _follow_leadership(self) -> None:
        """Drop or build the StreamLeader (invariant 1); called every tick and before each decision."""
        if self.closed:
            return
        # O(1) role check first: this runs before every publish decision (no full status build).
        if not self.runtime.is_leader(self.group):
            if self.leader is not None:
                log.info("stream %s: %s no longer leads", self.name, self.node_id)
                self.leader.batch_stager.close()  # its open batches leave the node's budget now
            self.leader = None
            self.leader_since_ns = None
            if self._queue:
                self._fail_queue(NotLeader(self.runtime.leader_id(self.group)))
        elif self.leader is None and self._leader_ready():
            assert self.machine is not None
            self.leader = StreamLeader(self.machine, batch_budget=node_budget(self.runtime))
            if self.leader_since_ns is None:  # kept while Raft leadership is (an audit may rebuild the leader)
                self.leader_since_ns = time.time_ns()
            # All the log applied; what is still queued of the old chain has a failed predecessor: dropped.
            self._chain = None
            self.runtime.ticker.release(self.group)  # the audit and expiry tasks' pauses end: a new term
        self.consumers.follow(self.leader)  # built and dropped with the StreamLeader (O(1) otherwise)

    async def run(self) -> None:
        """Leadership following and the publish pump, until closed; a turn per node tick (`Ticker.next_tick`)."""
        with self.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump)
                nursery.start_soon(self.repair.run)
                nursery.start_soon(self.audit.run)
                nursery.start_soon(self.consumers.run)
                start_store_tasks(self, nursery)
                ticks = 0
                while True:
                    self.first_election.tick()
                    self._follow_leadership()
                    self.stopped.note(self.adapter.consumers.consumers if self.adapter is not None else None)
                    self._advise()
                    if self._config_due() and not self._config_task:
                        self._config_task = True
                        nursery.start_soon(self._reconcile_task)
                    ticks += 1
                    if ticks % MEMBERS_EVERY_TICKS == 0:
                        check_members(self, nursery)
                    await self.runtime.ticker.next_tick()  # the node's tick, not a deadline of its own
                    if loop_may_sleep(self):
                        await self.runtime.ticker.wait_awake(self.group)  # a quiesced group: nothing changes

    def _advise(self) -> None:
        """nats-server's stream leader elected advisory (once per term this node leads a replicated stream),
        then whatever the apply path raised (advisories invariant 3)."""
        if self.leader is not None and len(self.peers) > 1:
            status = self.runtime.status(self.group).raft
            if status.current_term != self._advised_term:
                self._advised_term = status.current_term
                self.repair.advisories.queue(*leader_elected(self.name, self.node_id, self.peers, status.voters))
        self.repair.advisories.flush()

    async def wait_leader(self, timeout_s: float) -> StreamLeader:
        """The `StreamLeader` once this node may lead (invariant 1); `NotLeader` as soon as it does not lead
        the group, or when `timeout_s` passed first. What it waits for — the term's NOOP applied, the log
        applied — changes only in a Ready cycle, so it looks again after each cycle (`runtime.progress`),
        not on a poll: a new stream's create answer waits for exactly its first cycle, no longer."""
        self._follow_leadership()
        if self.leader is not None:
            return self.leader

        def settled() -> bool:
            self._follow_leadership()
            return self.leader is not None or not self.runtime.is_leader(self.group)

        await self.runtime.progress.until(settled, timeout_s, recheck_s=LEADER_RECHECK_S)
        if self.leader is not None:
            return self.leader
        raise NotLeader(self.leader_id())

    # --- Publishing ---------------------------------------------------------------------------------

    async def publish(self, subject: str, headers: bytes, payload: bytes) -> PubOutcome:
        """Queue one publish for the next decision; wait for its outcome (invariant 4)."""
        self._follow_leadership()
        if self.leader is None:
            await self.wait_leader(1.0)
        slot: list[Any] = [trio.Event(), None]

        def done(answer: Any) -> None:
            slot[1] = answer
            slot[0].set()

        self.enqueue(subject, headers, payload, done)
        await slot[0].wait()
        if isinstance(slot[1], BaseException):
            raise slot[1]
        return slot[1]

    def can_enqueue(self) -> bool:
        """Whether `enqueue` would take a publish now: this node leads and its `StreamLeader` is built."""
        self._follow_leadership()  # O(1) unless this node leads and its StreamLeader is not built yet
        return self.leader is not None and not self.closed

    def enqueue(self, subject: str, headers: bytes, payload: bytes, done: Done) -> None:
        """Queue one publish for the next decision, with no task of its own: `done(answer)` is called
        once with its `PubOutcome` or an exception (invariant 4). Raises, without queueing, when the
        queue is full (invariant 3). Queue only after `can_enqueue()` or `wait_leader()` said so."""
        if len(self._queue) >= PUBLISHES_QUEUED_MAX:
            raise RemoteError(503, 10008, "too many publishes waiting for the stream leader", "Busy")
        self._queue.append((subject, headers, payload, done))
        self._queue_event.set()

    def _fail_queue(self, error: BaseException) -> None:
        queue, self._queue = self._queue, []
        for _, _, _, done in queue:
            done(error)

    async def _pump(self) -> None:
        while True:
            await self._queue_event.wait()
            self._queue_event = trio.Event()
            while self._queue:
                batch, self._queue = self._queue[:DECIDE_BATCH_MAX], self._queue[DECIDE_BATCH_MAX:]
                await self._decide_and_propose(batch)

    async def _decide_and_propose(self, batch: list[Queued]) -> None:
        """Decide `batch` and submit its entries; the answers come when they settle (publish_pipeline)."""
        async with self._propose_lock:
            self._follow_leadership()
            if self.leader is None:
                self._settle(batch, [NotLeader(self.leader_id())] * len(batch))
                return
            try:
                await self.reconcile_config()  # publishes are decided under the config meta accepted
            except JsraftError as error:
                self._settle(batch, [error] * len(batch))
                return
            # Timestamps come from the node's steady wall clock (its steps slewed: runtime/clock.py invariant 3).
            opened = self._batches.decide_and_open(self.leader, batch, self.runtime.clock.wall_ns(),
                                                   leader_id=self.leader_id(), stopped_reason=self.stopped_reason)
            if opened is None:
                return  # refused whole (no leader, or stopped here: invariant 6); every publish answered
            answers, entries = opened
            failure: JsraftError | None = None
            for entry in entries:
                answers.entries_open += 1
                try:
                    await self._submit(entry, lambda proposal: self._entry_settled(answers, proposal))
                except JsraftError as error:
                    answers.entries_open -= 1
                    self.leader = None  # its in-flight view is now wrong (invariant 1)
                    failure = error
                    break
            self._batches.close(answers, failure)

    def _entry_settled(self, answers: BatchAnswers, proposal: Proposal) -> None:
        if proposal.error is not None:
            self.leader = None  # its in-flight view is now wrong (invariant 1)
        self._batches.settled(answers, proposal.error, proposal.result)

    async def _submit(self, entry: bytes, on_settled: Callable[[Proposal], None] | None = None) -> Proposal:
        """Under `_propose_lock`: submit `entry` after this replica's previous proposal (invariant 2)."""
        proposal = await self.runtime.submit(self.group, entry, after=self._chain, on_settled=on_settled)
        self._chain = proposal
        return proposal

    def _settle(self, batch: list[Queued], answers: list[Any]) -> None:
        for (_, _, _, done), answer in zip(batch, answers):
            done(answer)

    # --- Other leader operations -------------------------------------------------------------------

    async def propose_entry(self, entry: bytes, *, expect_last_seq: int | None = None) -> object:
        """Propose an entry the StreamLeader made outside a decision (an EXPIRE, a restored MSGS run), in
        order (invariant 2). `expect_last_seq`: refuse (`StreamRestoreRace`) unless the stream's last
        sequence, counting in-flight proposals, is that — checked under the lock, so no publish decided
        before it can take the sequences the entry carries."""
        async with self._propose_lock:
            if self.leader is None:
                raise NotLeader(self.leader_id())
            if expect_last_seq is not None and self.leader.last_seq != expect_last_seq:
                raise StreamRestoreRace(f"restore failed: the stream's last sequence is {self.leader.last_seq}, "
                                        f"not {expect_last_seq} (was it written to during the restore?)")
            try:
                return await self.runtime.outcome(self.group, await self._submit(entry))
            except JsraftError:
                self.leader = None  # its in-flight view is now wrong (invariant 1)
                raise

    async def propose_op(self, make: str, *args: Any, **kwargs: Any) -> ApplyResult:
        """Decide and propose a DELETE / PURGE / CONFIG through the StreamLeader (invariant 2)."""
        await self.wait_leader(2.0)
        async with self._propose_lock:
            leader = self.leader
            if leader is None:
                raise NotLeader(self.leader_id())
            return await self._propose_decided(getattr(leader, make)(*args, **kwargs))

    async def _propose_decided(self, proposal: Any) -> Any:
        """Under `_propose_lock`: propose one `LeaderProposal`; its refusal, or the applied entry's, raised."""
        if proposal.error is not None:
            raise api_error(proposal.error)
        try:
            result = await self.runtime.outcome(self.group, await self._submit(proposal.entry))
        except JsraftError:
            self.leader = None  # its in-flight view is now wrong (invariant 1)
            raise
        if isinstance(result, ApplyResult) and result.error is not None:
            raise api_error(result.error)
        return result

