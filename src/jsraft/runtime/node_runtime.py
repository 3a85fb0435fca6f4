"""`NodeRuntime`: the trio driver for every Raft group on one node (layer L4).

Owns: the group table, the ready loop with its group commit, and the public API the server and the
transport use (`open_group`, `deliver`, `deliver_beat`, `propose`, `submit`, `outcome`, `propose_conf_change`,
`transfer_leadership`, `stand_aside`, `request_snapshot`, `accept_data_loss`, `status`, `leader_id`,
`is_leader`, `close_group`, `run`). The one ticker for all groups is `self.ticker` (`ticker.Ticker`: `wait_awake`).
Per-group inputs are in `group`; the cycle itself (what is persisted, sent and applied, in which order)
is `replica.cycle.GroupCycle`, shared with the simulator; `persist` runs its disk half on worker threads.

The ready loop, one cycle at a time:
  1. Collect: from every group that got an input since it was last looked at and has pending work, take
     its `Ready` (and an own snapshot when one is due). Those groups are now busy: inputs for them wait
     (see `group`, invariant 1).
  2. Persist: all of the cycle's writes, then one fsync per touched file, on the node's worker threads
     (`workers`; at most `fsync_threads_max` at once, each a share of the groups), or inline when one
     group's cycle is all the node has to do (`persist` invariant 6). Proposals and messages arriving
     meanwhile go into the NEXT cycle — group commit: one fsync covers all that came during the last.
     Groups with nothing to write (heartbeats, a commit-hint change, applying entries already durable
     here) skip this step and are finished before the others' fsync.
  3. Only after the fsyncs returned: send each group's messages; let the transport write them (a
     follower's acknowledgement goes before its apply); apply each group's committed entries (settling
     proposals with the state machine's results), `advance()`, and feed it what waited.

Backpressure: each group admits at most `proposals_in_flight_max` proposals that have not settled;
`propose` waits for a free slot (cancellable). Inboxes of messages that arrive while a group is busy are
bounded too (a full one drops: Raft retransmits). No queue in the runtime grows without bound.

Pipelining: `submit` returns once a proposal is in the core's log or queued for it, so one task can keep
many in flight (their outcomes come to `on_settled` callbacks, or `outcome`), and they share cycles.
`submit(after=p)` makes a proposal depend on an earlier one: it is dropped instead of proposed unless `p`
is in the log in the current term (`Proposal.chain_intact`), so a chain never enters the log with a gap.

Shutdown: cancel `run()`. A worker thread that is writing or fsyncing is waited for (never abandoned,
`workers` invariant 2; its cycle may complete, giving its proposals their real outcome); then every group
is closed: waiting proposals settle with `GroupClosed`, later calls get `GroupClosed`, the WALs close.
Nothing a restart needs is lost: what was fsynced is recovered, and nothing that depends on unfsynced
state was ever sent.

Invariants:
  1. No message of a `Ready` is sent before the fsync covering it returned, but a leader's (`Ready.send_first`).
  2. A proposal returns a result only after its entry was applied here, which requires it to be
     committed, which requires a majority (this node included, for a leader) to have fsynced it.
  3. One ticker paces every group from `clock.monotonic()`; wall time never reaches the Raft cores. Missed
     ticks are dropped, not replayed: a stalled event loop delays elections instead of firing them at once.
  4. With `send_beat`, idle groups quiesce (`quiesce`, `ticker`): only awake groups are ticked, plus one
     node beat per peer per tick; any input but a heartbeat's answer, or a lapsed peer, wakes a group.

Imports: L0, L1 (`raft`, `disk`), L2 (`wal`), L3½ (`replica`), siblings, trio, stdlib. Never `transport` (a
sibling in L4): the transport calls `deliver`/`deliver_beat`; the runtime calls the `send`/`send_beat` given.
Reference: DESIGN.md §2 (write path), §11 tier 3, §12 (group commit); etcd-io/raft `node.go`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from jsraft.disk.base import Disk
from jsraft.errors import BadRequest, InvariantViolation, invariant
from jsraft.raft.config import RaftConfig
from jsraft.raft.core import RaftNode
from jsraft.raft.membership import ConfChange
from jsraft.raft.messages import Message
from jsraft.raft.status import Role
from jsraft.runtime.clock import Clock
from jsraft.runtime.errors import GroupClosed, GroupExists, GroupNotFound
from jsraft.runtime.group import GROUP_NAME, Group, GroupStatus, SendFn
from jsraft.replica.persist import Work, marker_contents
from jsraft.replica.restore import prepare
from jsraft.replica.state_machine import StateMachine
from jsraft.runtime.group_record import GroupRecord
from jsraft.runtime.persist import CyclePersister, ceiling_fn, open_storage, sends_after_persist, started_fn, vote_ceiling
from jsraft.runtime.progress import Progress
from jsraft.runtime.proposals import Proposal, ProposalBook
from jsraft.runtime.quiesce import Quiescence, SendBeatFn
from jsraft.runtime.ticker import Ticker
from jsraft.runtime.workers import WorkerThreads
from jsraft.wal import SEGMENT_BYTES_DEFAULT, Recovered, Wal

log = logging.getLogger(__name__)

# Runs blocking work off the trio thread (`await run_in_worker(fn, *args)`): trio's, a limited one, or a test's.
WorkerFn = Callable[..., Awaitable[Any]]


class NodeRuntime:
    """Drives the Raft groups of node `node_id`. Use from one trio run; call `run()` to make it go."""

    def __init__(self, node_id: str, disk: Disk, clock: Clock, rng: random.Random, send: SendFn, *,
                 tick_ms: int = 100, proposals_in_flight_max: int = 1024, inbox_messages_max: int = 4096,
                 fsync_threads_max: int = 4, wal_segment_bytes: int = SEGMENT_BYTES_DEFAULT,
                 run_in_worker: WorkerFn | None = None, group_record: GroupRecord | None = None,
                 send_beat: SendBeatFn | None = None, liveness_ticks: int = 10, quiet_ticks: int = 3,
                 inline_persist: bool = True) -> None:
        invariant(tick_ms >= 1, "tick_ms is at least 1")
        invariant(proposals_in_flight_max >= 1 and inbox_messages_max >= 1, "bounds are positive")
        invariant(fsync_threads_max >= 1, "at least one fsync thread")
        self.node_id, self.disk, self.clock, self.tick_ms = node_id, disk, clock, tick_ms
        self.proposals_in_flight_max, self.inbox_messages_max = proposals_in_flight_max, inbox_messages_max
        self.fsync_threads_max, self.wal_segment_bytes = fsync_threads_max, wal_segment_bytes
        self._workers = None if run_in_worker else WorkerThreads(f"jsraft-fsync-{node_id}", fsync_threads_max)
        self._run_in_worker: WorkerFn = run_in_worker or trio.to_thread.run_sync  # opening storage (rare)
        self._persister = CyclePersister(run_in_worker or self._workers.run,  # type: ignore[union-attr]
                                         fsync_threads_max, inline=inline_persist and run_in_worker is None)
        self.group_record = group_record  # what this storage started; None: the group markers only
        self._rng, self._send = rng, send
        self._groups: dict[str, Group] = {}
        self.quiescence = None if send_beat is None else Quiescence(
            node_id, send_beat, timeout_ticks=liveness_ticks, quiet_ticks=quiet_ticks, rng=rng)
        self.ticker = Ticker(self.quiescence, self._groups, self._mark)  # the awake groups (invariant 4)
        # Groups with an input or a finished cycle since the ready loop looked: a cycle is O(active groups).
        self._dirty: dict[str, Group] = {}
        self._opening: set[str] = set()
        self._closed = self._running = self.observer = False  # observer: `stand_aside`
        self._wakeup = trio.Event()
        self.progress = Progress()  # set after every cycle: what waits for applies and leaders wakes then

    # --- Groups ---------------------------------------------------------------------------------

    async def open_group(self, name: str, *, voters: Sequence[str] | None, state_machine: StateMachine,
                         raft_config: RaftConfig | None = None, disk: Disk | None = None,
                         snapshot_every_entries: int | None = None, peers: Sequence[str] | None = None,
                         proposals_in_flight_max: int | None = None, assigned_index: int | None = None,
                         storage: tuple[Wal, Recovered, bool] | None = None) -> None:
        """Open (recover, or create) group `name` on this node. Storage is `disk` or `self.disk.sub(f"groups/{name}")`;
        `storage`: `open_storage`'s answer for it from the caller's worker thread (a hop less), closed by the
        caller if this raises. `voters`: the initial members if the group was never durably started here
        (`restore`), None for a member waiting to be added; `peers`: its voters (default `voters`), asked for
        their term after a double loss (`raft.term_query`). `assigned_index`: the meta index that assigned it
        here (None: meta). `snapshot_every_entries`: snapshot after that many applies."""
        if not GROUP_NAME.fullmatch(name):  # one path component; never "." or ".."
            raise BadRequest(f"invalid raft group name {name!r}")
        if self._closed:
            raise GroupClosed("the runtime is stopped")
        if name in self._groups or name in self._opening:
            raise GroupExists(name)
        config = raft_config if raft_config is not None else RaftConfig(node_id=self.node_id)
        invariant(config.node_id == self.node_id, "a group's raft config names this node")
        self._opening.add(name)
        try:
            # Recovery reads and may repair files: off the trio thread, like every other disk access.
            group_disk = disk if disk is not None else self.disk.sub(f"groups/{name}")
            wal, recovered, formatted = storage or await self._run_in_worker(
                open_storage, group_disk, name, self.wal_segment_bytes, self.group_record, assigned_index)
        finally:
            self._opening.discard(name)
        try:
            group = self._build_group(name, config, (voters, peers), state_machine, group_disk, wal, recovered,
                                      formatted, snapshot_every_entries, proposals_in_flight_max)
        except BaseException:
            wal.close()
            raise
        if self._closed:
            group.close("the runtime stopped while the group was opening")
            raise GroupClosed("the runtime is stopped")
        self._groups[name] = group
        self.ticker.opened(group)
        self._wake(group)

    def _build_group(self, name: str, config: RaftConfig, members: tuple[Sequence[str] | None, Sequence[str] | None],
                     state_machine: StateMachine, group_disk: Disk, wal: Wal, recovered: Recovered,
                     formatted: bool, snapshot_every_entries: int | None, proposals_in_flight_max: int | None) -> Group:
        restored = prepare(recovered, state_machine, voters=members[0], formatted=formatted,  # members: voters, peers
                           vote_ceiling=vote_ceiling(self.group_record, name), peers=members[1])
        node = RaftNode(config, random.Random(self._rng.getrandbits(64)), restored)
        node.observer = self.observer
        if recovered.reasons:
            log.warning("group %s: recovery findings: %s", name, "; ".join(recovered.reasons))
        book = ProposalBook(proposals_in_flight_max or self.proposals_in_flight_max)
        return Group(name=name, node=node, wal=wal, disk=group_disk, state_machine=state_machine, book=book,
                     marker=None if formatted else marker_contents(name, self.node_id),
                     snapshot_every_entries=snapshot_every_entries, inbox_messages_max=self.inbox_messages_max,
                     on_started=started_fn(self.group_record, name), on_term=ceiling_fn(self.group_record, name))

    async def close_group(self, name: str) -> None:
        """Close group `name` here: refuse new work, wait for its in-flight fsync, close its WAL."""
        group = self._groups.get(name)
        if group is None:
            raise GroupNotFound(name)
        # Out of future cycles; a cycle holding it finishes with it, so its proposals settle where they can.
        group.closing = True
        while group.busy:
            await group.idle.wait()
        group.close("closed by close_group")
        if self._groups.get(name) is group:
            del self._groups[name]
            self.ticker.closed(name)

    def group_names(self) -> list[str]:
        return sorted(self._groups)

    def _group(self, name: str) -> Group:
        group = self._groups.get(name)
        if group is None:
            raise GroupNotFound(name)
        return group

    # --- Inputs ---------------------------------------------------------------------------------

    def deliver(self, group_name: str, message: Message) -> bool:
        """A Raft message from a peer (any transport). False: dropped (unknown or closed group, or its
        inbox is full). Raises `PeerProtocolError` for a malformed message: drop that link."""
        group = self._groups.get(group_name)
        if group is None or self._closed:
            return False
        awake = self.ticker.wakes(group, message)
        accepted = group.deliver(message)
        if accepted:  # a heartbeat's answer to a quiesced leader is stepped, but it stays quiet
            self._wake(group) if awake else self._mark(group)
        return accepted

    def deliver_beat(self, from_node: str, payload: bytes | memoryview) -> None:
        """A peer's node beat (`quiesce`; ignored without it). Raises `BadBeat` if malformed: drop the link."""
        if not self._closed:
            self.ticker.on_beat(from_node, payload)

    async def propose(self, group_name: str, data: bytes) -> object:
        """Propose `data` as one entry of `group_name`; return the state machine's result for it.

        Returns once the entry is committed and applied on this node. Raises `NotLeader` (with the known
        leader's id, possibly None) when this node does not lead the group, at the call or later if its
        entry was replaced by a new leader's (then it never committed); `ProposalDropped` when the
        leader cannot take it; `GroupClosed` / `OutcomeUnknown` when it may or may not have committed.
        Waits while `proposals_in_flight_max` proposals are unsettled (backpressure). Cancellable: the
        entry may still commit, and it keeps its slot until it does or is known lost.
        """
        if self._closed:
            raise GroupClosed("the runtime is stopped")
        group = self._group(group_name)
        return await group.propose(bytes(data), lambda: self._wake(group))

    async def submit(self, group_name: str, data: bytes, *, after: Proposal | None = None,
                     on_settled: Callable[[Proposal], None] | None = None) -> Proposal:
        """Propose `data` like `propose`, but return once the entry is in the core's log or queued for it
        — in the order of the calls from one task — without waiting for its outcome: that comes to
        `on_settled(proposal)` (called synchronously when it settles, from the ready loop: it must not
        block, and an exception from it stops the group like the state machine's) and to
        `await outcome(proposal)`. Raises `NotLeader` and `GroupClosed` at once; waits for a free slot
        like `propose`. With `after`, the proposal depends on that earlier one: if `after` is not in
        the log in the current term when this one reaches the core, this one is dropped
        (`ProposalDropped`) instead of entering the log (`Proposal.chain_intact`)."""
        if self._closed:
            raise GroupClosed("the runtime is stopped")
        group = self._group(group_name)
        return await group.submit(bytes(data), lambda: self._wake(group), after=after, on_settled=on_settled)

    async def outcome(self, group_name: str, proposal: Proposal) -> object:
        """The outcome of a `submit`ted proposal: its result, or its error raised (see `propose`)."""
        return await self._group(group_name).outcome(proposal)

    async def propose_conf_change(self, group_name: str, change: ConfChange) -> object:
        """Propose a single-server membership change (add a learner, promote it, remove a member) and
        wait until it is applied here, like `propose`; also raises `BadConfChange` when it does not
        apply, and `ProposalDropped` while another change is in progress or a learner lags."""
        if self._closed:
            raise GroupClosed("the runtime is stopped")
        group = self._group(group_name)
        return await group.propose(b"", lambda: self._wake(group), change)

    def transfer_leadership(self, group_name: str, to: str) -> None:
        """Ask this node, the leader, to hand `group_name`'s leadership to voter `to`."""
        self._wake(self._group(group_name), lambda group: group.transfer_leadership(to))

    def campaign(self, group_name: str) -> None:
        """Have this node stand for election in `group_name` now (a new group's named first leader)."""
        self._wake(self._group(group_name), Group.campaign)

    def request_snapshot(self, group_name: str) -> None:
        """Snapshot the state machine and compact the log at the next cycle (when the core allows)."""
        self._wake(self._group(group_name), Group.request_snapshot)

    def stand_aside(self) -> None:
        """Lame duck mode: every core here, and each opened later, is an observer (`raft.core` invariant 6)."""
        self.observer = True
        for group in self._groups.values():
            group.node.observer = True

    async def accept_data_loss(self, group_name: str) -> tuple[GroupStatus, GroupStatus] | None:
        """Rule 4's operator override, between cycles (`Group.accept_data_loss`); the next cycle persists it."""
        group = self._group(group_name)
        return await group.accept_data_loss(lambda: self._wake(group))

    def status(self, group_name: str) -> GroupStatus:
        return self._group(group_name).status()

    def leader_id(self, group_name: str) -> str | None:
        """The leader `group_name`'s core knows of (this node's id when it leads), or None; O(1), unlike
        `status`, for callers on a per-message path. Raises `GroupNotFound`."""
        return self._group(group_name).node.leader_id

    def is_leader(self, group_name: str) -> bool:
        """Whether this node leads `group_name` now; O(1). Raises `GroupNotFound`."""
        return self._group(group_name).node.role is Role.LEADER

    def _wake(self, group: Group, act: Callable[[Group], None] | None = None) -> None:  # an input (`act`'s
        if act is not None:  # first): look at the group next cycle, tick it if it was quiesced
            act(group)
        self._mark(group)
        self.ticker.wake(group)

    def _mark(self, group: Group) -> None:
        self._dirty[group.name] = group
        self._wakeup.set()

    # --- Running --------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tick and drive every group until cancelled; then shut down cleanly (module docstring)."""
        invariant(not self._running and not self._closed, "a runtime runs once")
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.ticker.run, self.clock, self.tick_ms / 1000)
                nursery.start_soon(self._ready_loop)
                task_status.started()
        finally:
            # Both tasks ended: no worker thread (none is abandoned) is left to touch a WAL as groups close.
            self._closed = True
            for group in self._groups.values():
                group.close("the runtime stopped")
            if self._workers is not None:
                self._workers.close()

    async def _ready_loop(self) -> None:
        while True:
            # A fresh event before looking for work, so a wake-up during the look is not lost.
            self._wakeup = trio.Event()
            batch = self._collect()
            if not batch:
                await self._wakeup.wait()
                self._persister.yielded()
                continue
            await self._cycle(batch)
            self.progress.notify()

    def _collect(self) -> list[tuple[Group, Work]]:
        """Step 1 of the cycle: the work of every dirty group that has some."""
        candidates, self._dirty = self._dirty, {}
        batch = []
        for group in candidates.values():
            # A busy group is looked at again when its cycle finishes (`_finish` marks it dirty).
            if not group.has_work():
                continue
            try:
                batch.append((group, group.take_work()))
            except InvariantViolation:
                raise
            except Exception as error:  # the state machine's snapshot() failed: this group stops
                self._fail(group, f"state machine snapshot failed: {error!r}")
        return batch

    async def _cycle(self, batch: list[tuple[Group, Work]]) -> None:
        """A leader's messages first; persist the batch, then for each group: send, apply, advance (invariant
        1). Groups with nothing to write are finished first: they need not wait for others' fsync."""
        for group, work in batch:
            group.send_first_messages(work, self._send)  # its followers fsync while it does
        durable = [(group, work) for group, work in batch if not work.needs_disk]
        for group, work in durable:
            group.send_messages(work, self._send)
            self._finish(group, work)
        pending = [(group, work) for group, work in batch if work.needs_disk]
        errors = await self._persist(pending)
        persisted, sent = [], False
        for (group, work), error in zip(pending, errors):
            if error is not None:
                self._fail(group, f"storage failed: {error!r}")
                continue
            group.send_messages(work, self._send)
            persisted.append((group, work))
            sent = sent or sends_after_persist(work)
        if sent:  # a follower's acknowledgement leaves before it applies (step 3, `workers.let_writers_run`)
            await self._persister.let_writers_run()
        for group, work in persisted:
            self._finish(group, work)

    def _finish(self, group: Group, work: Work) -> None:
        if group.closed_reason is not None:
            return
        try:
            group.finish(work)
        except InvariantViolation:
            raise
        except Exception as error:  # the state machine failed: this group stops, the others go on
            self._fail(group, f"state machine failed: {error!r}")
            return
        # Advancing may leave work (more committed entries than a Ready carries), and was fed what waited.
        self._dirty[group.name] = group

    def _fail(self, group: Group, reason: str) -> None:
        log.error("group %s stopped: %s", group.name, reason)
        group.close(reason)
        self.ticker.closed(group.name)

    async def _persist(self, batch: list[tuple[Group, Work]]) -> list[Exception | None]:  # step 2; an error per group
        return await self._persister.persist([(g.wal, g.disk, w) for g, w in batch])
