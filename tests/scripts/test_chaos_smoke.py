"""CI smoke of the chaos scenarios (issue #7): S01, S02, S03, S04, S09 and S10, one seed, 20 s of faults.

Method: each scenario runs as `scripts/chaos/run.py --scenario SXX --seed 1 --duration 20 --json` in its own
process (three real `jsraft serve` processes on loopback with the shadow disk, six publishers, three pull
consumers, a meta churner; then heal, the final phase and the checker, ../shared/CHAOS.md). The test
passes only if the script exits 0 and its JSON says the checker found every judged invariant held; on a
failure the run's summary is printed and its output directory (history, node logs, report) is kept under
pytest's tmp_path. The full scenarios, three seeds at their documented durations, are run by hand
(scripts/chaos/README.md); that the checks have teeth is shown there with the mutant launcher. S02 runs
once more with `--secure-links`: mutual TLS and a cluster secret on every node-to-node link, clients
authenticating as a user (issue #20).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jsraft.testing.chaos.scenarios import SMOKE

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chaos" / "run.py"
DURATION_S = 20
TIMEOUT_S = 420  # one scenario, with setup, heal, final phase and checker, on a loaded 2-core machine


@pytest.mark.parametrize("scenario", SMOKE)
def test_chaos_smoke(scenario: str, tmp_path: Path) -> None:
    run_smoke(scenario, tmp_path)


def test_chaos_smoke_with_mutual_tls_links(tmp_path: Path) -> None:
    """S02 (kill loop: links torn down and re-established over and over) with mutual TLS and a cluster
    secret on every node-to-node link, and every client authenticating (issue #20)."""
    run_smoke("S02", tmp_path, "--secure-links")
    configs = list((tmp_path / "chaos" / "S02-seed1" / "cluster" / "configs").glob("*.json"))
    assert configs and all({"cluster_tls", "cluster_secret", "client_auth"} <= set(json.loads(path.read_text()))
                           for path in configs)


def run_smoke(scenario: str, tmp_path: Path, *extra: str) -> None:
    out = tmp_path / "chaos"
    argv = [sys.executable, str(SCRIPT), "--scenario", scenario, "--seed", "1", "--duration", str(DURATION_S),
            "--json", "--out", str(out), *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON result; exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(lines[-1])
    summary = (out / f"{scenario}-seed1" / "summary.txt")
    text = summary.read_text() if summary.exists() else done.stdout[-3000:]
    assert result["passed"] and done.returncode == 0, (
        f"{text}\n{_violations(out / f'{scenario}-seed1')}\nerror: {result.get('error')}\n{done.stderr[-2000:]}")
    report = result["report"]
    assert report["counts"]["acked"] > 0 and report["invariants"]["I1"]["valid"]


def _violations(run_dir: Path) -> str:
    """Each violated invariant's verdict (counts and samples) from report.json, and the faults log, so that
    a failure on a CI machine, whose tmp_path is gone afterwards, can be read from its log alone."""
    report_path, faults_path = run_dir / "report.json", run_dir / "faults.jsonl"
    if not report_path.exists():
        return "(no report.json)"
    report = json.loads(report_path.read_text())
    lines = [f"{name}: {json.dumps(verdict, sort_keys=True)[:3000]}"
             for name, verdict in sorted(report.get("invariants", {}).items()) if not verdict.get("valid", True)]
    lines += [f"{name}: {json.dumps(check, sort_keys=True)[:1500]}"
              for name, check in sorted(report.get("scenario_checks", {}).items()) if not check.get("valid", True)]
    if faults_path.exists():
        lines.append("faults:\n" + faults_path.read_text()[-3000:])
    for log_path in sorted((run_dir / "cluster" / "logs").glob("*.log")):
        noted = [line[:600] for line in log_path.read_text(errors="replace").splitlines()
                 if " WARNING " in line or " ERROR " in line]
        lines.append(f"{log_path.name}: {len(noted)} warnings/errors, the last ones:\n" + "\n".join(noted[-25:]))
    return "\n".join(lines)
