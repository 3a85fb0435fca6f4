#!/usr/bin/env python3
"""A real pipeline on Spark, killed mid-way and restarted, checked for duplicates and gaps.

    .venv/bin/python scripts/pipeline/run.py [--orders 6000] [--windows 24] [--keep DIR]

1. Starts a local 3-node jsraft cluster (`jsraft serve` processes, free ports, a temporary directory).
2. Creates the R3 streams ORDERS (`orders.>`) and TOTALS (`totals.>`, duplicate window 10 minutes) and
   publishes `--orders` orders for 5 shops spread over `--windows` 10-second windows of event time,
   then one last order 60 s later, which closes every one of those windows (watermark 0).
3. Starts the Structured Streaming job (`job.py`: ORDERS → count and sum per window and shop → TOTALS,
   500 orders per micro-batch, checkpoint in the temporary directory) as its own process group.
4. Once TOTALS holds some results but not all, kills the job with SIGKILL (driver, JVM and workers: no
   clean shutdown, a micro-batch may be half written), then starts it again on the same checkpoint.
5. Waits (with a deadline) until TOTALS holds the expected number of results and stays there for a few
   more micro-batches, stops the job, and checks TOTALS: every (window, shop) exactly once (no
   duplicate), none missing (no gap), each count and sum equal to what was published.

Prints what it did and `pipeline: OK` (exit 0) or what is wrong (exit 1). Every process it started is
stopped (by its own pid or process group). Needs the `spark` extra and Java 17.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench"))

import nats_servers  # noqa: E402

SHOPS = ["berlin", "lisbon", "oslo", "paris", "rome"]
BASE_TS = 1_800_000_000  # event time of the first window (seconds)
DEADLINE_S = 600
STABLE_S = 8  # TOTALS must stay at the expected count this long: a late duplicate would show


async def _nats(urls: list[str], scenario, *args):
    import nats

    nc = await nats.connect(servers=urls, connect_timeout=5)
    try:
        return await scenario(nc.jetstream(timeout=30), *args)
    finally:
        await nc.close()


def make_orders(count: int, windows: int, rng: random.Random) -> list[dict]:
    span = windows * 10
    orders = [{"order_id": i, "shop": rng.choice(SHOPS), "amount": rng.randint(1, 500),
               "ts": BASE_TS + span * i / count} for i in range(count)]
    orders.append({"order_id": count, "shop": SHOPS[0], "amount": 0, "ts": BASE_TS + span + 60})  # closes all
    return orders


def expected_totals(orders: list[dict], windows: int) -> dict[tuple[int, str], tuple[int, int]]:
    totals: dict[tuple[int, str], list[int]] = {}
    for order in orders:
        start = int(order["ts"]) // 10 * 10
        if start < BASE_TS + windows * 10:
            cell = totals.setdefault((start, order["shop"]), [0, 0])
            cell[0] += 1
            cell[1] += order["amount"]
    return {key: (n, amount) for key, (n, amount) in totals.items()}


async def setup(js, orders: list[dict]) -> None:
    from nats.js.api import StreamConfig

    await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"], num_replicas=3, allow_direct=True))
    await js.add_stream(StreamConfig(name="TOTALS", subjects=["totals.>"], num_replicas=3, allow_direct=True,
                                     duplicate_window=600.0))
    for first in range(0, len(orders), 1000):
        acks = [await js.publish_async(f"orders.{o['shop']}", json.dumps(o).encode())
                for o in orders[first:first + 1000]]
        await asyncio.gather(*acks)


async def totals_count(js) -> int:
    return (await js.stream_info("TOTALS")).state.messages


async def read_totals(js) -> list[dict]:
    info = await js.stream_info("TOTALS")
    rows = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        rows.append(json.loads((await js.get_msg("TOTALS", seq)).data))
    return rows


def start_job(urls: list[str], checkpoint: str, log_path: str) -> subprocess.Popen:
    log = open(log_path, "ab")
    return subprocess.Popen([sys.executable, os.path.join(HERE, "job.py"), "--servers", ",".join(urls),
                             "--checkpoint", checkpoint], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # its own process group: the JVM and workers die with it


def kill_job(job: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(job.pid, sig)
    except ProcessLookupError:
        return
    try:
        job.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)


def wait_for(urls: list[str], predicate, what: str, job: subprocess.Popen, log_path: str) -> int:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        count = asyncio.run(_nats(urls, totals_count))
        if predicate(count):
            return count
        if job.poll() is not None:
            raise RuntimeError(f"the job exited ({job.returncode}) before {what}; see {log_path}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what} (TOTALS holds {count}); see {log_path}")
        time.sleep(0.5)


def check(rows: list[dict], expected: dict) -> list[str]:
    keys = Counter((row["window_start"], row["shop"]) for row in rows)
    problems = [f"duplicate {key} ×{n}" for key, n in keys.items() if n > 1]
    problems += [f"missing {key}" for key in expected if key not in keys]
    problems += [f"unexpected {key}" for key in keys if key not in expected]
    for row in rows:
        key = (row["window_start"], row["shop"])
        if key in expected and (row["orders"], row["amount"]) != expected[key]:
            problems.append(f"{key}: {row['orders']} orders, {row['amount']} — expected {expected[key]}")
    return problems


def run(root: str, args: argparse.Namespace) -> int:
    orders = make_orders(args.orders, args.windows, random.Random(17))
    expected = expected_totals(orders, args.windows)
    log_path = os.path.join(root, "job.log")
    with nats_servers.JsraftServers(os.path.join(root, "cluster"), nodes=3, label="pipeline") as cluster:
        urls = cluster.urls
        print(f"pipeline: cluster up: {' '.join(urls)}")
        asyncio.run(_nats(urls, setup, orders))
        print(f"pipeline: published {len(orders)} orders; expecting {len(expected)} totals")
        checkpoint = os.path.join(root, "checkpoint")
        job = start_job(urls, checkpoint, log_path)
        try:
            seen = wait_for(urls, lambda n: n >= len(expected) // 4, "the first results", job, log_path)
            kill_job(job, signal.SIGKILL)
            at_kill = asyncio.run(_nats(urls, totals_count))
            print(f"pipeline: killed the job (SIGKILL) with {at_kill} of {len(expected)} totals written")
            if at_kill >= len(expected):
                print("pipeline: the job finished before it was killed; run with more --orders")
                return 1
            job = start_job(urls, checkpoint, log_path)
            print("pipeline: restarted the job on its checkpoint")
            wait_for(urls, lambda n: n >= len(expected), "every total", job, log_path)
            stable_until = time.monotonic() + STABLE_S
            while time.monotonic() < stable_until:  # a replayed batch stored twice would show up here
                wait_for(urls, lambda n: True, "", job, log_path)
                time.sleep(0.5)
        finally:
            kill_job(job, signal.SIGTERM)
        rows = asyncio.run(_nats(urls, read_totals))
    problems = check(rows, expected)
    print(f"pipeline: TOTALS holds {len(rows)} results (the first {seen} were there before the kill)")
    if problems:
        print("pipeline: FAILED:\n  " + "\n  ".join(problems[:50]))
        return 1
    print("pipeline: OK — every window and shop exactly once, counts and sums as published")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=6000)
    parser.add_argument("--windows", type=int, default=24)
    parser.add_argument("--keep", help="work in this directory and keep it (default: a temporary one, removed)")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="jsraft-pipeline-")
    os.makedirs(root, exist_ok=True)
    try:
        return run(root, args)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
