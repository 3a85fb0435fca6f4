"""Smoke run of `bench/publish_trace.py`: its time budget is measured, not made up.

Method: the bench runs as a process, exactly as from the command line, with a handful of sync publishes;
the JSON on its last line must hold one row per stage for exactly the publishes asked for (the warm-up's
left out), every stage with a positive time (each mark was found after the one before), fsyncs that took
time, and stage means that add up to the mean total (the stages tile the path with no gap). No rate or
latency is asserted: this is a benchmark, not a performance test.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
PUBLISHES = 30


def test_publish_trace_reports_a_budget_of_every_stage() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "publish_trace.py"), "--publishes", str(PUBLISHES)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["publishes"] == PUBLISHES
    stages = {row["stage"]: row for row in result["stages"]}
    assert len(stages) == 15
    assert all(row["p50_us"] > 0 and row["mean_us"] > 0 for row in stages.values()), stages
    assert stages["fsync 1: the WAL segment"]["p50_us"] > 1, stages
    total = sum(row["mean_us"] for row in stages.values())
    assert abs(total - result["total_mean_us"]) <= 0.01 * result["total_mean_us"] + 1, (total, result)
