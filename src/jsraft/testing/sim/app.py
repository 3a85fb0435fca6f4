"""The replicated application a simulated cluster runs: `App` (one per run) and its per-node `Replica`s.

Owns: the seam between the node driver (`node`: the production Ready cycle) and the state machine committed
entries are applied to, so one simulator drives the tiny `Register` (`--app register`, the default), the
stream state machine (`--app stream`, `stream_app`; with its consumers: `--app consumer`, `consumer_app`)
or the meta state machine (`--app meta`, `meta_app`).

An `App` (built once per run by `make_app`) answers:
  `open(driver, index, data)`    a node's replica at start, from the snapshot its WAL recovered (or none);
  `install(driver, replica, data, index)`   a leader's snapshot (InstallSnapshot) installed on a replica;
  `workload(sim)`                the clients (`step`, `rate`, `proposed`, `acknowledged`, `on_ack`, `stats`);
  `probe(n)`                     the data of the n-th liveness probe entry;
  `after_step(sim)`              app checks once per step (audits, per-index results);
  `check_members(sim, group)`    end-of-run: every acknowledged write on every member;
  `durable(sim, driver)`         end-of-run: a predicate `(index, term, value) -> bool` over what the
                                 driver's disk holds after a power failure.
A `Replica` has `applied_index` (the Raft position: driver invariant 2), `digest` (compared across
replicas at each index by `SafetyChecker`), `apply(entry) -> digest or None` (None: this replica cannot
vouch for its state at that index, e.g. the entry waits behind a catch-up), `snapshot_data()` (may raise
`SnapshotUnavailable`: the cycle skips that compaction), an optional `snapshot_ready()` (False: not now),
`prepare_install(meta)` (a leader's snapshot is about to be made durable in the WAL, which then
drops the entries it covers), `holds(index, value)` (a liveness probe), `unsettled()` (None, or why it has
not converged), and `step(sim)` (per-step runtime work such as a catch-up).

Invariants:
  1. `RegisterApp` is exactly the simulator's behaviour before apps existed: the same random draws, the same
     checks, the same results and trace per seed.
  2. Apps draw their own choices from the generator they are given (`rngs.knobs` after the knobs, and the
     clients' generator), never from a global one.

Imports: stdlib, `jsraft.raft`, `jsraft.wal`, siblings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.raft import Entry, SnapshotMeta
from jsraft.testing.sim.clients import Clients
from jsraft.testing.sim.register import Register
from jsraft.testing.sim.violation import Violation
from jsraft.wal import Wal

if TYPE_CHECKING:
    import random

    from jsraft.testing.sim.config import SimConfig
    from jsraft.testing.sim.node import NodeDriver
    from jsraft.testing.sim.simulator import Simulation

APPS = ("register", "stream", "meta", "consumer")


class RegisterReplica(Register):
    """The register, as a `Replica`."""

    def apply(self, entry: Entry) -> int:  # type: ignore[override]
        super().apply(entry)
        return self.digest

    def snapshot_data(self) -> bytes:
        return self.encode()

    def holds(self, index: int, value: bytes) -> bool:
        return self.value_at(index) == value

    def unsettled(self) -> str | None:
        return None

    def step(self, sim: Simulation) -> None:
        return None

    def prepare_install(self, meta: SnapshotMeta) -> None:
        return None


def decode_register(node_id: str, data: bytes, index: int) -> RegisterReplica:
    try:
        register = RegisterReplica.decode(data)
    except ValueError as error:
        raise Violation("state-machine-safety", f"{node_id}: snapshot {index} does not decode: "
                                                f"{error}") from None
    if register.applied_index != index:
        raise Violation("state-machine-safety", f"{node_id}: snapshot {index} holds a register "
                                                f"applied through {register.applied_index}")
    return register  # type: ignore[return-value]


class RegisterApp:
    name = "register"

    def describe(self) -> str:
        return "register"

    def open(self, driver: NodeDriver, index: int, data: bytes | None) -> RegisterReplica:
        return RegisterReplica() if data is None else decode_register(driver.node_id, data, index)

    def install(self, driver: NodeDriver, replica: object, data: bytes, index: int) -> RegisterReplica:
        return decode_register(driver.node_id, data, index)

    def workload(self, sim: Simulation) -> Clients:
        return Clients(sim.rngs.clients, sim.knobs.propose)

    def probe(self, number: int) -> bytes:
        return f"probe-{number}".encode()

    def after_step(self, sim: Simulation) -> None:
        return None

    def stats(self) -> dict[str, int]:
        return {}

    def check_members(self, sim: Simulation, group: tuple[str, ...]) -> None:
        acked = sorted(sim.checker.acked.items(), key=lambda item: item[1])
        for node_id in group:
            register = sim.drivers[node_id].replica
            for value, (index, term) in acked:
                if register.value_at(index) != value:
                    raise Violation("acked-lost", f"{node_id} has {register.value_at(index)!r} at {index}, "
                                                  f"not acknowledged {value!r} (term {term})")

    def durable(self, sim: Simulation, driver: NodeDriver):  # type: ignore[no-untyped-def]
        """A predicate: does this disk durably hold `value` at `index` with `term`?"""
        wal, recovered = Wal.open(driver.disk)
        wal.close()
        entries = {e.index: e for e in recovered.entries}
        snapshot_index, register = 0, Register()
        if recovered.snapshot is not None:
            meta, data = recovered.snapshot
            snapshot_index, register = meta.index, Register.decode(data)

        def held(index: int, term: int, value: bytes) -> bool:
            if index <= snapshot_index:
                return register.value_at(index) == value
            entry = entries.get(index)
            return entry is not None and entry.term == term and entry.data == value

        return held


def make_app(config: SimConfig, rng: random.Random):  # type: ignore[no-untyped-def]
    """The run's `App`; `rng` is the knobs generator, already past `Knobs.draw`."""
    name = config.app
    if name == "register":
        return RegisterApp()
    if name == "stream":
        from jsraft.testing.sim.stream_app import StreamApp

        return StreamApp(rng, config.mutant)
    if name == "consumer":
        from jsraft.testing.sim.consumer_app import ConsumerApp

        return ConsumerApp(rng, config.mutant)
    if name == "meta":
        from jsraft.testing.sim.meta_app import MetaApp

        return MetaApp(rng, config)
    raise ValueError(f"unknown app {name!r} (known: {', '.join(APPS)})")
