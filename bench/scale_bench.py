#!/usr/bin/env python3
"""Scale benchmark: how a 3-node cluster's cost grows with the number of streams (issue 18).

For each system (`jsraft`: three `jsraft serve` processes via scripts/cluster.py; `nats`: three nats-server
2.15.1 processes, `sync_interval: always`) and each count N in `--streams` (a fresh cluster per N):

  1. Baseline: resident memory (RSS) of every server process, once the cluster is ready.
  2. Create: N R3 file streams (`scale.<i>.>`), each with one durable pull consumer, from `--creators`
     concurrent nats-py clients; the latency of each create pair (stream + consumer) is recorded.
  3. Idle: after every stream answers `stream_info` with a leader, `--settle-s` seconds, then CPU time of
     every server process over `--idle-s` seconds of no client traffic, as % of one core per node, and RSS
     again: per-stream memory = (RSS now - baseline) / N, per node.
  4. Failover (jsraft; nats with `--failover-nats`): SIGKILL the node leading the most streams; for
     jsraft, poll the survivors' `/jsz` (their own Raft view) until both know a live leader for every
     stream the dead node led (`raft_all_led_s`, `raft_median_s`: the elections); then poll `stream_info`
     of each (`--info-timeout-s` per request, 64 at a time) until a live leader answers for every one
     (`all_led_again_s` from the kill: what a client sees). For jsraft, then idle CPU of the survivors
     with the dead node still down (`idle_cpu_pct_per_survivor`).

Everything is measured on this machine in one run; numbers are for `bench/README.md` with the command.
The goals (issue 18): 1,000 idle R3 streams with a consumer each: idle CPU <= 5% of one core per node.

Usage: python bench/scale_bench.py [--streams 10,100,1000] [--systems jsraft,nats] [--idle-s 20]
       [--settle-s 5] [--creators 16] [--json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from typing import Any

import nats
import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nats_fetch import retry_unavailable  # noqa: E402  (bench siblings)
from nats_servers import JsraftServers, NatsServers  # noqa: E402


def rss_mib(pids: dict[str, int]) -> dict[str, float]:
    return {name: psutil.Process(pid).memory_info().rss / 2**20 for name, pid in pids.items()}


def cpu_s(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        times = psutil.Process(pid).cpu_times()
        out[name] = times.user + times.system + times.children_user + times.children_system
    return out


def idle_cpu(pids: dict[str, int], settle_s: float, idle_s: float) -> dict[str, float]:
    """`settle_s` of pause (a measurement choice: let post-create or post-failover work pass), then each
    process's CPU time over `idle_s` of no client traffic, as % of one core."""
    time.sleep(settle_s)
    before, started = cpu_s(pids), time.monotonic()
    time.sleep(idle_s)
    after, elapsed = cpu_s(pids), time.monotonic() - started
    return {n: round(100 * (after[n] - before[n]) / elapsed, 2) for n in pids}


async def create_all(urls: list[str], count: int, creators: int, counts: dict[str, int],
                     retry_s: float = 30.0) -> list[float]:
    """Create `count` streams + consumers from `creators` clients; return each pair's latency (s). A
    create answered 503 (e.g. jsraft's "stored but not visible on this node yet" under load) is tried
    again (both creates are idempotent), counted in `counts["unavailable"]`; the retry stays on the clock."""
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def creator(k: int) -> None:
        nc = await nats.connect(urls[k % len(urls)], connect_timeout=10, allow_reconnect=False)
        js = nc.jetstream(timeout=60)
        try:
            while not queue.empty():
                i = queue.get_nowait()
                started = time.perf_counter()
                await retry_unavailable(lambda: js.add_stream(name=f"SCALE{i}", subjects=[f"scale.{i}.>"],
                                                              num_replicas=3), retry_s, counts)
                await retry_unavailable(lambda: js.add_consumer(f"SCALE{i}", durable_name="C",
                                                                ack_policy="explicit"), retry_s, counts)
                latencies.append(time.perf_counter() - started)
                counts["created"] = counts.get("created", 0) + 1
        finally:
            await nc.close()

    await asyncio.gather(*(creator(k) for k in range(min(creators, count))))
    return latencies


