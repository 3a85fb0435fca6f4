"""`NodeDriver`: one simulated node — a real `RaftNode`, its real `Wal` on its own `SimDisk`, an app `Replica`,
joined by the production Ready cycle (`jsraft.replica.GroupCycle`).

Owns: the life of one node (start from whatever its disk holds, run, crash) and `SimMachine`, the adapter
that presents the run's app replica (`app`: the register, the stream or the meta state machine) as the
`StateMachine` the production cycle applies to. The driver has no Ready loop of its own: `pump` runs
`GroupCycle.run` — take, `replica.persist.write_work` / `sync_work` (truncation guards, WAL sync before the
hard state, repaired entries, the group marker), send, apply, advance, own snapshots when due — exactly
the code the runtime runs on its worker threads, inline. What the driver adds is observation: the
checkers see every persisted `Ready` (`on_persist`, between the fsync and the first message), every
message sent, every entry applied and every snapshot installed.

Restart: production's start-up through the node's storage (`node_storage.NodeStorage.open_group`: the
store lock, `node.json`, the record of the groups this storage started, `runtime.persist.open_storage` —
`Wal.open` and the group marker, or the record's verdict when the marker is gone) → `Recovered` →
`replica.restored_state` (the runtime's start-up rules: bootstrap, a blank member, a restart, or a member
whose WAL came back empty although the marker or the record says it started here — it restarts repairing
with no vote to trust, `storage_uuid_changed`, never re-bootstraps) → a new `RaftNode`; the app opens the
replica from the snapshot (and, for the stream, its store on this disk) and re-applies the committed
entries the core hands out.

Leader pipelining, as the runtime does it: a leader's `send_first` cycle sends its messages, writes, and
completes (fsync, the other messages, apply, `advance()`) at a later `pump`, 1–5 ticks on (`FSYNC_TICKS`).
Meanwhile its followers' AppendEntriesResponses of its term are stepped and what they produce is sent at
once (`RaftNode.pipelined_messages`); every other input waits — messages, ticks, and proposals (refused, the
client tries again) — and a crash loses the unsynced writes: entries and hard state alike, since both are
written before the fsync (`replica.persist.seal_work`), so the crash lands inside the cycle's fsync.

Invariants:
  1. No message of a `Ready` reaches the network before that `Ready` is persisted (and fsynced when asked):
     `GroupCycle` invariant 2 — except a leader's, when the core allows it (`Ready.send_first`).
  2. The replica's applied index equals the core's applied index after every `advance()` (`GroupCycle`
     invariant 3; a breach is an `InvariantViolation`, reported as `crash`).
  3. Each node's randomness (core RNG per incarnation, disk faults) comes from its own sub-generator.

Imports: stdlib, attrs, `jsraft.raft`, `jsraft.wal`, `jsraft.replica`, `jsraft.runtime.persist` (`started_fn`,
`ceiling_fn`, `vote_ceiling`), `jsraft.testing.simdisk`, siblings.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from jsraft.errors import CorruptRecord, invariant
from jsraft.raft import (
    AppendEntriesResponse, Entry, NotLeader, ProposalDropped, RaftConfig, RaftNode, RequestVoteResponse, SnapshotMeta,
)
from jsraft.raft.messages import Message
from jsraft.replica import GroupCycle, Work, marker_contents, persist, restored_state
from jsraft.replica.state_machine import SnapshotUnavailable
from jsraft.runtime.persist import ceiling_fn, started_fn, vote_ceiling
from jsraft.testing.sim.app import RegisterApp
from jsraft.testing.sim.node_storage import NodeStorage
from jsraft.testing.sim.violation import Violation
from jsraft.testing.simdisk import SimDisk, SimPowerCut

if TYPE_CHECKING:
    from jsraft.wal import Wal
    from jsraft.testing.sim.checkers import SafetyChecker
    from jsraft.testing.sim.network import SimNetwork
    from jsraft.testing.sim.trace import Trace

GROUP = "sim"  # the one group a simulated node runs (the name in its marker and on its messages)
READY_LOOPS_MAX = 64
PROPOSED_KEPT_MAX = 2000
FSYNC_TICKS = (1, 1, 1, 1, 2, 5)  # how long a leader's pipelined fsync takes, drawn per cycle


@attrs.frozen(kw_only=True)
class NodeSetup:
    """What a driver is built from, fixed for the run."""

    node_id: str
    raft_config: RaftConfig
    node_class: type[RaftNode]
    bootstrap_voters: tuple[str, ...] | None  # None: a blank node that waits to be added
    corruptible: bool  # in the fault atlas
    segment_bytes: int
    compact_every_entries: int


class SimMachine:
    """The app replica as the production `StateMachine` (`jsraft.replica.state_machine`), seen by the checkers.

    The app's replicas apply one entry at a time and report a digest, and `App.install` may return a new
    replica object: the adapter keeps `driver.replica` current and hands each digest to `SafetyChecker`.
    """

    def __init__(self, driver: NodeDriver) -> None:
        self.driver = driver
        self._installing: SnapshotMeta | None = None

    @property
    def applied_index(self) -> int:
        return self.driver.replica.applied_index

    def apply(self, entries: Sequence[Entry]) -> list[object]:
        driver = self.driver
        for entry in entries:
            digest = driver.replica.apply(entry)
            driver.checker.on_apply(driver.node_id, entry, digest, current_term=driver.node.current_term)
        return [None] * len(entries)

    def prepare_install(self, meta: SnapshotMeta) -> None:
        self._installing = meta
        self.driver.replica.prepare_install(meta)

    def restore(self, data: bytes) -> None:
        meta, self._installing = self._installing, None
        invariant(meta is not None, "a leader's snapshot is announced (prepare_install) before it is restored")
        assert meta is not None
        driver = self.driver
        driver.replica = driver.app.install(driver, driver.replica, data, meta.index)
        driver.checker.on_install(driver.node_id, meta, driver.replica.digest)
        driver.trace.add(f"{driver.node_id} installed snapshot {meta.index}/{meta.term}")

    def snapshot_ready(self) -> bool:
        """The app replica's own `snapshot_ready()` (production's adapters have one), else always."""
        ready = getattr(self.driver.replica, "snapshot_ready", None)
        return ready is None or bool(ready())

    def snapshot(self) -> bytes:
        """The replica's snapshot; a `SnapshotUnavailable` it raises goes to the cycle, which skips this
        compaction as production's does (cycle invariant 5)."""
        index = self.applied_index
        try:
            data = self.driver.replica.snapshot_data()
        except SnapshotUnavailable as error:
            self.driver.snapshots_refused += 1
            self.driver.trace.add(f"{self.driver.node_id} snapshot at {index} refused: {error.description}")
            raise
        self.driver.trace.add(f"{self.driver.node_id} compacted through {index}")
        return data


