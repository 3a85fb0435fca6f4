"""`--app stream`: every simulated node applies its committed entries to a real `StreamStateMachine`.

Owns: `StreamApp` (the run's stream config drawn from the seed, the simulated wall clock, the replicas'
factory, the workload, the audit checker) and `StreamReplica`, one node's stream runtime — what
`server.stream_adapter` and `server.stream_replica` do in production, synchronously:
  - the store is a real `FileStore` on the node's own `SimDisk` (directory `stream/msgs`), so crash loss,
    torn writes, read-time bit flips and (for nodes in the fault atlas) damage at rest reach it;
  - start: `StreamStateMachine(store, ...)`; with the WAL's snapshot, `restore(data, recovering=True)`; a
    non-empty `RepairPlan` becomes a pending catch-up (`store_may_be_ahead`); the WAL's committed entries
    then replay, and `finish_recovery()` runs once the replay reaches the log's last index at open time;
  - NOOP and CONF_CHANGE entries only move the machine's `applied_index` (the NOOP's term is recorded: a
    `StreamLeader` is built only once its term's NOOP applied);
  - a leader's snapshot (InstallSnapshot): `restore(data)`; a non-empty plan becomes a pending catch-up;
  - while a catch-up is pending, committed entries wait in order (`buffered`) and apply once it is done
    (the machine must not apply entries between its snapshot and the end of the repair);
  - a replica that is drifted or whose store lists faults is resynced: the source's snapshot is restored,
    then caught up (`stream_repair`); catch-ups run *directly in-process*, `serve_catchup` on the
    source's machine answering `CatchupSession` requests through the wire encoding, and only while the
    two nodes have a two-way link in the simulated network;
  - compaction: only while the machine is current, fault-free, not replaying and its store at the log's
    last sequence (production's `StreamAdapter.snapshot_ready`); the store is synced first (DESIGN §2: the
    store is fsynced before the WAL is compacted past it), then `machine.snapshot()`;
  - a durable mark (`stream/repair`) says the store may lack effects of entries the WAL's snapshot covers:
    written before a leader's snapshot is made durable, when the machine drifts, when a resync starts;
    removed once the store holds the group's state again and is synced. A marked replica restarts with
    `restore(recovering=False)`: the full plan, digests compared, as the store may be behind anywhere.

Digest compared across replicas at each index (`SafetyChecker.on_apply`): the group position the log
implies (last sequence, last msg-id, last timestamp, last audit id, the dedupe window, the config), which
stream machine invariant 3 says every replica holds whatever its store's health. The store's state tuple
is compared at AUDIT entries (`stream_checks`).

Invariants:
  1. The replica's `applied_index` is the Raft position; the machine's may be ahead only after a resync
     from a source that had applied further (entries up to it are then skipped, and no digest is given).
  2. A replica never vouches (digest None) for an index its machine has not applied exactly.
  3. Every choice comes from the generator the app is given (config: `rngs.knobs`; workload: clients').

Imports: stdlib, `jsraft.raft`, `jsraft.store`, `jsraft.stream`, `jsraft.jsapi`, siblings.
Reference: stream/machine.py (Lifecycle), replica/stream_adapter.py, DESIGN.md §6, §8.
"""

from __future__ import annotations

import json
import random
import zlib
from typing import TYPE_CHECKING

from jsraft.jsapi.stream_config import StreamConfig, parse_stream_config
from jsraft.raft import Entry, EntryType
from jsraft.store.base import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.stream import StreamLeader, StreamStateMachine, store_config_for
from jsraft.stream.entries import encode_consumer
from jsraft.stream.errors import StreamNotHealthy
from jsraft.stream.results import Health
from jsraft.stream.snapshot import decode_snapshot
from jsraft.testing.sim import stream_repair
from jsraft.testing.sim.app_mutants import stream_machine_class
from jsraft.testing.sim.stream_checks import StreamChecker
from jsraft.testing.sim.stream_clients import StreamClients

if TYPE_CHECKING:
    from jsraft.testing.sim.node import NodeDriver
    from jsraft.testing.simdisk import SimDisk
    from jsraft.testing.sim.simulator import Simulation

