"""`Simulation`: one seed, one whole cluster — the deterministic simulator's main loop and its result.

Owns: building a run from a `SimConfig` (sub-generators, knobs, network, clock, disks, node drivers,
checkers, faults, clients, membership), the step loop, and `run_seed()`, which runs the chaotic phase and
the liveness phase and turns any `Violation` or unexpected exception into a failed `SeedResult` carrying
the seed, the invariant, and the trace.

One step, in this order:
  1. the clock advances one tick; faults act (restarts first, then partitions, crashes, power failures);
     membership may propose a change;
  2. every running node gets its ticks (`SimClock.ticks_for`);
  3. every message due by now is delivered, in delivery order, to running nodes (others drop it);
  4. clients may propose at a leader;
  5. every running node processes its Ready (one persist + fsync covering everything the step produced:
     group commit), sends, applies, advances; acknowledgements go to the clients and the checker;
  6. every running replica does its app's runtime work (`Replica.step`: e.g. a stream catch-up);
  7. the whole-cluster checkers run (`SafetyChecker.after_step`, the app's `after_step`,
     `TermInflationChecker.after_step`).

The application (`SimConfig.app`, module `app`): the register (default), the stream or the meta state
machine; the workload is the app's.

Invariants:
  1. A run is a function of its `SimConfig`: no wall clock, no global random, no iteration over unordered
     collections without sorting (config invariant 1).
  2. Checkers run after every step of both phases; the first violation ends the run.
  3. Failed seeds are replayed with `verbose=True` by `run_seed` to get a message-level trace; replaying
     consumes no extra randomness, so the replay fails the same way.

Imports: stdlib, attrs, `jsraft.raft`, `jsraft.testing.simdisk`, siblings. Reference: DESIGN.md §11.
"""

from __future__ import annotations

import random
import time
from functools import partial
import traceback

import attrs

from jsraft.raft import RaftConfig
from jsraft.testing.sim.app import make_app
from jsraft.testing.sim.atlas import FaultAtlas
from jsraft.testing.sim.availability import TermInflationChecker
from jsraft.testing.sim.checkers import SafetyChecker
from jsraft.testing.sim.clock import SimClock
from jsraft.testing.sim.config import Knobs, SimConfig, derive_rngs
from jsraft.testing.sim.faults import FaultScheduler
from jsraft.testing.sim.liveness import final_checks, run_liveness
from jsraft.testing.sim.membership import MembershipChanges
from jsraft.testing.sim.mutants import node_class
from jsraft.testing.sim.network import SimNetwork
from jsraft.testing.sim.node import NodeDriver, NodeSetup
from jsraft.testing.sim.node_storage import NodeStorage
from jsraft.testing.sim.storage_faults import StorageFaults
from jsraft.testing.sim.trace import Trace
from jsraft.testing.sim.violation import Violation
from jsraft.testing.simdisk import SimDisk

_REORDER_DELAY_MAX_TICKS = 8


@attrs.frozen(kw_only=True)
class SeedResult:
    seed: int
    ok: bool
    invariant: str | None = None
    detail: str | None = None
    steps: int = 0
    seconds: float = 0.0
    trace: str = ""
    stats: dict[str, int] = attrs.field(factory=dict)