async def leaders(url: str, names: list[str], timeout_s: float = 5.0) -> dict[str, str | None]:
    """Each stream's leader as `stream_info` reports it (None: no answer in `timeout_s`), asked 64 at a
    time, so streams without a leader cost one timeout per round, not one each."""
    nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    js = nc.jetstream(timeout=timeout_s)
    out: dict[str, str | None] = {}

    async def one(name: str) -> None:
        try:
            info = await js.stream_info(name)
            out[name] = info.cluster.leader if info.cluster else None
        except Exception:
            out[name] = None

    try:
        for start in range(0, len(names), 64):
            await asyncio.gather(*(one(name) for name in names[start:start + 64]))
    finally:
        await nc.close()
    return out


async def wait_all_led(url: str, names: list[str], deadline_s: float, dead: str | None = None,
                       timeout_s: float = 1.0) -> dict[str, float]:
    """Poll until every stream has a leader (not `dead`); return when each first had one (s from now)."""
    started = time.monotonic()
    pending, led_at = list(names), {}
    while pending and time.monotonic() - started < deadline_s:
        found = await leaders(url, pending, timeout_s=timeout_s)
        now = time.monotonic() - started
        for name, leader in found.items():
            if leader and leader != dead:
                led_at[name] = now
        pending = [name for name in pending if name not in led_at]
        if pending:
            await asyncio.sleep(0.1)
    if pending:
        raise RuntimeError(f"{len(pending)} streams without a leader after {deadline_s:g}s (e.g. {pending[:3]})")
    return led_at


def raft_leaders(monitor_url: str) -> dict[str, str | None]:
    """Each stream's leader as this jsraft node's own Raft view says (`/jsz`): no API round trip."""
    with urllib.request.urlopen(monitor_url + "/jsz", timeout=10) as answer:
        doc = json.load(answer)
    return {stream["name"]: stream["leader"] for stream in doc["jsraft"]["streams"]}


def wait_all_led_raft(monitor_urls: list[str], names: list[str], deadline_s: float, dead: str) -> dict[str, float]:
    """Poll the survivors' `/jsz` until every survivor knows a live leader (not `dead`) for each stream;
    return when each first did (s from now). Cheap enough to poll every 0.2 s during the elections."""
    started = time.monotonic()
    pending, led_at = set(names), {}
    while pending and time.monotonic() - started < deadline_s:
        views = [raft_leaders(url) for url in monitor_urls]
        now = time.monotonic() - started
        for name in list(pending):
            if all(view.get(name) not in (None, dead) for view in views):
                led_at[name] = now
                pending.discard(name)
        if pending:
            time.sleep(0.2)
    if pending:
        raise RuntimeError(f"{len(pending)} streams without a leader after {deadline_s:g}s "
                           f"(e.g. {sorted(pending)[:3]})")
    return led_at


def start(system: str, root: str) -> Any:
    if system == "jsraft":
        return JsraftServers(root, nodes=3, label="scale").start(timeout_s=120.0)
    return NatsServers(root, nodes=3, sync_always=True, label="scale").start(timeout_s=60.0)


