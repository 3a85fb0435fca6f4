"""`--app stream`: every simulated node runs production's stream replica core on its own `SimDisk`.

Owns: `StreamApp` (the run's stream config drawn from the seed, the simulated wall clock, the replicas'
factory, the workload, the audit checker) and `StreamReplica`, the simulator's handle on one node's
*production* objects:
  - `server.stream_adapter.StreamAdapter` around a `StreamStateMachine` whose store is a real `FileStore`
    on the node's `SimDisk` (directory `stream/msgs`), so crash loss, torn writes, read-time bit flips
    and (for nodes in the fault atlas) damage at rest reach it. The adapter applies every committed entry
    (NOOP / CONF_CHANGE only move the position; its `noop_term` gates leading), holds entries back while a
    repair plan is pending, begins and restores resyncs, ends the WAL replay (`recovery_target`,
    `finish_recovery`), gates compaction (`snapshot_ready`, the store fsynced first) and hands every entry
    to the stream's consumers (its `ConsumerReplica`; `--app consumer` watches it, `consumer_app`);
  - start: the adapter restores the WAL's snapshot as production's runtime does at open (recovering);
    a leader's snapshot (InstallSnapshot) goes through the same `restore`;
  - repairs: production's decisions (`jsraft.replica.stream_repair`) with the simulated stream leader as
    the peer (`stream_repair`);
  - leading: a `StreamLeader` is built under production's conditions (`jsraft.replica.stream_leading`).
Nothing here applies, holds back, restores or repairs by itself: a change to any of those in production
is what the simulator runs.

Digest compared across replicas at each index (`SafetyChecker.on_apply`): the group position the log
implies (last sequence, last msg-id, last timestamp, last audit id, the dedupe window, the config), which
stream machine invariant 3 says every replica holds whatever its store's health. The store's state tuple
is compared at AUDIT entries (`stream_checks`), from every replica's report (production forwards only a
current machine's: the checker sees more than the leader's audit does).

Invariants:
  1. The replica's `applied_index` is the adapter's: the Raft position, held entries counted.
  2. A replica never vouches (digest None) for an index its machine has not applied exactly.
  3. Every choice comes from the generator the app is given (config: `rngs.knobs`; workload: clients').

Imports: stdlib, `jsraft.raft`, `jsraft.replica`, `jsraft.replica.stream_adapter`, `jsraft.store`,
`jsraft.stream`, `jsraft.jsapi`, `jsraft.consumer`, siblings.
Reference: stream/machine.py (Lifecycle), replica/stream_adapter.py, DESIGN.md §6, §8.
"""

from __future__ import annotations

import json
import random
import zlib
from typing import TYPE_CHECKING

