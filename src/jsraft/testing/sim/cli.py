"""The simulator's command line: `python -m jsraft.testing.sim --seeds N [options]`.

Owns: argument parsing and output. Options: `--seeds N` (how many), `--start S` (first seed, default 0),
`--nodes 3|5|mixed` (default mixed: odd seeds 5 nodes, even seeds 3),
`--faults net,disk,crash,membership,storage,lost-vote|all|none` (default all), `--app register|stream|meta|consumer`
(the replicated state machine, default register), `--mutant NAME`
(a Raft mutant, an app mutant such as `stream-skip-delete` with its app, or a storage mutant: `storage_faults`),
`--steps K` (chaotic-phase ticks per seed), `--jobs J` (worker processes),
`--stop-at-first-failure`, `--json`, `--trace` (print each failure's trace; always on with `--seeds 1`).
Prints one line per failing seed (seed, invariant, detail; in seed order, after the run), then exactly `N passed, N failed` on its own
line; with `--json`, one JSON object (`seeds`, `passed`, `failed`, `failures`, `steps`, `seconds`) after it.
Exit status 1 if any seed failed (a mutant run reports its failures the same way).

Reproduce a failure with `--start <seed> --seeds 1` (and the same `--app`, `--nodes`, `--faults`, `--steps`,
`--mutant`), or `JSRAFT_SEED=<seed> pytest tests/sim -k repro`.

Imports: stdlib, siblings.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from jsraft.testing.sim.app import APPS
from jsraft.testing.sim.app_mutants import APP_MUTANTS
from jsraft.testing.sim.batch import config_for, run_batch
from jsraft.testing.sim.config import parse_faults
from jsraft.testing.sim.mutants import MUTANTS
from jsraft.testing.sim.storage_faults import STORAGE_MUTANTS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jsraft.testing.sim",
                                     description="Deterministic whole-cluster simulation of jsraft's Raft + WAL.")
    parser.add_argument("--seeds", type=int, required=True, help="number of seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--nodes", default="mixed", choices=("3", "5", "mixed"))
    parser.add_argument("--faults", default="all",
                        help="comma list of net,disk,crash,membership,storage,lost-vote; all; none")
    parser.add_argument("--app", default="register", choices=APPS,
                        help="the replicated state machine: register (default), stream, meta or consumer (stream + consumers)")
    parser.add_argument("--mutant", choices=sorted(MUTANTS) + sorted(APP_MUTANTS) + sorted(STORAGE_MUTANTS), default=None)
    parser.add_argument("--commit", default="app", choices=("app", "prompt", "lazy"),
                        help="how a leader announces a new commit: as production does for the app's group "
                             "(default: lazy for stream and consumer, prompt otherwise), or always prompt/lazy")
    parser.add_argument("--steps", type=int, default=None, help="chaotic-phase ticks per seed")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--stop-at-first-failure", action="store_true")
    parser.add_argument("--json", action="store_true", help="also print a JSON summary")
    parser.add_argument("--trace", action="store_true", help="print the trace of each failing seed")
    return parser


def main(argv: list[str] | None = None) -> int:
    # The production adapters log their repairs; a run's account of them is its trace, not stderr.
    logging.getLogger("jsraft").addHandler(logging.NullHandler())
    parser = _parser()
    args = parser.parse_args(argv)
    if args.mutant in APP_MUTANTS and APP_MUTANTS[args.mutant][0] != args.app:
        parser.error(f"--mutant {args.mutant} needs --app {APP_MUTANTS[args.mutant][0]}")
    options: dict[str, object] = {"faults": parse_faults(args.faults), "mutant": args.mutant, "app": args.app,
                                  "commit": args.commit}
    if args.steps is not None:
        options["steps"] = args.steps
    configs = [config_for(seed, nodes=args.nodes, **options) for seed in range(args.start, args.start + args.seeds)]
    show_trace = args.trace or args.seeds == 1

    batch = run_batch(configs, jobs=args.jobs, stop_at_first_failure=args.stop_at_first_failure)
    for failure in batch.failures:
        print(f"seed {failure.seed} FAILED [{failure.invariant}] {failure.detail}")
    if show_trace:
        for failure in batch.failures:
            print(f"--- trace of seed {failure.seed} ({failure.invariant}) ---")
            print(failure.trace)
            print(f"--- end of trace; seed {failure.seed}: {failure.invariant}: {failure.detail} ---")
    print(batch.summary())
    if args.json:
        print(json.dumps(batch.as_json()))
    return 1 if batch.failed else 0


if __name__ == "__main__":
    sys.exit(main())