class Simulation:
    def __init__(self, config: SimConfig, *, verbose: bool = False) -> None:
        config.validate()
        self.config = config
        self.verbose = verbose
        all_ids = config.node_ids + (config.spare_id,)
        self.rngs = derive_rngs(config.seed, all_ids)
        self.knobs = knobs = Knobs.draw(self.rngs.knobs, config)
        self.app = make_app(config, self.rngs.knobs)
        self.trace = Trace(config.trace_events_max)
        self.network = SimNetwork(self.rngs.network, all_ids, drop=knobs.drop, duplicate=knobs.duplicate,
                                  delay_max_ticks=knobs.delay_max_ticks, reorder=knobs.reorder)
        self.clock = SimClock({n: knobs.tick_rates[n] for n in config.node_ids})
        self.checker = SafetyChecker()
        self.terms = TermInflationChecker(
            isolation_ticks_min=knobs.delay_max_ticks + _REORDER_DELAY_MAX_TICKS + 2 * config.election_ticks)
        self.atlas = FaultAtlas(knobs.atlas)
        self.faults = FaultScheduler(self.rngs.faults, knobs, config.faults)
        self.storage_faults = StorageFaults(config, knobs.atlas)
        self.clients = self.app.workload(self)
        self.membership = MembershipChanges(self.rngs.clients, knobs.membership, config.node_ids,
                                            config.spare_id)
        self.node_class = node_class(config.mutant)
        self.drivers: dict[str, NodeDriver] = {}
        self.steps = 0
        self._seen: dict[str, tuple[object, ...]] = {}
        self.trace.add(f"seed {config.seed}: {config.nodes} nodes, faults {','.join(sorted(config.faults))}, "
                       f"mutant {config.mutant or '-'}, atlas {self.atlas.describe()}, knobs {knobs}"
                + (f", app {self.app.describe()}" if config.app != "register" else "")
                + ("" if config.prompt_commit else ", commit announced lazily")
                + (f", {self.storage_faults.describe()}" if self.storage_faults.active else ""))
        for node_id in config.node_ids:
            self._add_driver(node_id, bootstrap=config.node_ids).start()

    def _add_driver(self, node_id: str, *, bootstrap: tuple[str, ...] | None) -> NodeDriver:
        knobs, config = self.knobs, self.config
        raft_config = RaftConfig(
            node_id=node_id, election_ticks=config.election_ticks, heartbeat_ticks=config.heartbeat_ticks,
            snapshot_chunk_bytes=knobs.snapshot_chunk_bytes, max_entries_per_msg=knobs.max_entries_per_msg,
            max_inflight_msgs=knobs.max_inflight_msgs, prompt_commit=config.prompt_commit)
        corruptible = self.atlas.allows(node_id) or self.storage_faults.loses(node_id)
        setup = NodeSetup(node_id=node_id, raft_config=raft_config, node_class=self.node_class,
                          bootstrap_voters=bootstrap, corruptible=corruptible, segment_bytes=knobs.segment_bytes,
                          compact_every_entries=knobs.compact_every_entries)
        node_rng = self.rngs.nodes[node_id]
        disk = SimDisk(_sub(node_rng), corruption_allowed=corruptible,
                       read_flip_probability=knobs.read_flip if corruptible else 0.0)
        storage = NodeStorage(node_id, forgetful=config.mutant == "forget-lost-groups",
                              lock=config.mutant != "no-store-lock", ceiling=config.mutant != "no-vote-ceiling")
        driver = NodeDriver(setup, node_rng, disk, self.network, self.checker, self.trace, self.app, storage)
        driver.before_restart = partial(self.storage_faults.at_rest, self)
        driver.on_power_cut = partial(self.storage_faults.on_power_cut, self)
        driver.verbose = self.verbose
        driver.on_vote_granted = self.faults.on_vote_granted
        driver.on_commit_before_own_fsync = self.faults.on_commit_before_own_fsync
        driver.members = lambda: tuple(sorted(self.drivers))
        self.drivers[node_id] = driver
        return driver

    def add_spare(self) -> None:
        spare = self.config.spare_id
        self.clock.rates[spare] = self.knobs.tick_rates[spare]
        self._add_driver(spare, bootstrap=None).start()
        self.trace.add(f"membership: started blank node {spare}")

    # --- Stepping -----------------------------------------------------------------------------------

    def leader_id(self) -> str | None:
        """The running leader with the highest term, if any."""
        best: tuple[int, str] | None = None
        for node_id, driver in self.drivers.items():
            node = driver.node
            if node is not None and node.role == "leader" and (best is None or node.current_term > best[0]):
                best = (node.current_term, node_id)
        return best[1] if best is not None else None

    def live(self) -> list[tuple[str, object]]:
        return [(n, d.node) for n, d in sorted(self.drivers.items()) if d.node is not None]

    def step(self) -> None:
        self.clock.advance()
        now = self.trace.now = self.clock.now
        self.steps += 1
        self.faults.step(self)
        self.storage_faults.step(self)
        self.membership.step(self)
        drivers = self.drivers
        order = sorted(drivers)
        for node_id in order:
            if drivers[node_id].up:
                drivers[node_id].tick(self.clock.ticks_for(node_id))
        inbox: dict[str, list] = {}
        for message in self.network.due(now):
            if message.to_id in drivers and drivers[message.to_id].up:
                inbox.setdefault(message.to_id, []).append(message)
                self.terms.on_deliver(message.to_id, message)
        for node_id in sorted(inbox):
            drivers[node_id].deliver(inbox[node_id])
        self.clients.step(self)
        for node_id in order:
            for index, term, value in drivers[node_id].pump(now):
                if self.clients.on_ack(node_id, index, term, value):  # a client write: held to it forever
                    self.checker.on_ack(index, term, value, self.checker.leaders(self.live()))
        for node_id in order:
            if drivers[node_id].up:
                drivers[node_id].replica.step(self)
        self._observe()
        self.checker.after_step(self.live())
        self.app.after_step(self)
        self.terms.after_step(now, drivers, self.network)

    def _observe(self) -> None:
        """Trace role, term, leader and repairing changes (cheap: one tuple per running node per step)."""
        for node_id, driver in self.drivers.items():
            node = driver.node
            if node is None:
                continue
            seen = (driver.incarnation, node.role, node.current_term, node.leader_id, node.repairing)
            before = self._seen.get(node_id)
            if before == seen:
                continue
            self._seen[node_id] = seen
            if before is None or before[0] != seen[0] or before[1:4] != seen[1:4]:
                leader = f" leader={node.leader_id}" if node.leader_id else ""
                self.trace.add(f"{node_id}: {node.role} term={node.current_term}{leader}"
                               f"{' repairing' if node.repairing else ''}")
            elif before[4] and not seen[4]:
                self.trace.add(f"{node_id}: repaired (log through {node.log.last_index})")

    def close(self) -> None:
        """Release every node's store lock and its temporary lock directory (`node_storage` invariant 3)."""
        for driver in self.drivers.values():
            driver.storage.close()

    def stats(self) -> dict[str, int]:
        return {
            "proposed": self.clients.proposed, "acknowledged": self.clients.acknowledged,
            "delivered": self.network.delivered, "dropped": self.network.dropped,
            "terms": max(self.checker.leader_of_term, default=0), **self.faults.counts,
            "membership_proposals": self.membership.proposals,
            "transfers": self.membership.transfers, "applied_checks": self.checker.checks,
            "snapshots_refused": sum(d.snapshots_refused for d in self.drivers.values()),
            **self.storage_faults.counts,
            **self.clients.stats(), **self.app.stats(),
        }


