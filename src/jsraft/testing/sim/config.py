"""What one simulated run is: its seed and options (`SimConfig`), and the per-seed knobs drawn from the seed.

Owns: `SimConfig` (chosen by the caller: seed, cluster size, fault kinds, steps, mutant), `Knobs` (the
rates and sizes a seed draws for itself: drop, duplicate and delay rates, clock skew, crash and partition
frequencies, compaction interval, which nodes the fault atlas allows to corrupt), and `derive_rngs`, the
one place a seed becomes the sub-generators every component uses.

Invariants:
  1. A run is a function of its `SimConfig`: every random choice comes from `random.Random(seed)` through
     `derive_rngs`, in a fixed order, so `--start N --seeds 1` replays seed N exactly.
  2. The fault atlas names at most `(nodes - 1) // 2` nodes, and only initial voters: a majority of the
     smallest voter set the run can have keeps intact durable copies of every committed entry.
  3. Fault kinds are a subset of `FAULT_KINDS` and `OPT_IN_FAULT_KINDS`; `all` means every one of
     `FAULT_KINDS` (opt-in kinds are named one by one). `storage` (lost group directory, marker or
     record; a power cut inside the witness fsync; a second process) draws its choices from its own
     generator (`storage_faults`), not from `Knobs`: the knobs of every seed are what they were before it existed.

Imports: stdlib, attrs. Reference: DESIGN.md §11 (whole-cluster simulation), TigerBeetle VOPR.
"""

from __future__ import annotations

import random

import attrs

from jsraft.errors import invariant
from jsraft.testing.sim.app_mutants import APP_MUTANTS

# lost-vote: the `faults.py` plan that loses one voter's vote at rest; part of `all` since the term query
# (`raft.term_query`) closed the last gap it showed (a voter that lost its group directory AND the node's
# record of started groups: meta seed 35, stream seed 38 of 0-299).
FAULT_KINDS = ("net", "disk", "crash", "membership", "storage", "lost-vote")  # storage: `storage_faults`
# Kinds named explicitly, never part of `all` (none now; `lost-vote` was one until the term query).
OPT_IN_FAULT_KINDS: tuple[str, ...] = ()
NODE_COUNTS = (3, 5)


def parse_faults(text: str) -> frozenset[str]:
    """`net,disk` -> {"net", "disk"}; `all` -> every kind; `none` or empty -> no faults."""
    kinds: set[str] = set()
    for word in (w.strip() for w in text.split(",")):
        if not word or word == "none":
            continue
        if word == "all":
            kinds.update(FAULT_KINDS)
        elif word in FAULT_KINDS or word in OPT_IN_FAULT_KINDS:
            kinds.add(word)
        else:
            raise ValueError(f"unknown fault kind {word!r} (known: {', '.join(FAULT_KINDS + OPT_IN_FAULT_KINDS)}, all)")
    return frozenset(kinds)


@attrs.frozen(kw_only=True)
class SimConfig:
    seed: int
    nodes: int = 3
    faults: frozenset[str] = frozenset(FAULT_KINDS)
    # Ticks of the chaotic phase; the liveness phase follows, bounded by `liveness_ticks_max`.
    steps: int = 1200
    mutant: str | None = None
    app: str = "register"  # the replicated application: register | stream | meta | consumer (module `app`)
    liveness_ticks_max: int = 1500
    trace_events_max: int = 2000
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    # How the group's leader announces a new commit (`RaftConfig.prompt_commit`): "app" as production runs
    # that app's group (`prompt_commit`), or "prompt" / "lazy" for any app.
    commit: str = "app"

    def validate(self) -> None:
        invariant(self.nodes in NODE_COUNTS, f"nodes is one of {NODE_COUNTS}")
        invariant(self.faults <= set(FAULT_KINDS + OPT_IN_FAULT_KINDS), "fault kinds are known")
        invariant(self.steps >= 0 and self.liveness_ticks_max > 0, "step bounds are sane")
        invariant(self.app in ("register", "stream", "meta", "consumer"), "app is register, stream, meta or consumer")
        invariant(self.commit in ("app", "prompt", "lazy"), "commit is app, prompt or lazy")
        if self.mutant in APP_MUTANTS:
            invariant(APP_MUTANTS[self.mutant][0] == self.app, f"mutant {self.mutant} needs its app")

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(f"n{i}" for i in range(1, self.nodes + 1))

    @property
    def prompt_commit(self) -> bool:
        """`RaftConfig.prompt_commit` of the run's group: as `commit` says, and with "app" as production
        sets it for that app's group — off for a stream group (the stream and consumer apps), on for the
        meta group and for the register app (the core alone, with etcd's default)."""
        if self.commit != "app":
            return self.commit == "prompt"
        return self.app not in ("stream", "consumer")

    @property
    def spare_id(self) -> str:
        """The node a membership change adds (a blank learner, then a voter)."""
        return f"n{self.nodes + 1}"


