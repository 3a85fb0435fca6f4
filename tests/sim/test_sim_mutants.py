"""Each rule has teeth: with one rule disabled (a mutant), the simulator finds a violation within 500 seeds.

Method: for each mutant in `jsraft.testing.sim.mutants`, run seeds 0, 1, 2, … with every fault kind and stop
at the first failing seed; it must come before seed 500 and be reported under the invariant the rule
protects (or, for a rule whose breakage can show up several ways, one of those), and the real code must pass
that same seed. Seeds at which each mutant was first caught when this test was written (steps 1200, mixed
3/5 nodes): ack-before-fsync 0 (durability), truncate-on-corruption 37 (leader-completeness),
repairing-node-votes 2 (repairing-vote), no-prevote 0 (term-inflation), forget-vote-on-restart 5
(double-vote); ack-before-combined-fsync 0 (acked-lost); leader-counts-unsynced, added with leader pipelining,
20 (state-machine-safety). The simulated leader fsync lasting 1-5 ticks (pipelining) moved the others' first
catches: truncate-on-corruption 44 (crash: the core's rule-5 invariant refused to truncate a committed entry;
with 1-6 ticks it was seed 5, double-vote, a flipped hard-state slot unnoticed), forget-vote-on-restart 4,
no-prevote 1.
"""

from __future__ import annotations

import pytest

from jsraft.testing.sim import MUTANTS, run_batch, run_seed
from jsraft.testing.sim.batch import config_for

SEEDS_MAX = 500
EXPECTED = {
    # (or, with the storage faults' witness power cuts, every voter's WAL comes back empty after a power
    # cut although each node's record says the group started: all repairing, the group halts: `liveness`)
    "ack-before-fsync": {"durability", "acked-lost", "leader-completeness", "state-machine-safety", "liveness"},
    # (a damaged hard state then goes unnoticed too: the node votes again in a term it voted in; or the
    # core's own rule-5 check stops a truncation below the commit index: `crash`)
    "truncate-on-corruption": {"leader-completeness", "acked-lost", "state-machine-safety", "log-matching",
                               "double-vote", "crash"},
    "repairing-node-votes": {"repairing-vote"},
    "no-prevote": {"term-inflation"},
    "forget-vote-on-restart": {"double-vote", "election-safety"},
    "ack-before-combined-fsync": {"durability", "acked-lost", "leader-completeness", "state-machine-safety",
                                  "double-vote", "election-safety"},
    # A commit resting on the leader's unsynced copy survives its crash on a minority only.
    # (or the core's own rule-5 check refuses to truncate the entry a follower saw committed: `crash`)
    "leader-counts-unsynced": {"state-machine-safety", "leader-completeness", "acked-lost", "log-matching", "crash"},
    # A vote lost with a damaged hard-state slot, cast again after the repair (issue #14, hole 3).
    "no-vote-fence": {"double-vote", "election-safety"},
}


def test_every_mutant_is_listed() -> None:
    assert set(EXPECTED) == set(MUTANTS)


# Not caught by the simulator yet (issue #14): 1000 seeds (mixed 3/5 nodes, all faults, with the at-rest
# damage `lose-last-vote` after a vote) passed on 2026-11-27. The double vote needs a lost vote whose
# candidate did not win while the old leader repairs the voter in the term below; the Raft-core test
# `tests/raft/test_raft_mutants.py::test_mutant_no_vote_fence_votes_again_one_term_above_its_restored_term`
# shows the mutant's second vote and the real core's refusal.
NOT_YET_CAUGHT = {"no-vote-fence"}


@pytest.mark.parametrize("mutant", [
    pytest.param(name, marks=pytest.mark.skip(reason="not caught by the simulator within 1000 seeds yet"))
    if name in NOT_YET_CAUGHT else name for name in sorted(EXPECTED)])
def test_mutant_is_caught_within_500_seeds(mutant: str) -> None:
    configs = [config_for(seed, nodes="mixed", mutant=mutant) for seed in range(SEEDS_MAX)]
    batch = run_batch(configs, jobs=2, stop_at_first_failure=True)
    assert batch.failed == 1, f"mutant {mutant} survived {SEEDS_MAX} seeds"
    caught = batch.failures[0]
    assert caught.invariant in EXPECTED[mutant], f"seed {caught.seed}: [{caught.invariant}] {caught.detail}"
    assert caught.trace, "a failure comes with its trace"
    honest = run_seed(config_for(caught.seed, nodes="mixed"))
    assert honest.ok, f"the real code fails seed {caught.seed} too: [{honest.invariant}] {honest.detail}"
    print(f"{mutant}: caught at seed {caught.seed} by {caught.invariant}: {caught.detail}")
