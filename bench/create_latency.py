"""How long a stream create takes as nats-py sees it: jsraft against nats-server, R1 and R3, same machine.

Method: for each topology (one node; three nodes) and system (jsraft via `scripts/cluster.py`, nats-server
2.15.1 with its default sync and with `sync_interval: always`, started by `bench/nats_servers.py`), one
nats-py connection to the first node creates `--streams` streams one after the other
(`js.add_stream(name=..., subjects=[...], num_replicas=R)`, file storage), each timed from the request to
its answer; the systems alternate within a topology and the order rotates each round. Reported: the median
and the 90th percentile per system and topology over every create of every round, and the ratio of
jsraft's median to each nats-server's. Nothing is retried: a create that fails fails the run.

    .venv/bin/python bench/create_latency.py --streams 30 --rounds 3

Must not import jsraft (it drives servers over NATS only).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nats_servers import JsraftServers, NatsServers  # noqa: E402

SYSTEMS = ("jsraft", "nats_default", "nats_always")


def start(system: str, nodes: int, root: str) -> Any:
    directory = os.path.join(root, f"{system}-{nodes}")
    if system == "jsraft":
        return JsraftServers(directory, nodes=nodes, label=f"cl{nodes}").start()
    return NatsServers(directory, nodes=nodes, sync_always=(system == "nats_always"), label=system).start()


async def creates(url: str, replicas: int, count: int, prefix: str) -> list[float]:
    import nats

    nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=30)
        seconds = []
        for i in range(count):
            began = time.perf_counter()
            await js.add_stream(name=f"{prefix}{i}", subjects=[f"{prefix.lower()}{i}.>"], num_replicas=replicas)
            seconds.append(time.perf_counter() - began)
        return seconds
    finally:
        await nc.close()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=30, help="creates per system per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topologies", default="r1,r3")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "streams": args.streams, "rounds": args.rounds, "loadavg": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="create-latency-") as root:
        for topology in args.topologies.split(","):
            nodes = 3 if topology == "r3" else 1
            running = {system: start(system, nodes, root) for system in SYSTEMS}
            samples: dict[str, list[float]] = {system: [] for system in SYSTEMS}
            try:
                for round_no in range(args.rounds):
                    order = SYSTEMS[round_no % len(SYSTEMS):] + SYSTEMS[:round_no % len(SYSTEMS)]
                    for system in order:
                        samples[system] += asyncio.run(creates(running[system].urls[0], nodes, args.streams,
                                                               f"C{round_no}X"))
            finally:
                for servers in running.values():
                    servers.stop()
            figures = {system: {"median_ms": round(statistics.median(v) * 1000, 1),
                                "p90_ms": round(quantile(v, 0.9) * 1000, 1), "creates": len(v)}
                       for system, v in samples.items()}
            for other in ("nats_default", "nats_always"):
                figures[f"jsraft/{other}"] = round(figures["jsraft"]["median_ms"] / figures[other]["median_ms"], 2)
            result[topology] = figures
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for topology in args.topologies.split(","):
            for system, figure in result[topology].items():
                print(f"{topology} {system}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
