"""`--app meta`: the simulator runs the real meta state machine; a fixed seed list passes and a replica that
silently diverges is caught.

Method: `run_batch` over `SEEDS` with `app="meta"` (even seeds 3 nodes, odd 5; every fault kind): every node
applies its committed entries to a `MetaStateMachine`, the meta leader (once its term's NOOP applied) takes
stream creates, updates and deletes, consumer creates and deletes, peer adds and removes, decided by the
machine (`propose_*`, in-flight accounting, cancelled when Raft refuses, abandoned when leadership is lost);
snapshots are `snapshot()`/`restore()`. Checked after every step: the replicas' `digest()` at every index
(with each other and with a reference replica fed the committed log), every entry's outcome identical on
every replica; at the end every member's snapshot bytes equal the reference's. The mutant
`meta-skip-peer-remove` makes `n1` skip every PEER_REMOVE; it must be caught as `state-machine-safety`.
"""

from __future__ import annotations

from jsraft.testing.sim import run_batch, run_seed
from jsraft.testing.sim.batch import config_for

SEEDS = range(0, 40)  # sized to the time budget of tests/sim (~0.5 CPU-s per meta seed)
MUTANT_SEEDS_MAX = 40


def test_fixed_meta_seeds_pass_with_all_faults() -> None:
    configs = [config_for(seed, nodes="mixed", app="meta") for seed in SEEDS]
    batch = run_batch(configs, jobs=2)
    if batch.failed:
        first = batch.failures[0]
        lines = [f"seed {f.seed}: [{f.invariant}] {f.detail}" for f in batch.failures]
        raise AssertionError(f"{batch.summary()}\n" + "\n".join(lines) + f"\n--- trace of seed {first.seed} "
                             f"---\n{first.trace}")
    assert batch.passed == len(SEEDS) and batch.steps >= len(SEEDS) * configs[0].steps


def test_a_meta_run_does_meta_work() -> None:
    result = run_seed(config_for(1, app="meta"))
    assert result.ok, f"[{result.invariant}] {result.detail}"
    stats = result.stats
    for kind in ("create", "update", "delete", "consumer", "peer_add", "peer_remove"):
        assert stats.get(f"meta_{kind}", 0) > 0, f"no {kind} was proposed: {stats}"
    assert stats["meta_results_compared"] > 100 and stats["meta_reference_checks"] > 50


def test_a_replica_skipping_peer_removes_is_caught() -> None:
    configs = [config_for(seed, nodes="mixed", app="meta", mutant="meta-skip-peer-remove")
               for seed in range(MUTANT_SEEDS_MAX)]
    batch = run_batch(configs, jobs=2, stop_at_first_failure=True)
    assert batch.failed == 1, f"the skipped peer removes survived {MUTANT_SEEDS_MAX} seeds"
    caught = batch.failures[0]
    assert caught.invariant == "state-machine-safety", caught.detail
    honest = run_seed(config_for(caught.seed, nodes="mixed", app="meta"))
    assert honest.ok, f"the real code fails seed {caught.seed} too: [{honest.invariant}] {honest.detail}"