STREAM = "SIM"
STREAM_DIR = "stream"
STORE_DIR = "stream/msgs"
MARKER = "stream/repair"  # present: the store may lack effects of entries the WAL's snapshot covers
TICK_NS = 10_000_000  # one simulated tick is 10 ms of the leader's wall clock
EPOCH_NS = 1_700_000_000_000_000_000
BLOCK_BYTES = 64 << 10  # the smallest block a FileStore takes: several blocks per run


class StreamApp:
    name = "stream"

    def __init__(self, rng: random.Random, mutant: str | None = None) -> None:
        max_age_ticks = rng.choice((0, 150, 400))
        fields: dict[str, object] = {"name": STREAM, "subjects": ["sim.>"], "storage": "file"}
        fields.update(self.extra_stream_fields(rng))  # the consumer app's retention (no draw here)
        window_ticks = rng.choice((50, 150))
        if max_age_ticks:
            fields["max_age"] = max_age_ticks * TICK_NS
            window_ticks = min(window_ticks, max_age_ticks)
        fields["duplicate_window"] = window_ticks * TICK_NS
        limit = rng.choice(("none", "none", "max_msgs", "per_subject"))
        if limit == "max_msgs":
            fields["max_msgs"] = rng.choice((60, 300))
        elif limit == "per_subject":
            fields["max_msgs_per_subject"] = rng.choice((15, 80))
        if limit != "none" and rng.random() < 0.3:
            fields["discard"] = "new"
        self.config, self.raw = parse_stream_config(json.dumps(fields, sort_keys=True).encode())
        # What a CONFIG entry switches to (and back): another duplicate window, description and
        # per-subject limit (a replay after a restart applies each CONFIG's limits at its position).
        fields["duplicate_window"] = window_ticks * TICK_NS // 2
        fields["description"] = "updated"
        fields["max_msgs_per_subject"] = 40 if fields.get("max_msgs_per_subject") != 40 else 25
        _, self.alternate_raw = parse_stream_config(json.dumps(fields, sort_keys=True).encode())
        self.audit_interval_ticks = rng.choice((10, 30, 80))
        self.catchup_bytes = rng.choice((512, 4096, 1 << 16))
        # Request/chunk round trips per step: a source keeps applying entries between them (1, 3) or not.
        self.chunks_per_step = rng.choice((1, 3, 1000))
        self.mutant = mutant
        self.checker = StreamChecker(self)

    def describe(self) -> str:
        return (f"stream {self.raw.decode()} audit every {self.audit_interval_ticks} ticks, catch-up chunks "
                f"{self.catchup_bytes} bytes, {self.chunks_per_step} per step")

    def extra_stream_fields(self, rng: random.Random) -> dict[str, object]:
        return {}

    def machine_class(self, node_id: str):  # type: ignore[no-untyped-def]
        """What builds `node_id`'s stream machine: `(store, config, raw) -> StreamStateMachine`."""
        return stream_machine_class(self.mutant, node_id)

    @staticmethod
    def now_ns(now: int) -> int:
        return EPOCH_NS + now * TICK_NS

    def store_config(self, config: StreamConfig | None = None) -> StoreConfig:
        return store_config_for(config or self.config, StoreConfig(name=STREAM, block_size=BLOCK_BYTES))

    def open_store(self, disk: SimDisk, config: StreamConfig | None = None, *, read_only: bool = False) -> FileStore:
        """The store, opened with the limits of `config` (opening applies none: the replay applies each
        entry's): the WAL snapshot's config, else the stream's first. Every record is verified, not only
        those the index does not cover, as production opens it (DESIGN §8): damage done at rest is found
        at startup, before any of it is counted."""
        return FileStore.open(disk.sub(STORE_DIR), self.store_config(config), read_only=read_only,
                              use_index=False)

    # --- App interface (module `app`) ------------------------------------------------------------

    def open(self, driver: NodeDriver, index: int, data: bytes | None) -> StreamReplica:
        return StreamReplica(self, driver, index, data)

    def install(self, driver: NodeDriver, replica: StreamReplica, data: bytes, index: int) -> StreamReplica:
        replica.install(data, index)
        return replica

    def workload(self, sim: Simulation) -> StreamClients:
        return StreamClients(self, sim.rngs.clients, sim.knobs.propose)

    def probe(self, number: int) -> bytes:
        return encode_consumer(f"probe-{number}".encode())

    def after_step(self, sim: Simulation) -> None:
        self.checker.after_step(sim)

    def stats(self) -> dict[str, int]:
        return self.checker.stats()

    def check_members(self, sim: Simulation, group: tuple[str, ...]) -> None:
        self.checker.check_members(sim, group)

    def durable(self, sim: Simulation, driver: NodeDriver):  # type: ignore[no-untyped-def]
        return self.checker.durable(sim, driver)