from jsraft.consumer import DeleteOp, encode_ops
from jsraft.jsapi.stream_config import StreamConfig, parse_stream_config
from jsraft.raft import Entry, EntryType, SnapshotMeta
from jsraft.replica.stream_leading import leader_ready
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.replica.install_mark import AuditMark, InstallMark
from jsraft.store.base import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.store.swap import BesideBuild, recover_swap, recovered_path
from jsraft.stream import ApplyResult, AuditReport, EntryKind, StreamLeader, StreamStateMachine, store_config_for
from jsraft.stream.entries import encode_consumer, entry_kind
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
PROBE_NAME = "probe-"
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
        self.probe_values: set[bytes] = set()
        self.checker = StreamChecker(self)

    def describe(self) -> str:
        return (f"stream {self.raw.decode()} audit every {self.audit_interval_ticks} ticks, catch-up chunks "
                f"{self.catchup_bytes} bytes, {self.chunks_per_step} per step")

    def extra_stream_fields(self, rng: random.Random) -> dict[str, object]:
        return {}

    def machine_class(self, node_id: str):  # type: ignore[no-untyped-def]
        """What builds `node_id`'s stream machine: `(store, config, raw) -> StreamStateMachine`."""
        return stream_machine_class(self.mutant, node_id)

    def attach_consumers(self, replica: StreamReplica) -> None:
        """The consumer app watches the adapter's `ConsumerReplica` here; the stream app leaves it be."""
        return None

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
        if read_only:  # where production's recovery of an interrupted store swap would leave the store
            return FileStore.open(disk.sub(recovered_path(disk, STORE_DIR)), self.store_config(config),
                                  read_only=True, use_index=False)
        recover_swap(disk, STORE_DIR)  # as production's `memory_stream.open_store`
        return FileStore.open(disk.sub(STORE_DIR), self.store_config(config), use_index=False)

    # --- App interface (module `app`) ------------------------------------------------------------

    def open(self, driver: NodeDriver, index: int, data: bytes | None) -> StreamReplica:
        return StreamReplica(self, driver, index, data)

    def install(self, driver: NodeDriver, replica: StreamReplica, data: bytes, index: int) -> StreamReplica:
        replica.install(data, index)
        return replica

    def workload(self, sim: Simulation) -> StreamClients:
        return StreamClients(self, sim.rngs.clients, sim.knobs.propose)

    def probe(self, number: int) -> bytes:
        """A well-formed CONSUMER entry (a DELETE of a consumer that never exists): production's adapter
        hands it to the stream's consumers, and a malformed body stops the group, as it must."""
        value = encode_consumer(encode_ops([DeleteOp(name=f"{PROBE_NAME}{number}")]))
        self.probe_values.add(value)
        return value

    def after_step(self, sim: Simulation) -> None:
        self.checker.after_step(sim)

    def stats(self) -> dict[str, int]:
        return self.checker.stats()

    def check_members(self, sim: Simulation, group: tuple[str, ...]) -> None:
        self.checker.check_members(sim, group)

    def durable(self, sim: Simulation, driver: NodeDriver):  # type: ignore[no-untyped-def]
        return self.checker.durable(sim, driver)


def _build_opener(replica: "StreamReplica"):  # type: ignore[no-untyped-def]
    """Opens a repair's store at a path with the config the machine's store has then (lifted limits while
    the session runs, the stream's once it finished), verifying every record as `open_store` does."""
    def open_store(disk: SimDisk, path: str) -> FileStore:
        return FileStore.open(disk.sub(path), replica.machine.store.config, use_index=False)
    return open_store


