"""The chaos runner refuses a run directory that already holds a run.

Method: a run's history files are appended to as it goes, so a second run into the same `--out` used to be
judged together with the first one's operations (a false I3). Here `scripts/chaos/run.py` is started on an
`--out` whose `S01-seed1/` holds a history line; it must exit 2 naming that directory before starting any
node, and leave the earlier file byte for byte. `run_scenario` itself refuses the same way (an exception),
and an empty or missing directory is accepted (checked with `used`, no cluster started).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jsraft.testing.chaos.runner import RunDirectoryUsed, run_dir, run_scenario, used

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chaos" / "run.py"


def test_script_refuses_a_used_run_directory(tmp_path: Path) -> None:
    earlier = tmp_path / "S01-seed1" / "history.jsonl"
    earlier.parent.mkdir()
    earlier.write_text('{"op": "publish"}\n')
    done = subprocess.run([sys.executable, str(SCRIPT), "--scenario", "S01", "--scenario", "S02", "--seed", "1",
                           "--duration", "1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert str(tmp_path / "S01-seed1") in done.stderr and "nothing was started" in done.stderr
    assert earlier.read_text() == '{"op": "publish"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["S01-seed1"]  # S02 was not started either


def test_run_scenario_refuses_a_used_run_directory(tmp_path: Path) -> None:
    (tmp_path / "S03-seed7").mkdir()
    (tmp_path / "S03-seed7" / "faults.jsonl").write_text("")
    with pytest.raises(RunDirectoryUsed) as caught:
        run_scenario("S03", 7, 1.0, str(tmp_path))
    assert caught.value.out_dir == run_dir(str(tmp_path), "S03", 7)
    assert [p.name for p in (tmp_path / "S03-seed7").iterdir()] == ["faults.jsonl"]


def test_missing_or_empty_directories_are_free(tmp_path: Path) -> None:
    assert not used(str(tmp_path / "absent"))
    (tmp_path / "empty").mkdir()
    assert not used(str(tmp_path / "empty"))
    (tmp_path / "empty" / "x").write_text("")
    assert used(str(tmp_path / "empty"))