class NodeDriver:
    def __init__(self, setup: NodeSetup, rng: random.Random, disk: SimDisk, network: SimNetwork,
                 checker: SafetyChecker, trace: Trace, app: object | None = None,
                 storage: NodeStorage | None = None) -> None:
        self.setup = setup
        self.node_id = setup.node_id
        self.rng = rng
        self.disk = disk  # the group's directory (`node_storage`: as if mounted at groups/sim)
        self.storage = storage if storage is not None else NodeStorage(setup.node_id)
        self.network = network
        self.checker = checker
        self.trace = trace
        self.node: RaftNode | None = None
        self.wal: Wal | None = None
        self.cycle: GroupCycle | None = None
        self.snapshots_refused = 0  # own snapshots the replica refused (the cycle skipped the compaction)
        self._acked: list[tuple[int, int, bytes]] = []
        # A leader's pipelined cycle whose fsync completes at the next `pump` (module docstring), and the
        # inputs that wait for it, as the runtime holds them for a busy group.
        self._in_flight: Work | None = None
        self._in_flight_due = 0  # the tick its fsync returns at
        self._held: list[Message] = []
        self._held_ticks = 0
        self.app: Any = app if app is not None else RegisterApp()
        self.replica: Any = self.app.open(self, 0, None) if self.app.name == "register" else None
        self.proposed: dict[tuple[int, int], bytes] = {}
        self.incarnation = 0
        # Some incarnation completed a durable cycle (persisted a Ready); and the excuse the durability
        # checker gives a node that crashed before its first one and restarts repairing (`start`).
        self.durable_once = False
        self._unstarted_repair = False
        self._now = 0
        self.verbose = False
        # Told when this node sends a granted (non-pre) vote: the fault scheduler may crash it right after.
        self.on_vote_granted: Callable[[str], None] | None = None
        # Told when this node, a leader whose fsync is in flight, sends a commit index above what it has
        # fsynced: the fault scheduler may crash it inside that window.
        self.on_commit_before_own_fsync: Callable[[str], None] | None = None
        # The group's voters as known outside it, asked for the term by a member that lost its storage with
        # no vote-term ceiling (`raft.term_query`): the simulation sets every node it started (a superset of
        # every candidate the lost vote can have gone to).
        self.members: Callable[[], tuple[str, ...] | None] = lambda: None
        # Told before every restart (not the first start), while the node is down: the storage faults may
        # lose part of its storage then (`storage_faults`).
        self.before_restart: Callable[[str], None] | None = None
        # Told when an armed power cut struck inside a fsync (`SimDisk.arm_power_cut`): the node has crashed.
        self.on_power_cut: Callable[[str], None] | None = None

    @property
    def up(self) -> bool:
        return self.node is not None

    @property
    def persisting(self) -> bool:
        """A leader's pipelined cycle is in flight: proposals are refused until it completes (the runtime
        would hold them in the group's inbox), so a client with state to lose waits for the next step."""
        return self._in_flight is not None

    # --- Life cycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the WAL and build a core from what it recovered (module docstring, Restart)."""
        if self.incarnation and self.before_restart is not None:
            self.before_restart(self.node_id)
        wal, recovered, formatted = self.storage.open_group(self.disk, GROUP, self.setup.segment_bytes)
        self.checker.on_restart(self.node_id, recovered, self.setup.corruptible or self._unstarted_repair)
        snapshot = recovered.snapshot
        index, data = (snapshot[0].index, snapshot[1]) if snapshot is not None else (0, None)
        restored = restored_state(recovered, index, voters=self.setup.bootstrap_voters, formatted=formatted,
                                  vote_ceiling=vote_ceiling(self.storage.record, GROUP), peers=self.members())
        self.incarnation += 1
        core_rng = random.Random(self.rng.getrandbits(64))
        self.node = node = self.setup.node_class(self.setup.raft_config, core_rng, restored)
        self.wal = wal
        self.replica = self.app.open(self, index, data)
        self.proposed = {}
        self.cycle = GroupCycle(name=GROUP, node=node, wal=wal, disk=self.disk, state_machine=SimMachine(self),
                                marker=None if formatted else marker_contents(GROUP, self.node_id),
                                snapshot_every_entries=self.setup.compact_every_entries,
                                on_applied=self._on_applied, on_started=started_fn(self.storage.record, GROUP),
                                on_term=ceiling_fn(self.storage.record, GROUP))
        status = node.status()
        self.storage.opened(status.last_index)
        if status.repairing and not self.durable_once and self.incarnation > 1:
            # Crashed before its first durable cycle and still repairing: only a lost record does that now
            # (`runtime.group_record` decision 2 cannot tell such a group from one that started).
            self._unstarted_repair = True
            self.trace.add(f"{self.node_id} restarts repairing without a durable cycle before (record verdict)")
        why = f" repairing ({status.repair_reason})" if status.repairing else ""
        if (record := self.storage.record) is not None and record.lost:  # `runtime.group_record` decision 2
            why += f" (record of started groups was lost: floor {record.unknown_through_meta_index})"
        self.trace.add(f"{self.node_id} start #{self.incarnation} term={status.current_term} "
                       f"last={status.last_index} commit={status.commit_index} snap={status.snapshot_index}{why}")

    def crash(self, *, torn: bool) -> None:
        """Power loss for this node: everything not fsynced is gone; the process is gone."""
        counts = self.disk.crash(torn=torn)
        self.storage.crash()
        self._in_flight, self._held, self._held_ticks = None, [], 0
        self.node = None
        self.wal = None
        self.cycle = None
        self.proposed = {}
        self.trace.add(f"{self.node_id} crash torn={torn} {counts}")

    # --- Inputs -------------------------------------------------------------------------------------

    def tick(self, count: int) -> None:
        node = self.node
        if node is None:
            return
        if self._in_flight is not None:
            self._held_ticks += count
            return
        for _ in range(count):
            node.tick()

    def deliver(self, messages: list) -> None:
        node = self.node
        if node is None:
            return
        for message in messages:
            if self.verbose:
                self.trace.message(f"deliver {describe(message)}")
            if self._in_flight is None:
                node.step(message)
            elif (isinstance(message, AppendEntriesResponse) and message.term == node.current_term
                  and node.role == "leader"):
                # The runtime's exception for a persisting leader (runtime `group` invariant 1).
                node.step(message)
                for out in node.pipelined_messages():
                    self._send(out.to_id, GROUP, out)
                if node.log.commit_index > node.log.stable_index and self.on_commit_before_own_fsync:
                    self.on_commit_before_own_fsync(self.node_id)
            else:
                self._held.append(message)

    def propose(self, value: bytes) -> int | None:
        """Propose at this node if it leads; returns the index, or None if it is not (able to be) leader."""
        node = self.node
        if node is None or node.role != "leader" or self._in_flight is not None:
            return None  # (the runtime would queue it while busy; the client tries again later)
        try:
            index = node.propose(value)
        except (NotLeader, ProposalDropped):
            return None  # the client tries again later (with a new value)
        self.proposed[(index, node.current_term)] = value
        if len(self.proposed) > PROPOSED_KEPT_MAX:
            applied = self.replica.applied_index
            self.proposed = {k: v for k, v in self.proposed.items() if k[0] > applied}
        return index

    # --- The Ready cycle (production's `GroupCycle`) -------------------------------------------------

    def pump(self, now: int) -> list[tuple[int, int, bytes]]:
        """Run the cycle until the core has no work; returns the client proposals acknowledged (index,
        term, value)."""
        node, cycle = self.node, self.cycle
        self._acked = acked = []
        if node is None or cycle is None:
            return acked
        self._now = now
        for _ in range(READY_LOOPS_MAX):
            try:
                if self._in_flight is not None:
                    if now < self._in_flight_due:
                        return acked
                    self._complete_in_flight()
                if not cycle.has_work():
                    return acked
                if self._run_cycle(cycle):
                    return acked  # its fsync completes at the next pump
            except SimPowerCut as cut:
                self.trace.add(f"{self.node_id}: {cut}")
                self.crash(torn=True)  # what that fsync covered stays unsynced: torn
                if self.on_power_cut is not None:
                    self.on_power_cut(self.node_id)
                return acked
            except CorruptRecord as error:
                # A read-time fault found while running: the runtime stops the group, which restarts.
                self.trace.add(f"{self.node_id} wal error while running: {error}; restarting")
                self.crash(torn=False)
                self.start()
                return acked
        raise Violation("crash", f"{self.node_id}: Ready loop did not settle in {READY_LOOPS_MAX} rounds")

    def _run_cycle(self, cycle: GroupCycle) -> bool:
        """`GroupCycle.run`, except that a leader's pipelined cycle stops after its writes, its messages
        sent: True, and its fsync completes at the next `pump` — followers' acknowledgements may arrive
        and a crash may strike meanwhile, as in production."""
        work = cycle.take()
        if work.ready is None or not work.ready.send_first or not work.needs_disk:
            cycle.run_taken(work, self._send, self._persisted)
            return False
        cycle.send_first(work, self._send)
        persist.write_work(cycle.wal, cycle.disk, work)
        persist.seal_work(cycle.wal, work)  # every write before the fsync, so a crash can land inside it
        self._in_flight = work
        # A slow fsync now and then: long enough for acknowledgements to come back, or a crash to strike.
        self._in_flight_due = self._now + self.rng.choice(FSYNC_TICKS)
        return True

    def _complete_in_flight(self) -> None:
        work, self._in_flight = self._in_flight, None
        cycle, node = self.cycle, self.node
        assert work is not None and cycle is not None and node is not None
        persist.sync_work(cycle.wal, cycle.disk, work, sealed=True)
        self._persisted(work)
        cycle.send(work, self._send)
        cycle.finish(work)
        ticks, self._held_ticks = self._held_ticks, 0
        held, self._held = self._held, []
        self.tick(ticks)
        self.deliver(held)

    def _persisted(self, work: Work) -> None:
        if work.needs_disk:
            self.durable_once = True
        if self._unstarted_repair and self.node is not None and not self.node.repairing:
            self._unstarted_repair = False
        if work.ready is not None:
            assert self.node is not None
            self.checker.on_persist(self.node_id, self.node, work.ready)

    def _send(self, to_id: str, group: str, message: Message) -> bool:
        node = self.node
        assert node is not None
        self.checker.on_message(self.node_id, node, message)
        if (self.on_vote_granted is not None and isinstance(message, RequestVoteResponse)
                and message.vote_granted and not message.pre_vote):
            self.on_vote_granted(self.node_id)
        if self.verbose:
            self.trace.message(f"send {describe(message)}")
        self.network.send(message, self._now)
        return True

    def _on_applied(self, entries: Sequence[Entry], results: Sequence[object]) -> None:
        for entry in entries:
            value = self.proposed.pop((entry.index, entry.term), None)
            if value is not None and value == entry.data:
                self._acked.append((entry.index, entry.term, value))


def describe(message: object) -> str:
    """One line per message for the verbose trace (only built when a failing seed is replayed)."""
    fields = attrs.asdict(message, recurse=False)  # type: ignore[arg-type]
    entries = fields.pop("entries", None)
    if entries:
        fields["entries"] = f"{entries[0].index}..{entries[-1].index}@{entries[-1].term}"
    if "data" in fields:
        fields["data"] = f"<{len(fields['data'])} bytes>"
    head = f"{fields.pop('from_id')}->{fields.pop('to_id')} {type(message).__name__}"
    return head + " " + " ".join(f"{k}={v}" for k, v in fields.items() if v not in (False, 0, (), None))
