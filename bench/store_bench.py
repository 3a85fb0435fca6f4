#!/usr/bin/env python3
"""FileStore benchmark: append, read and recovery throughput, against a raw-write baseline.

Workloads (each measured in this one run, so ratios are meaningful on a noisy machine):
  append_128 / append_16k      append_batch of 100 messages, no fsync, msgs/s and MB/s of payload
  append_128_fsync             the same with store.sync() (a STORE_SYNC record + fsync) per batch
  raw_128 / raw_128_fsync      the baseline: the same framed bytes (header + CRC32C per record, joined per
                               batch) written with os.write, optionally fsynced per batch: what any
                               correct store must at least do
  read_seq / read_random       load(seq) over every message in order / in a shuffled order
  recover_index / recover_scan reopen a store of --recovery-msgs 128-byte messages with its index, and
                               with a full verification scan of every record
  rss_recovered_mib            resident memory of a fresh process after opening that store (measured in a
                               subprocess so the benchmark's own allocations do not count)

Usage: python bench/store_bench.py [--quick] [--json] [--rounds N]
Reports the median of --rounds runs for each timed workload (min and max alongside).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from crc32c import crc32c

from jsraft.disk import OsDisk
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore

BATCH = 100


def _messages(count: int, size: int):
    payload = os.urandom(size)
    return [(seq, f"bench.{seq % 16}", b"", payload, 1_700_000_000_000_000_000 + seq) for seq in range(1, count + 1)]


def bench_append(root: str, count: int, size: int, fsync: bool) -> float:
    msgs = _messages(count, size)
    store = FileStore.open(OsDisk(root), StoreConfig())
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        store.append_batch(msgs[start : start + BATCH])
        if fsync:
            store.sync()
    elapsed = time.perf_counter() - started
    store.close()
    return count / elapsed


_HEAD = struct.Struct("<BQQ")
_LEN = struct.Struct("<I")
_PREFIX = struct.Struct("<HI")


def bench_raw(root: str, count: int, size: int, fsync: bool) -> float:
    """The baseline: frame the same records (length, CRC32C, kind, seq, ts, body) and write them."""
    msgs = _messages(count, size)
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, "raw.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        parts = []
        for seq, subject, headers, payload, ts in msgs[start : start + BATCH]:
            subject_bytes = subject.encode()
            body = _PREFIX.pack(len(subject_bytes), len(headers)) + subject_bytes + headers + payload
            length = _LEN.pack(25 + len(body))
            rest = _HEAD.pack(2, seq, ts) + body
            parts.append(length + _LEN.pack(crc32c(rest, crc32c(length))) + rest)
        os.write(fd, b"".join(parts))
        if fsync:
            os.fsync(fd)
    elapsed = time.perf_counter() - started
    os.close(fd)
    return count / elapsed


def _fill(root: str, count: int) -> None:
    store = FileStore.open(OsDisk(root), StoreConfig())
    msgs = _messages(min(count, 100_000), 128)
    for start in range(0, count, BATCH):
        base = start
        batch = [(base + i + 1, m[1], b"", m[3], m[4]) for i, m in enumerate(msgs[:BATCH])]
        batch = batch[: min(BATCH, count - start)]
        store.append_batch(batch)
    store.close()


def bench_reads(root: str, count: int) -> tuple[float, float]:
    store = FileStore.open(OsDisk(root))
    order = list(range(1, count + 1))
    started = time.perf_counter()
    for seq in order:
        store.load(seq)
    sequential = count / (time.perf_counter() - started)
    random.Random(7).shuffle(order)
    started = time.perf_counter()
    for seq in order:
        store.load(seq)
    shuffled = count / (time.perf_counter() - started)
    store.close()
    return sequential, shuffled


def bench_recover(root: str, use_index: bool) -> float:
    started = time.perf_counter()
    store = FileStore.open(OsDisk(root), use_index=use_index)
    elapsed = time.perf_counter() - started
    # Measure what the name says: the index path must really have used the index, the scan path not.
    assert (store.recovery_report.get("index") == "used") == use_index, store.recovery_report
    assert store.faults() == [], store.faults()
    store.read_only = True  # keep the index on disk as it was for the next round
    store.close()
    return elapsed


_RSS_PROBE = """
import sys, psutil
before = psutil.Process().memory_info().rss
from jsraft.disk import OsDisk
from jsraft.store.filestore import FileStore
store = FileStore.open(OsDisk(sys.argv[1]), use_index=sys.argv[2] == "index")
assert store.state().msgs == int(sys.argv[3])
print(psutil.Process().memory_info().rss / 2**20)
"""


def measure_rss(root: str, count: int, how: str) -> float:
    out = subprocess.run([sys.executable, "-c", _RSS_PROBE, root, how, str(count)], check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip())


def _median(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(quick: bool, rounds: int) -> dict:
    count = 20_000 if quick else 200_000
    count_16k = 2_000 if quick else 20_000
    recovery_count = 100_000 if quick else 1_000_000
    scratch = tempfile.mkdtemp(prefix="jsraft-bench-")
    results: dict[str, dict] = {}
    try:
        plan = {
            "append_128": lambda d: bench_append(d, count, 128, False),
            "raw_128": lambda d: bench_raw(d, count, 128, False),
            "append_128_fsync": lambda d: bench_append(d, count // 4, 128, True),
            "raw_128_fsync": lambda d: bench_raw(d, count // 4, 128, True),
            "append_16k": lambda d: bench_append(d, count_16k, 16384, False),
            "raw_16k": lambda d: bench_raw(d, count_16k, 16384, False),
        }
        samples: dict[str, list[float]] = {name: [] for name in plan}
        for _ in range(rounds):  # alternate store and baseline within each round
            for name, work in plan.items():
                directory = os.path.join(scratch, name)
                shutil.rmtree(directory, ignore_errors=True)
                samples[name].append(work(directory))
        for name, values in samples.items():
            results[name] = _median(values)
        results["append_16k_mb_s"] = _median([v * 16384 / 1e6 for v in samples["append_16k"]])
        results["ratio_append_128_vs_raw"] = _median([a / r for a, r in zip(samples["append_128"], samples["raw_128"])])
        big = os.path.join(scratch, "recovery")
        _fill(big, recovery_count)
        seq_reads, random_reads = bench_reads(big, min(recovery_count, 200_000))
        results["read_seq"] = {"median": seq_reads}
        results["read_random"] = {"median": random_reads}
        results["recover_index_s"] = _median([bench_recover(big, True) for _ in range(rounds)])
        results["recover_scan_s"] = _median([bench_recover(big, False) for _ in range(max(1, rounds // 2))])
        results["rss_recovered_mib"] = {"index": measure_rss(big, recovery_count, "index"),
                                        "scan": measure_rss(big, recovery_count, "scan")}
        results["params"] = {"count": count, "count_16k": count_16k, "recovery_msgs": recovery_count,
                             "rounds": rounds, "batch": BATCH}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = run(args.quick, args.rounds)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for name, value in results.items():
        if isinstance(value, dict) and "median" in value:
            extra = f"  (min {value['min']:,.2f}, max {value['max']:,.2f})" if "min" in value else ""
            print(f"{name:28s} {value['median']:>14,.2f}{extra}")
        else:
            print(f"{name:28s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
