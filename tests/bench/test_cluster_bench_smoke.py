"""Smoke runs of `bench/cluster_bench.py` and `bench/failover_bench.py` with tiny parameters.

Method: each bench's `main` runs in this process (its own `trio.run`) with a fast tick and a handful of
messages; the JSON it prints on its last line is checked for shape and positive counts. No figure is
asserted: these are benchmarks, not performance tests. The PySyncObj half of `cluster_bench` runs only
when `pysyncobj` is installed (`pip install -e '.[bench]'`); otherwise the bench must say it skipped it.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
HAS_PYSYNCOBJ = importlib.util.find_spec("pysyncobj") is not None


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_json(module, argv: list[str], capsys) -> dict:
    assert module.main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_cluster_bench_smoke(capsys):
    result = run_json(load("cluster_bench"), ["--json", "--rounds", "1", "--sync-msgs", "10", "--async-msgs", "60",
                                              "--inflight", "16", "--tick-ms", "20"], capsys)
    assert {"machine", "settings", "workloads", "ratio_r3_over_pysyncobj", "pysyncobj_note"} <= result.keys()
    expected = {"jsraft_r1_sync": 10, "jsraft_r3_sync": 10, "jsraft_r1_async": 60, "jsraft_r3_async": 60}
    if HAS_PYSYNCOBJ:
        expected |= {"pysyncobj_sync": 10, "pysyncobj_async": 60}
        assert result["pysyncobj_note"] is None
        assert all(result["ratio_r3_over_pysyncobj"][mode]["median"] > 0 for mode in ("sync", "async"))
    else:
        assert result["pysyncobj_note"].startswith("skipped")
    assert set(result["workloads"]) == set(expected)
    for key, count in expected.items():
        workload = result["workloads"][key]
        assert workload["msgs"] == count and workload["failures"] == 0, key
        assert workload["msgs_per_s_median"] > 0 and workload["p99_ms"] >= workload["p50_ms"] > 0, key


def test_failover_bench_smoke(capsys):
    result = run_json(load("failover_bench"), ["--json", "--runs", "1", "--tick-ms", "20",
                                               "--attempt-timeout", "0.2"], capsys)
    assert result["settings"]["tick_ms"] == 20 and result["settings"]["runs"] == 1
    (run,) = result["runs"]
    assert run["victim"] != run["publisher_node"] and run["acks_before_kill"] > 0
    assert run["failover_s"] > 0 and run["elected_s"] > 0
    assert result["failover_s"]["median"] == run["failover_s"]
    assert result["under_2s"] in (0, 1)

