"""`scripts/chaos/run.py --publishers N` runs the scenario with N W-pub clients, and says so.

Method: issue #14 asks for S03 (the coordinated power cut) "with more publishers"; the runner had six fixed.
Here the script runs S01 (no faults) for a few seconds with `--publishers 4` on a real 3-node cluster, and
the run's own record is read back: the history holds publish invocations from exactly the processes
`p0..p3`, pinned round-robin to the three nodes (`p3` on `n1` again), the scenario's start event carries the
load, the summary prints it, and the verdict is still the checker's (PASS). A publisher count below one is
refused by the argument parser before anything starts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chaos" / "run.py"
TIMEOUT_S = 300  # setup, heal, final phase and checker on a loaded 2-core machine


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_publishers_option_sets_the_number_of_publishers(tmp_path: Path) -> None:
    out = tmp_path / "chaos"
    argv = [sys.executable, str(SCRIPT), "--scenario", "S01", "--seed", "1", "--duration", "4",
            "--publishers", "4", "--json", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    run = out / "S01-seed1"
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    publishes = [e for e in _jsonl(run / "history.jsonl") if e.get("f") == "publish" and e.get("type") == "invoke"]
    pinned = {(e["process"], e["node"]) for e in publishes if re.fullmatch(r"p\d+", e["process"])}
    assert pinned == {("p0", "n1"), ("p1", "n2"), ("p2", "n3"), ("p3", "n1")}
    start = next(e for e in _jsonl(run / "faults.jsonl") if e["kind"] == "scenario" and e["phase"] == "start")
    assert start["detail"]["publishers"] == 4
    assert "load: 4 publishers x 10.0/s" in (run / "summary.txt").read_text()


def test_publishers_below_one_are_refused_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--scenario", "S01", "--publishers", "0",
                           "--out", str(tmp_path / "chaos")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--publishers: must be at least 1, not 0" in done.stderr
    assert not (tmp_path / "chaos").exists()