class StreamReplica:
    def __init__(self, app: StreamApp, driver: NodeDriver, index: int, data: bytes | None) -> None:
        self.app, self.driver, self.node_id = app, driver, driver.node_id
        self.applied_index = index  # the Raft position (invariant 1)
        self.noop_term = 0
        self.buffered: list[Entry] = []
        self.pending: stream_repair.Pending | None = None
        self.leader: StreamLeader | None = None
        self.leader_term = 0
        self.probes: dict[int, bytes] = {}
        self.next_repair_tick = 0
        if driver.setup.corruptible:
            app.checker.unverified.add(self.node_id)  # its disk may have lost anything: the audit settles it
        machine_class = app.machine_class(self.node_id)
        config = app.config
        if data is not None and (raw := decode_snapshot(data).raw_config):
            config = parse_stream_config(raw)[0]
        self.machine: StreamStateMachine = machine_class(app.open_store(driver.disk, config), app.config, app.raw)
        self.marked = driver.disk.exists(MARKER)
        if data is not None:
            # Marked: the store may lack effects the snapshot covers (module docstring): plan in full.
            plan = self.machine.restore(data, recovering=not self.marked)
            if not plan.is_empty:
                self.pending = stream_repair.Pending(plan.group, index, store_may_be_ahead=not self.marked)
                self.trace(f"restored snapshot {index}{' (marked)' if self.marked else ''} needs a catch-up: "
                           f"{_plan_text(plan)}")
            elif self.marked:
                self.unmark()
        node = driver.node
        self.recovery_target: int | None = node.log.last_index if node is not None else None
        self.check_recovery()

    def trace(self, text: str) -> None:
        self.driver.trace.add(f"{self.node_id} stream: {text}")

    def mark(self, why: str) -> None:
        """Durably note that the store may lack effects of entries the WAL no longer holds."""
        if not self.marked:
            self.driver.disk.write_atomic(MARKER, why.encode())
            self.marked = True

    def unmark(self) -> None:
        """The store holds the group's state at the machine's position: make it durable, drop the mark."""
        if self.marked:
            self.machine.store.sync()
            self.driver.disk.remove(MARKER)
            self.driver.disk.sync_dir(STREAM_DIR)
            self.marked = False

    def fresh_store(self) -> FileStore:
        """A repair that needs an empty store (the old one cut its head beyond the group's)."""
        self.driver.disk.remove_tree(STORE_DIR)
        self.trace("store replaced by a fresh one for the repair")
        return self.app.open_store(self.driver.disk, self.machine.config)

    # --- Replica interface (module `app`) -------------------------------------------------------

    @property
    def digest(self) -> int | None:
        if self.machine.applied_index != self.applied_index or self.buffered:
            return None  # invariant 2
        return self.position_digest()

    def position_digest(self) -> int:
        machine = self.machine
        head = (machine.last_seq, machine.last_msg_id, machine.last_timestamp_ns, machine.last_audit_id,
                machine.config_meta_index, tuple(machine.dedupe.items()))
        return zlib.crc32(machine.raw_config, zlib.crc32(repr(head).encode()))

    def apply(self, entry: Entry) -> int | None:
        self.applied_index = entry.index
        if entry.type is EntryType.NOOP:
            self.noop_term = max(self.noop_term, entry.term)
        if self.pending is not None or self.buffered:
            self.buffered.append(entry)
            return None
        self.apply_now(entry)
        return self.digest

    def apply_now(self, entry: Entry) -> None:
        machine = self.machine
        if entry.index <= machine.applied_index:
            return  # a resync from a source further along covered it (invariant 1)
        if entry.type is not EntryType.NORMAL:
            machine.applied_index = entry.index
        else:
            result = machine.apply(entry.index, entry.data)
            if result.audit is not None:
                self.app.checker.on_audit(self, result.audit)
            elif result.consumer_body is not None:
                self.probes[entry.index] = entry.data
            if result.finding is not None:
                self.trace(f"drift found applying {entry.index}: {result.finding}")
            if machine.health is not Health.current:
                self.mark(f"{machine.health} at {entry.index}")
        self.check_recovery()

    def check_recovery(self) -> None:
        target, machine = self.recovery_target, self.machine
        if (target is not None and machine.replaying and machine.applied_index >= target
                and self.pending is None and not self.buffered):
            findings = machine.finish_recovery()
            if findings:
                self.trace(f"recovery findings: {findings}")

    def prepare_install(self, index: int) -> None:
        self.mark(f"installing the leader's snapshot {index}")

    def install(self, data: bytes, index: int) -> None:
        """A leader's snapshot at `index` (InstallSnapshot); `prepare_install` marked the store."""
        self.buffered = [e for e in self.buffered if e.index > index]
        self.applied_index = index
        self.leader = None
        if index <= self.machine.applied_index:
            return  # a resync already brought the machine past it
        self.pending = None
        plan = self.machine.restore(data)
        if not plan.is_empty:
            self.pending = stream_repair.Pending(plan.group, index, store_may_be_ahead=False)
            self.trace(f"snapshot {index} from the leader needs a catch-up: {_plan_text(plan)}")
        else:
            self.unmark()

    def snapshot_data(self) -> bytes | None:
        machine = self.machine
        if self.pending is not None or self.buffered or machine.applied_index != self.applied_index:
            return None
        # As production's `StreamAdapter.snapshot_ready`: current, fault-free, not replaying, in step.
        if not machine.can_lead or machine.replaying or machine.store.state().last_seq != machine.last_seq:
            return None
        machine.store.sync()
        try:
            data = machine.snapshot()
        except StreamNotHealthy as error:  # e.g. a record found damaged while the snapshot was built
            self.trace(f"snapshot refused: {error}")
            return None
        self.unmark()  # the store was just synced at the snapshot's state
        return data

    def holds(self, index: int, value: bytes) -> bool:
        return self.probes.get(index) == value

    def unsettled(self) -> str | None:
        if self.pending is not None:
            return f"catch-up to snapshot {self.pending.snapshot_index} pending"
        if self.buffered:
            return f"{len(self.buffered)} entries wait behind a catch-up"
        if self.machine.health is not Health.current:
            return f"stream replica {self.machine.health}"
        faults = self.machine.store.faults()
        if faults:
            return f"store faults {faults[:3]}"
        if self.node_id in self.app.checker.unverified:
            return "its store awaits an audit's confirmation"
        return None

    def step(self, sim: Simulation) -> None:
        stream_repair.step(sim, self)

    # --- Leading ------------------------------------------------------------------------------

    def stream_leader(self) -> StreamLeader | None:
        """This node's `StreamLeader`, built under production's conditions (stream_replica invariant 1)."""
        node = self.driver.node
        if node is None or node.role != "leader":
            self.leader = None
            return None
        machine = self.machine
        healthy = machine.health is Health.current and self.pending is None and not self.buffered
        if self.leader is not None and self.leader_term == node.current_term and healthy:
            return self.leader
        self.leader = None
        if (not healthy or self.noop_term != node.current_term or node.log.applied_index < node.log.last_index
                or not machine.can_lead or machine.applied_index != self.applied_index):
            return None
        self.leader = StreamLeader(machine, audit_interval_ns=self.app.audit_interval_ticks * TICK_NS)
        self.leader_term = node.current_term
        return self.leader

    def flush_buffered(self, sim: Simulation) -> None:
        """The catch-up is done: apply what waited, and give the checker the digests withheld."""
        while self.buffered and self.pending is None:
            entry = self.buffered.pop(0)
            self.apply_now(entry)
            if self.machine.applied_index == entry.index:
                sim.checker.on_digest(self.node_id, entry.index, self.position_digest())


def _plan_text(plan) -> str:  # type: ignore[no-untyped-def]
    steps = [f"findings {[f.kind.value for f in plan.findings]}"]
    if plan.reset:
        steps.append("reset")
    if plan.compact_to is not None:
        steps.append(f"compact to {plan.compact_to}")
    if plan.truncate_to is not None:
        steps.append(f"truncate to {plan.truncate_to}")
    if plan.fetch:
        steps.append(f"fetch {list(plan.fetch)[:4]}")
    return ", ".join(steps)
