"""The whole-cluster simulator passes a fixed list of seeds with every fault kind, on 3- and 5-node clusters.

Method: `run_batch` over `SEEDS` (even seeds 3 nodes, odd seeds 5; `--faults all`: partitions of every shape,
loss, duplication, reordering, clock skew, crashes, coordinated power failures, crash-right-after-voting,
corruption at rest and on read on a fixed minority, one add/promote/remove membership cycle) in two worker
processes. Every seed must pass the safety checkers after every step, converge in the liveness phase, and
keep every acknowledged write applied everywhere and durable on a majority. A failure names the seed and the
invariant and prints the first failing seed's trace; replay it with
`JSRAFT_SEED=<seed> pytest tests/sim/test_sim_repro.py` or `python -m jsraft.testing.sim --start <seed> --seeds 1`.
"""

from __future__ import annotations

from jsraft.testing.sim import run_batch
from jsraft.testing.sim.batch import config_for

SEEDS = range(0, 500)
STEPS = 1200  # chaotic-phase ticks per seed (the CLI default); the liveness phase follows


def test_fixed_seeds_pass_with_all_faults() -> None:
    configs = [config_for(seed, nodes="mixed", steps=STEPS) for seed in SEEDS]
    assert {c.nodes for c in configs} == {3, 5}
    batch = run_batch(configs, jobs=2)
    if batch.failed:
        first = batch.failures[0]
        lines = [f"seed {f.seed}: [{f.invariant}] {f.detail}" for f in batch.failures]
        raise AssertionError(f"{batch.summary()}\n" + "\n".join(lines) + f"\n--- trace of seed {first.seed} "
                             f"---\n{first.trace}")
    assert batch.passed == len(SEEDS)
    # The runs did work: every seed stepped through both phases.
    assert batch.steps >= len(SEEDS) * STEPS
