#!/usr/bin/env python3
"""Run chaos scenarios S01–S12 (../shared/CHAOS.md) and S13 against a real 3-node jsraft cluster.

    python scripts/chaos/run.py --scenario S03 --seed 1 --duration 60 [--json] [--out DIR]
    python scripts/chaos/run.py --all --seed 1            # every scenario at its documented duration
    python scripts/chaos/run.py --smoke --seed 1 --duration 20   # the CI set: S01 S02 S03 S04 S09 S10 S13
    python scripts/chaos/run.py --scenario S03 --seed 1 --duration 120 --publishers 12   # heavier load

Each run leaves `DIR/<scenario>-seed<N>/`: the history (history.jsonl, faults.jsonl, final/), node logs
(cluster/logs/), the checker's report.json and summary.txt. Prints a summary per run and, last,
`N passed, N failed`; exit 0 only if every run passed. See scripts/chaos/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from jsraft.testing.chaos.runner import run_dir, run_scenario, used
from jsraft.testing.chaos.scenarios import SCENARIOS, SMOKE


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="repeatable")
    which.add_argument("--all", action="store_true", help="S01..S13")
    which.add_argument("--smoke", action="store_true", help="the CI smoke set: " + " ".join(SMOKE))
    parser.add_argument("--seed", type=int, action="append", help="repeatable (default 1)")
    parser.add_argument("--duration", type=float, help="seconds of faults per scenario (default: documented)")
    parser.add_argument("--out", default=None, help="output directory (default ./chaos-out/<time>)")
    parser.add_argument("--rate", type=float, help="publishes per second per publisher (default: workload's)")
    parser.add_argument("--publishers", type=_positive, help="W-pub clients, pinned round-robin to the "
                        "nodes (default 6: two per node)")
    parser.add_argument("--mutant", help="start nodes with a mutant (jsraft.testing.chaos.mutants): the run "
                        "should then FAIL")
    parser.add_argument("--json", action="store_true", help="print one JSON object per run instead of text")
    parser.add_argument("--secure-links", action="store_true", help="mutual TLS and a cluster secret on the "
                        "node-to-node links (certificates made for the run under <out>/<run>/pki), and "
                        "clients authenticating as a user")
    args = parser.parse_args(argv)
    ids = sorted(SCENARIOS) if args.all else list(SMOKE) if args.smoke else args.scenario
    seeds = args.seed or [1]
    out = args.out or os.path.join("chaos-out", time.strftime("%Y%m%d-%H%M%S"))
    taken = [run_dir(out, s, seed) for s in ids for seed in seeds if used(run_dir(out, s, seed))]
    if taken:
        print(f"error: {', '.join(taken)} already hold(s) a chaos run; choose another --out "
              "(nothing was started)", file=sys.stderr)
        return 2
    passed = failed = 0
    for scenario_id in ids:
        for seed in seeds:
            result = run_scenario(scenario_id, seed, args.duration, out, rate=args.rate, mutant=args.mutant,
                                  secure_links=args.secure_links, publishers=args.publishers)
            if args.json:
                print(json.dumps({"scenario": scenario_id, "seed": seed, "passed": result.passed,
                                  "out_dir": result.out_dir, "error": result.error,
                                  "report": result.report}, sort_keys=True), flush=True)
            else:
                print(result.summary, flush=True)
            passed += result.passed
            failed += not result.passed
    print(f"{passed} passed, {failed} failed", file=sys.stderr if args.json else sys.stdout)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
