"""`NodeDriver`: one simulated node — a real `RaftNode`, its real `Wal` on its own `SimDisk`, an app `Replica`.

Owns: the life of one node (start from whatever its disk holds, run, crash) and the `Ready` contract,
followed exactly as a production runtime must:
  1. persist: the truncation (extended down to the snapshot's index if the WAL's entry there conflicts with
     the snapshot), the snapshot (the replica is told first, `prepare_install`: the WAL is about to drop
     the entries it covers), the appended entries, the rewritten faulty entries (`wal.repaired`,
     shared with the runtime), the hard state; `Wal.sync()` when
     `must_sync`;
  2. only then hand the messages to the network;
  3. install the snapshot in the replica, apply committed entries, answer client proposals that applied;
  4. `advance()`.
The replica is the run's application (`app`: the register, the stream or the meta state machine).
It also compacts: every `compact_every_entries` applied entries it snapshots the replica, makes the
snapshot durable in the WAL and tells the core (so InstallSnapshot paths run), and it writes `node.json`
(the server's "this directory was formatted" marker) once the first `Ready` is durable.

Restart: `Wal.open` → `RestoredState` (hard state, snapshot, entries, faulty, and as repair reasons every
finding of the WAL that means damage, `Recovered.damage_findings`) → a new `RaftNode`; the app opens the
replica from the snapshot (and, for the stream, its store on this disk) and re-applies the committed
entries the core hands out. A disk whose WAL came back empty although `node.json` exists lost everything:
it restarts as a repairing member with no vote to trust (`storage_uuid_changed`), never re-bootstraps.

Invariants:
  1. No message of a `Ready` reaches the network before that `Ready` is persisted (and fsynced when asked).
  2. The replica's applied index equals the core's applied index after every `advance()`.
  3. Each node's randomness (core RNG per incarnation, disk faults) comes from its own sub-generator.

Imports: stdlib, attrs, `jsraft.raft`, `jsraft.wal`, `jsraft.testing.simdisk`, siblings.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from jsraft.errors import CorruptRecord
from jsraft.raft import (
    ConfState, Entry, HardState, NotLeader, ProposalDropped, RaftConfig, RaftNode, Ready, RequestVoteResponse,
    RestoredState, SnapshotMeta, membership,
)
from jsraft.testing.sim.app import RegisterApp
from jsraft.testing.sim.violation import Violation
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Recovered, Wal
from jsraft.wal.repaired import put_repaired, truncate

if TYPE_CHECKING:
    from jsraft.testing.sim.checkers import SafetyChecker
    from jsraft.testing.sim.network import SimNetwork
    from jsraft.testing.sim.trace import Trace

FORMATTED_MARKER = "node.json"
READY_LOOPS_MAX = 64
PROPOSED_KEPT_MAX = 2000


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


class NodeDriver:
    def __init__(self, setup: NodeSetup, rng: random.Random, disk: SimDisk, network: SimNetwork,
                 checker: SafetyChecker, trace: Trace, app: object | None = None) -> None:
        self.setup = setup
        self.node_id = setup.node_id
        self.rng = rng
        self.disk = disk
        self.network = network
        self.checker = checker
        self.trace = trace
        self.node: RaftNode | None = None
        self.wal: Wal | None = None
        self.app: Any = app if app is not None else RegisterApp()
        self.replica: Any = self.app.open(self, 0, None) if self.app.name == "register" else None
        self.proposed: dict[tuple[int, int], bytes] = {}
        self.incarnation = 0
        self.verbose = False
        # Told when this node sends a granted (non-pre) vote: the fault scheduler may crash it right after.
        self.on_vote_granted: Callable[[str], None] | None = None

    @property
    def up(self) -> bool:
        return self.node is not None

    # --- Life cycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the WAL and build a core from what it recovered (module docstring, Restart)."""
        wal, recovered = Wal.open(self.disk, segment_bytes=self.setup.segment_bytes)
        self.checker.on_restart(self.node_id, recovered, self.setup.corruptible)
        restored = self._restored(recovered)
        self.incarnation += 1
        core_rng = random.Random(self.rng.getrandbits(64))
        self.node = self.setup.node_class(self.setup.raft_config, core_rng, restored)
        self.wal = wal
        snapshot = restored.snapshot
        self.replica = self.app.open(self, snapshot.index if snapshot is not None else 0,
                                     (restored.snapshot_data or b"") if snapshot is not None else None)
        self.proposed = {}
        status = self.node.status()
        why = f" repairing ({status.repair_reason})" if status.repairing else ""
        self.trace.add(f"{self.node_id} start #{self.incarnation} term={status.current_term} "
                       f"last={status.last_index} commit={status.commit_index} snap={status.snapshot_index}{why}")

    def _restored(self, recovered: Recovered) -> RestoredState:
        snapshot = recovered.snapshot
        meta, data = snapshot if snapshot is not None else (None, None)
        empty = (meta is None and not recovered.entries and not recovered.faulty
                 and recovered.hard_state == HardState())
        formatted = self.disk.exists(FORMATTED_MARKER)
        if empty and not formatted:
            if self.setup.bootstrap_voters is not None:
                return RestoredState.bootstrap(self.setup.bootstrap_voters)
            return RestoredState()
        reasons = recovered.damage_findings()
        return RestoredState(
            hard_state=recovered.hard_state,
            conf_state=meta.conf if meta is not None else ConfState(voters=()),
            snapshot=meta, snapshot_data=data, entries=recovered.entries, faulty=recovered.faulty,
            repair_reasons=reasons,
            # Everything was lost although this directory was formatted: a member that may have voted.
            storage_uuid_changed=empty and formatted)

    def crash(self, *, torn: bool) -> None:
        """Power loss for this node: everything not fsynced is gone; the process is gone."""
        counts = self.disk.crash(torn=torn)
        self.node = None
        self.wal = None
        self.proposed = {}
        self.trace.add(f"{self.node_id} crash torn={torn} {counts}")

    # --- Inputs -------------------------------------------------------------------------------------

    def tick(self, count: int) -> None:
        node = self.node
        if node is None:
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
            node.step(message)

    def propose(self, value: bytes) -> int | None:
        """Propose at this node if it leads; returns the index, or None if it is not (able to be) leader."""
        node = self.node
        if node is None or node.role != "leader":
            return None
        try:
            index = node.propose(value)
        except (NotLeader, ProposalDropped):
            return None  # the client tries again later (with a new value)
        self.proposed[(index, node.current_term)] = value
        if len(self.proposed) > PROPOSED_KEPT_MAX:
            applied = self.replica.applied_index
            self.proposed = {k: v for k, v in self.proposed.items() if k[0] > applied}
        return index

    # --- The Ready contract -------------------------------------------------------------------------

    def pump(self, now: int) -> list[tuple[int, int, bytes]]:
        """Process every pending Ready; returns the client proposals acknowledged (index, term, value)."""
        node = self.node
        acked: list[tuple[int, int, bytes]] = []
        if node is None:
            return acked
        for _ in range(READY_LOOPS_MAX):
            if not node.has_ready():
                self._maybe_compact()
                return acked
            rd = node.ready()
            try:
                self._persist(rd)
            except CorruptRecord as error:
                # A read-time fault found while running: a real runtime stops the group and restarts it.
                self.trace.add(f"{self.node_id} wal error while running: {error}; restarting")
                self.crash(torn=False)
                self.start()
                return acked
            self.checker.on_persist(self.node_id, node, rd)
            for message in rd.messages:
                self.checker.on_message(self.node_id, node, message)
                if (self.on_vote_granted is not None and isinstance(message, RequestVoteResponse)
                        and message.vote_granted and not message.pre_vote):
                    self.on_vote_granted(self.node_id)
                if self.verbose:
                    self.trace.message(f"send {describe(message)}")
                self.network.send(message, now)
            acked.extend(self._apply(rd))
            node.advance(rd)
            if self.replica.applied_index != node.log.applied_index:
                raise Violation("crash", f"{self.node_id}: the core counts {node.log.applied_index} applied, "
                                         f"it handed out entries through {self.replica.applied_index}")
        raise Violation("crash", f"{self.node_id}: Ready loop did not settle in {READY_LOOPS_MAX} rounds")

    def _persist(self, rd: Ready) -> None:
        wal = self.wal
        assert wal is not None
        truncate_from = rd.truncate_from
        if rd.snapshot is not None:
            meta = rd.snapshot.meta
            known = wal.term(meta.index) if meta.index <= wal.last_index() else None
            if known is not None and known != meta.term:
                truncate_from = meta.index if truncate_from is None else min(truncate_from, meta.index)
        if truncate_from is not None and truncate_from > wal.last_index():
            truncate_from = None
        if truncate_from is not None and wal.first_index() <= truncate_from:
            assert self.node is not None
            truncate(wal, truncate_from, repairing=self.node.repairing)
        if rd.snapshot is not None:
            self.replica.prepare_install(rd.snapshot.meta.index)  # before the WAL drops entries for it
            wal.save_snapshot(rd.snapshot.meta, rd.snapshot.data)
            wal.compact(rd.snapshot.meta.index)
        if rd.entries:
            wal.append(list(rd.entries))
        if rd.repaired_entries:
            self._replace(rd.repaired_entries)
        if rd.hard_state is not None:
            wal.save_hard_state(rd.hard_state)
        if rd.must_sync:
            wal.sync()
        if rd.must_sync and not self.disk.exists(FORMATTED_MARKER):
            self.disk.write_atomic(FORMATTED_MARKER, f'{{"node": "{self.node_id}"}}'.encode())

    def _replace(self, entries: tuple[Entry, ...]) -> None:
        """The core's repaired entries, through the same step the runtime uses (`wal.repaired`)."""
        wal, node = self.wal, self.node
        assert wal is not None and node is not None
        cut_from = put_repaired(wal, entries, repairing=node.repairing)
        if cut_from is not None:
            self.trace.add(f"{self.node_id} cut a divergent suffix from {cut_from} before repairing "
                           f"{cut_from - 1}: the leader's entry there has another term than its successor claims")

    def _apply(self, rd: Ready) -> list[tuple[int, int, bytes]]:
        acked: list[tuple[int, int, bytes]] = []
        if rd.snapshot is not None:
            meta = rd.snapshot.meta
            self.replica = self.app.install(self, self.replica, rd.snapshot.data, meta.index)
            self.checker.on_install(self.node_id, meta, self.replica.digest)
            self.trace.add(f"{self.node_id} installed snapshot {meta.index}/{meta.term}")
        for entry in rd.committed_entries:
            if rd.snapshot is not None and entry.index <= rd.snapshot.meta.index:
                continue  # covered by the snapshot installed in this same Ready
            digest = self.replica.apply(entry)
            self.checker.on_apply(self.node_id, entry, digest)
            value = self.proposed.pop((entry.index, entry.term), None)
            if value is not None and value == entry.data:
                acked.append((entry.index, entry.term, value))
        return acked

    def _maybe_compact(self) -> None:
        """Snapshot the replica every `compact_every_entries` applied entries: durably first, then the core."""
        node, wal = self.node, self.wal
        assert node is not None and wal is not None
        index = self.replica.applied_index
        log = node.log
        if index - log.snapshot_index < self.setup.compact_every_entries:
            return
        if (index != log.applied_index or index > log.stable_index or index > node.conf_applied_index
                or node.ready_outstanding):
            return
        term = log.term_at(index)
        if term is None:
            return
        data = self.replica.snapshot_data()
        if data is None:
            return  # the replica cannot snapshot now (e.g. a stream replica that is not current)
        meta = SnapshotMeta(index=index, term=term, conf=membership.conf_at(node, index))
        wal.save_snapshot(meta, data)
        node.compact(index, data)
        wal.compact(index)
        self.trace.add(f"{self.node_id} compacted through {index}/{term}")


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