@attrs.frozen(kw_only=True)
class Knobs:
    """Per-seed rates (probabilities per tick unless said otherwise) and sizes."""

    drop: float
    duplicate: float
    delay_max_ticks: int
    reorder: float  # chance a message gets an extra delay (arrives after later ones)
    tick_rates: dict[str, float]
    partition: float
    heal: float
    crash: float
    power_failure: float
    crash_after_vote: float
    restart_delay_max_ticks: int
    corrupt_on_restart: float
    read_flip: float
    atlas: frozenset[str]
    propose: float
    compact_every_entries: int
    membership: float
    snapshot_chunk_bytes: int
    max_entries_per_msg: int
    max_inflight_msgs: int
    segment_bytes: int

    @classmethod
    def draw(cls, rng: random.Random, config: SimConfig) -> Knobs:
        faults = config.faults
        net, crash, disk = "net" in faults, "crash" in faults, "disk" in faults
        ids = config.node_ids
        atlas_size = rng.randint(0, (config.nodes - 1) // 2) if disk else 0
        atlas = frozenset(rng.sample(ids, atlas_size))
        skewed = net and rng.random() < 0.5
        return cls(
            drop=rng.choice((0.0, 0.01, 0.05, 0.1)) if net else 0.0,
            duplicate=rng.choice((0.0, 0.01, 0.05)) if net else 0.0,
            delay_max_ticks=rng.choice((1, 2, 3, 5)) if net else 1,
            reorder=rng.choice((0.0, 0.02, 0.1)) if net else 0.0,
            tick_rates={n: (rng.uniform(0.7, 1.3) if skewed else 1.0) for n in ids + (config.spare_id,)},
            partition=rng.choice((0.003, 0.008, 0.015)) if net else 0.0,
            heal=rng.choice((0.01, 0.03)),
            crash=rng.choice((0.002, 0.006, 0.012)) if crash else 0.0,
            power_failure=rng.choice((0.0, 0.001, 0.003)) if crash else 0.0,
            crash_after_vote=rng.choice((0.0, 0.1, 0.3)) if crash else 0.0,
            restart_delay_max_ticks=rng.choice((5, 30, 80)),
            corrupt_on_restart=rng.choice((0.3, 0.6, 0.9)) if atlas else 0.0,
            read_flip=rng.choice((0.0, 0.0, 0.01)) if atlas else 0.0,
            atlas=atlas,
            propose=rng.choice((0.1, 0.3, 0.6)),
            compact_every_entries=rng.choice((8, 20, 50, 1000)),
            membership=rng.choice((0.002, 0.005)) if "membership" in faults else 0.0,
            snapshot_chunk_bytes=rng.choice((512, 4096, 1 << 16)),
            max_entries_per_msg=rng.choice((1, 8, 64)),
            max_inflight_msgs=rng.choice((4, 16, 64)),
            segment_bytes=rng.choice((256, 2048, 16384)),
        )


@attrs.frozen(kw_only=True)
class Rngs:
    """The sub-generators of one run, each drawn from the seed's generator in a fixed order."""

    knobs: random.Random
    network: random.Random
    clock: random.Random
    faults: random.Random
    clients: random.Random
    nodes: dict[str, random.Random]


def derive_rngs(seed: int, node_ids: tuple[str, ...]) -> Rngs:
    root = random.Random(seed)

    def sub() -> random.Random:
        return random.Random(root.getrandbits(64))

    knobs, network, clock, faults, clients = sub(), sub(), sub(), sub(), sub()
    return Rngs(knobs=knobs, network=network, clock=clock, faults=faults, clients=clients,
                nodes={node_id: sub() for node_id in node_ids})
