"""Smoke run of `bench/meta_snapshot.py`: it measures what it says, on states that are what it says.

Method: the bench runs as a process, exactly as from the command line, at two tiny sizes and 2 rounds; its
JSON must hold one row per size, in order, with the snapshot's size growing with the streams and, for each
of encode, digest and decode, a wall median between its min and max and a CPU median. The state it builds
is also checked in-process: the snapshot of `build_state(n)` decodes to a state with n streams of one
consumer each, on three peers with storage UUIDs (format version 2), and re-encodes to the same bytes. No
time is asserted: this is a benchmark, not a performance test.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from bench_kit import BENCH

from jsraft.jsapi import API_LEVEL
from jsraft.meta.snapshot import decode_state, encode_state


def test_meta_snapshot_reports_every_size_and_call() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "meta_snapshot.py"), "--streams", "3,20", "--rounds", "2",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["rounds"] == 2 and [row["streams"] for row in result["rows"]] == [3, 20]
    assert 0 < result["rows"][0]["snapshot_bytes"] < result["rows"][1]["snapshot_bytes"]
    for row in result["rows"]:
        for key in ("encode_ms", "digest_ms", "decode_ms"):
            assert 0 <= row[key]["min"] <= row[key]["median"] <= row[key]["max"], (row["streams"], key, row[key])
            assert row[key]["cpu_median"] >= 0, (row["streams"], key, row[key])


def test_the_bench_state_round_trips() -> None:
    spec = importlib.util.spec_from_file_location("bench_meta_snapshot", BENCH / "meta_snapshot.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = encode_state(bench.build_state(5))
    state = decode_state(data, api_level=API_LEVEL)
    assert encode_state(state) == data and data[4] == 2
    assert len(state.streams) == 5 and all(list(consumers) == ["C"] for consumers in state.consumers.values())
    assert all(len(stream.peers) == 3 and not stream.offline for stream in state.streams.values())
    assert sorted(state.storage_uuids) == ["n1", "n2", "n3"]