class StreamReplica:
    """One node's stream replica: production's `StreamAdapter` around a `StreamStateMachine` on `SimDisk`."""

    def __init__(self, app: StreamApp, driver: NodeDriver, index: int, data: bytes | None) -> None:
        self.app, self.driver, self.node_id = app, driver, driver.node_id
        self.leader: StreamLeader | None = None
        self.leader_term = 0
        self.probes: dict[int, bytes] = {}
        self.repair = stream_repair.RepairState()
        if driver.setup.corruptible:
            app.checker.unverified.add(self.node_id)  # its disk may have lost anything: the audit settles it
        config = app.config
        if data is not None and (raw := decode_snapshot(data).raw_config):
            config = parse_stream_config(raw)[0]
        machine = app.machine_class(self.node_id)(app.open_store(driver.disk, config), app.config, app.raw)
        # Production's report hook (stream_adapter invariant 6): a reported audit answers the audit wish.
        self.adapter = StreamAdapter(machine, install_mark=InstallMark(driver.disk.sub(STREAM_DIR)),
                                     audit_mark=AuditMark(driver.disk.sub(STREAM_DIR)), on_audit=self._reported)
        self._classified = 0  # the index of the last report the checker saw through `_reported`
        app.attach_consumers(self)
        if data is not None:
            self.adapter.restore(data)  # recovery_target is None: this replica's own snapshot, recovering
            if self.adapter.plan is not None:
                self.trace(f"restored snapshot {index} needs a catch-up: {_plan_text(self.adapter.plan.plan)}")
        node = driver.node
        self.adapter.recovery_target = node.log.last_index if node is not None else 0
        self.adapter.check_recovery()

    def _reported(self, report: AuditReport) -> None:
        """Production's `AuditRunner.on_applied_report`: a reported audit answers the audit wish, and a replica
        whose store is still unjudged wants another (stream_audit invariant 6; the checker's verdict comes
        after the step)."""
        if self.repair.wish.on_reported(report.index, unjudged=self.adapter.judgement.unjudged):
            self.repair.reask = True  # paced by `stream_repair.step`
        self.app.checker.on_audit(self, report)  # also an AUDIT applied from held entries (`release`)
        self._classified = report.index

    @property
    def machine(self) -> StreamStateMachine:
        return self.adapter.machine

    def trace(self, text: str) -> None:
        self.driver.trace.add(f"{self.node_id} stream: {text}")

    def fresh_store(self) -> FileStore:
        """A repair that needs an empty store (the old one cut its head beyond the group's): built beside
        the old one, as production's `ReplacementStore` (store/swap.py)."""
        build = self.repair.build
        if build is None:
            build = self.repair.build = BesideBuild(self.driver.disk, STORE_DIR, _build_opener(self))
        store = build.start(self.machine.store)
        self.trace(f"a replacement store is built in {build.build} beside the old one for the repair")
        return store

    # --- Replica interface (module `app`) -------------------------------------------------------

    @property
    def applied_index(self) -> int:
        return self.adapter.applied_index  # the Raft position: the held entries count (invariant 1)

    @property
    def digest(self) -> int | None:
        if self.adapter.deferred or self.machine.applied_index != self.adapter.applied_index:
            return None  # invariant 2
        return self.position_digest()

    def position_digest(self) -> int:
        machine = self.machine
        head = (machine.last_seq, machine.last_msg_id, machine.last_timestamp_ns, machine.last_audit_id,
                machine.config_meta_index, tuple(machine.dedupe.items()))
        return zlib.crc32(machine.raw_config, zlib.crc32(repr(head).encode()))

    def apply(self, entry: Entry) -> int | None:
        before = self.machine.applied_index
        [result] = self.adapter.apply([entry])
        if self.machine.applied_index == entry.index and before < entry.index:
            self._observe(entry, result)
        return self.digest

    def _observe(self, entry: Entry, result: object) -> None:
        machine = self.machine
        if isinstance(result, ApplyResult):
            if result.audit is not None and result.audit.index != self._classified:  # one not reported
                self.app.checker.on_audit(self, result.audit)
            if result.finding is not None:
                self.trace(f"drift found applying {entry.index}: {result.finding}")
        if entry.type is EntryType.NORMAL and entry_kind(entry.data) is EntryKind.CONSUMER:
            self.probes[entry.index] = entry.data
        if machine.health is not Health.current and not self.repair.noted_unhealthy:
            self.repair.noted_unhealthy = True
            self.trace(f"{machine.health} at {entry.index}")

    def prepare_install(self, meta: SnapshotMeta) -> None:
        self.adapter.prepare_install(meta)  # the store fsynced before the WAL drops what it covers

    def install(self, data: bytes, index: int) -> None:
        """A leader's snapshot at `index` (InstallSnapshot), through the adapter as production restores it."""
        self.leader = None
        self.adapter.restore(data)
        if self.adapter.plan is not None:
            self.trace(f"snapshot {index} from the leader needs a catch-up: {_plan_text(self.adapter.plan.plan)}")

    def snapshot_ready(self) -> bool:
        return self.adapter.snapshot_ready()

    def snapshot_data(self) -> bytes:
        return self.adapter.snapshot()  # a fault found meanwhile: `SnapshotUnavailable`, the cycle skips

    def holds(self, index: int, value: bytes) -> bool:
        return self.probes.get(index) == value

    def unsettled(self) -> str | None:
        adapter = self.adapter
        if adapter.plan is not None:
            return f"catch-up to snapshot {adapter.plan.index} pending"
        if adapter.resync_pending is not None:
            return f"resync waits for index {adapter.resync_pending}"
        if adapter.deferred:
            return f"{adapter.deferred} entries wait behind a catch-up"
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
        """This node's `StreamLeader`, built under production's conditions (`StreamReplica._leader_ready`)."""
        node = self.driver.node
        if node is None or node.role != "leader":
            self.leader = None
            return None
        if self.leader is not None and self.leader_term == node.current_term and self.machine.can_lead:
            return self.leader
        self.leader = None
        if not leader_ready(is_leader=True, noop_term=self.adapter.noop_term, current_term=node.current_term,
                            applied_index=node.log.applied_index, last_index=node.log.last_index,
                            machine=self.machine):
            return None
        self.leader = StreamLeader(self.machine, audit_interval_ns=self.app.audit_interval_ticks * TICK_NS)
        self.leader_term = node.current_term
        return self.leader


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
