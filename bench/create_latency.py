"""How long a stream (KV bucket, object store) create takes as nats-py sees it: jsraft against
nats-server, R1 and R3, same machine.

Method: for each topology (one node; three nodes) and system (jsraft via `scripts/cluster.py`, nats-server
2.15.1 with its default sync and with `sync_interval: always`, started by `bench/nats_servers.py`), one
nats-py connection to the first node creates `--streams` assets one after the other, each timed from the
request to its answer: `--kinds` picks streams (`js.add_stream(name=..., subjects=[...],
num_replicas=R)`, file storage), KV buckets (`js.create_key_value(KeyValueConfig(bucket=..., replicas=R))`)
and object stores (`js.create_object_store(bucket=..., config=ObjectStoreConfig(replicas=R))`). The
systems alternate within a topology and the order rotates each round. Reported per kind, system and
topology: the median and the 90th percentile over every create of every round, the ratio of jsraft's
median to each nats-server's, the servers' CPU per create (`server_cpu_ms`: user + system time of every
server process of the system over its creates, psutil, divided by their number; less sensitive than the
latency to the disk's fsync time and to the machine's load), and the load average (1 min) when the
topology started and ended. Nothing is retried: a create that fails fails the run.

`--baseline-src DIR` adds a fourth system, `jsraft_baseline`: the same `jsraft serve` run with
`PYTHONPATH=DIR` (another checkout's `src`, e.g. `main`'s), alternated with the others in the same rounds,
so a change is compared with its baseline under the same load (`jsraft_baseline/nats_always`).

    .venv/bin/python bench/create_latency.py --streams 30 --rounds 3 --kinds stream,kv,obj

Must not import jsraft (it drives servers over NATS only). Imports: stdlib, nats-py, psutil, sibling
`nats_servers`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nats_servers import JsraftServers, NatsServers  # noqa: E402

SYSTEMS = ("jsraft", "nats_default", "nats_always")
BASELINE = "jsraft_baseline"


def _baseline_python(root: str, src: str) -> str:
    """An executable that runs this Python with `src` first on its path (the baseline's code)."""
    path = os.path.join(root, "python-baseline")
    with open(path, "w") as script:
        script.write(f"#!/bin/sh\nPYTHONPATH={os.path.abspath(src)} exec {sys.executable} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def start(system: str, nodes: int, root: str, baseline_src: str | None = None) -> Any:
    directory = os.path.join(root, f"{system}-{nodes}")
    if system == "jsraft":
        return JsraftServers(directory, nodes=nodes, label=f"cl{nodes}").start()
    if system == BASELINE:
        assert baseline_src is not None
        return JsraftServers(directory, nodes=nodes, label=f"bl{nodes}",
                             python=_baseline_python(root, baseline_src)).start()
    return NatsServers(directory, nodes=nodes, sync_always=(system == "nats_always"), label=system).start()


async def _create(js: Any, kind: str, name: str, replicas: int) -> None:
    from nats.js.api import KeyValueConfig, ObjectStoreConfig

    if kind == "stream":
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], num_replicas=replicas)
    elif kind == "kv":
        await js.create_key_value(KeyValueConfig(bucket=name, replicas=replicas))
    else:
        await js.create_object_store(bucket=name, config=ObjectStoreConfig(replicas=replicas))


async def creates(url: str, replicas: int, count: int, prefix: str, kind: str = "stream") -> list[float]:
    import nats

    nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=30)
        seconds = []
        for i in range(count):
            began = time.perf_counter()
            await _create(js, kind, f"{prefix}{i}", replicas)
            seconds.append(time.perf_counter() - began)
        return seconds
    finally:
        await nc.close()


def server_cpu_s(pids: dict[str, int]) -> float:
    """User + system CPU seconds the server processes `pids` (and their children: a launcher that does
    not exec) used so far."""
    total = 0.0
    for pid in pids.values():
        process = psutil.Process(pid)
        for each in (process, *process.children(recursive=True)):
            total += sum(each.cpu_times()[:2])
    return total


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _figures(samples: dict[str, list[float]], cpu_s: dict[str, float]) -> dict[str, Any]:
    figures: dict[str, Any] = {system: {"median_ms": round(statistics.median(v) * 1000, 1),
                                        "p90_ms": round(quantile(v, 0.9) * 1000, 1), "creates": len(v),
                                        "server_cpu_ms": round(cpu_s[system] / len(v) * 1000, 2)}
                               for system, v in samples.items()}
    for other in ("nats_default", "nats_always"):
        for mine in ("jsraft", BASELINE):
            if mine in figures:
                figures[f"{mine}/{other}"] = round(figures[mine]["median_ms"] / figures[other]["median_ms"], 2)
    return figures


def run_topology(root: str, topology: str, kinds: list[str], creates_n: int, rounds: int,
                 baseline_src: str | None = None) -> dict[str, Any]:
    """Every kind's creates on one topology, the systems alternating, the order rotating each round."""
    nodes = 3 if topology == "r3" else 1
    load_start = os.getloadavg()[0]
    systems = SYSTEMS + ((BASELINE,) if baseline_src else ())
    running = {}
    samples = {kind: {system: [] for system in systems} for kind in kinds}
    cpu_s = {kind: {system: 0.0 for system in systems} for kind in kinds}
    try:
        for system in systems:
            running[system] = start(system, nodes, root, baseline_src)
        for round_no in range(rounds):
            order = systems[round_no % len(systems):] + systems[:round_no % len(systems)]
            for kind in kinds:
                for system in order:
                    began = server_cpu_s(running[system].pids)
                    samples[kind][system] += asyncio.run(creates(
                        running[system].urls[0], nodes, creates_n, f"C{round_no}{kind.upper()}X", kind))
                    cpu_s[kind][system] += server_cpu_s(running[system].pids) - began
    finally:
        for servers in running.values():
            servers.stop()
    result: dict[str, Any] = {kind: _figures(samples[kind], cpu_s[kind]) for kind in kinds}
    result["loadavg"] = [load_start, os.getloadavg()[0]]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=30, help="creates per kind per system per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topologies", default="r1,r3")
    parser.add_argument("--kinds", default="stream", help="comma-separated: stream, kv, obj")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--baseline-src", help="also run jsraft from this source directory (PYTHONPATH)")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    unknown = set(kinds) - {"stream", "kv", "obj"}
    if unknown:
        parser.error(f"unknown kinds: {sorted(unknown)}")
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "streams": args.streams, "rounds": args.rounds}
    with tempfile.TemporaryDirectory(prefix="create-latency-") as root:
        for topology in args.topologies.split(","):
            result[topology] = run_topology(root, topology, kinds, args.streams, args.rounds, args.baseline_src)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for topology in args.topologies.split(","):
            print(f"{topology} load average {result[topology]['loadavg']}")
            for kind in kinds:
                for system, figure in result[topology][kind].items():
                    print(f"{topology} {kind} {system}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