def measure(system: str, count: int, args: argparse.Namespace, root: str) -> dict[str, Any]:
    servers = start(system, root)
    try:
        pids, urls = dict(servers.pids), list(servers.urls)
        base_rss = rss_mib(pids)
        wall = time.perf_counter()
        counts: dict[str, int] = {}
        try:
            latencies = asyncio.run(create_all(urls, count, args.creators, counts, args.create_retry_s))
        except Exception as error:  # measure as far as it went: say how far, and why it stopped
            print(json.dumps({"system": system, "streams": count, "create_failed": f"{error!r} {getattr(error, 'description', '')}"[:300],
                              "created_pairs": counts.get("created", 0), "after_s": round(time.perf_counter() - wall, 1),
                              "rss_mib_per_node": {n: round(v, 1) for n, v in rss_mib(pids).items()},
                              "create_503_retries": counts.get("unavailable", 0)}), flush=True)
            raise
        create_wall_s = time.perf_counter() - wall
        names = [f"SCALE{i}" for i in range(count)]
        led = asyncio.run(leaders(urls[0], names, timeout_s=30.0))
        if not all(led.values()):
            asyncio.run(wait_all_led(urls[0], names, 120.0))
            led = asyncio.run(leaders(urls[0], names, timeout_s=30.0))
        idle_pct = idle_cpu(pids, args.settle_s, args.idle_s)
        rss = rss_mib(pids)
        result: dict[str, Any] = {
            "system": system, "streams": count,
            "create_pair_ms_p50": round(statistics.median(latencies) * 1000, 1),
            "create_pair_ms_p99": round(sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000, 1),
            "create_wall_s": round(create_wall_s, 2), "create_503_retries": counts.get("unavailable", 0),
            "idle_cpu_pct_per_node": idle_pct,
            "rss_mib_per_node": {n: round(v, 1) for n, v in rss.items()},
            "rss_kib_per_stream_per_node": {n: round((rss[n] - base_rss[n]) * 1024 / count, 1) for n in pids},
        }
        if system == "jsraft" or args.failover_nats:
            victim = max(pids, key=lambda n: sum(1 for leader in led.values() if leader == n))
            orphans = [name for name, leader in led.items() if leader == victim]
            os.kill(pids[victim], signal.SIGKILL)
            killed_at = time.monotonic()
            survivor = next(url for name, url in zip(servers.pids, urls) if name != victim)
            result["failover"] = failover = {"killed": victim, "streams_it_led": len(orphans)}
            try:
                if system == "jsraft" and orphans:
                    # First the Raft view on every survivor (elections done), then the API: a stream_info
                    # answered by a live leader for each (what a client sees; slower while all elect at once).
                    monitors = [url for name, url in servers.monitor_urls.items() if name != victim]
                    led_at = wait_all_led_raft(monitors, orphans, args.failover_deadline_s, dead=victim)
                    failover.update(raft_all_led_s=round(max(led_at.values()), 2),
                                    raft_median_s=round(statistics.median(led_at.values()), 2))
                offset_s = time.monotonic() - killed_at  # the API poll's times count from the kill too
                left_s = args.failover_deadline_s - offset_s
                led_at = asyncio.run(wait_all_led(survivor, orphans, left_s, dead=victim,
                                                  timeout_s=args.info_timeout_s)) if orphans else {}
            except RuntimeError as error:  # keep the idle figures: the failover's failure is a result too
                failover["failed"] = str(error)
                return result
            answered_s = time.monotonic() - killed_at
            failover.update(all_led_again_s=round(answered_s, 2),
                            median_s=round(offset_s + statistics.median(led_at.values()), 2) if led_at else 0.0)
            if system == "jsraft":
                failover["idle_cpu_pct_per_survivor"] = idle_cpu({n: p for n, p in pids.items() if n != victim},
                                                                 args.settle_s, args.idle_s)
        return result
    finally:
        servers.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="10,100,1000", help="comma list of stream counts")
    parser.add_argument("--systems", default="jsraft,nats", help="comma list: jsraft, nats")
    parser.add_argument("--idle-s", type=float, default=20.0, help="idle CPU measuring window")
    parser.add_argument("--settle-s", type=float, default=5.0, help="pause between creates and the idle window")
    parser.add_argument("--creators", type=int, default=16, help="concurrent creating clients")
    parser.add_argument("--create-retry-s", type=float, default=30.0,
                        help="how long a create answered 503 is tried again before the run fails")
    parser.add_argument("--failover-nats", action="store_true", help="also kill a nats-server node")
    parser.add_argument("--failover-deadline-s", type=float, default=300.0,
                        help="how long the killed node's streams may take to have leaders again")
    parser.add_argument("--info-timeout-s", type=float, default=5.0,
                        help="client timeout of each stream_info while polling for the new leaders")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep", help="keep the clusters' data under this directory")
    args = parser.parse_args(argv)
    root = args.keep or tempfile.mkdtemp(prefix="jsraft-scale-")
    results = []
    try:
        for count in [int(x) for x in args.streams.split(",")]:
            for system in args.systems.split(","):
                result = measure(system, count, args, os.path.join(root, f"{system}-{count}"))
                results.append(result)
                print(json.dumps(result), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                      "load": os.getloadavg()}, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