def _sub(rng: random.Random) -> random.Random:
    return random.Random(rng.getrandbits(64))


def run_seed(config: SimConfig, *, verbose: bool = False, replay_failures: bool = True) -> SeedResult:
    """Run one seed: chaos for `config.steps` steps, then liveness and the final checks."""
    started = time.perf_counter()
    sim: Simulation | None = None
    try:
        sim = Simulation(config, verbose=verbose)
        for _ in range(config.steps):
            sim.step()
        run_liveness(sim)
        final_checks(sim)
    except Violation as violation:
        return _failed(config, sim, violation.invariant, violation.detail, started, verbose, replay_failures)
    except Exception as error:  # the code under test raised: an invariant() or a plain bug
        detail = f"{type(error).__name__}: {error} ({_where(error)})"
        return _failed(config, sim, "crash", detail, started, verbose, replay_failures)
    finally:
        if sim is not None:
            sim.close()
    assert sim is not None
    return SeedResult(seed=config.seed, ok=True, steps=sim.steps, seconds=time.perf_counter() - started,
                      stats=sim.stats())


def _where(error: BaseException) -> str:
    """The innermost frame outside `jsraft.errors`: where the code under test gave up."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.endswith("errors.py")]
    if not frames:
        return "?"
    frame = frames[-1]
    return f"{frame.filename.rpartition('/src/')[2]}:{frame.lineno} in {frame.name}"


def _failed(config: SimConfig, sim: Simulation | None, invariant: str, detail: str, started: float,
            verbose: bool, replay: bool) -> SeedResult:
    seconds = time.perf_counter() - started
    trace = sim.trace.render() if sim is not None else ""
    if replay and not verbose:
        again = run_seed(config, verbose=True, replay_failures=False)
        if again.invariant == invariant:
            trace = again.trace
    return SeedResult(seed=config.seed, ok=False, invariant=invariant, detail=detail,
                      steps=sim.steps if sim is not None else 0, seconds=seconds, trace=trace,
                      stats=sim.stats() if sim is not None else {})
