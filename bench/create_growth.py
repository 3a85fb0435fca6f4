"""How a stream create's cost changes as streams accumulate on one node: jsraft against nats-server.

Method: one fresh single node per system (jsraft via `scripts/cluster.py`; nats-server 2.15.1 with
`sync_interval: always`, started by `bench/nats_servers.py`; with `--baseline-src DIR` also `jsraft_baseline`,
the same `jsraft serve` with `PYTHONPATH=DIR`), each with one nats-py connection creating R1 streams
(`js.add_stream(name=..., subjects=[...])`, file storage) one after the other, `--streams` in all, in blocks
of `--block`. The systems take turns block by block, so every system's block k runs in the same minutes
under the same load. Per system and block: the median and the longest create (request to answer; the
longest shows a pause of the whole server, such as a full garbage collection) and the server's CPU per
create (user + system of its processes over the block, psutil). Nothing is retried: a create that fails
fails the run. A cost that grows with the number of streams shows as a rising column.

    .venv/bin/python bench/create_growth.py --streams 3000 --block 500 --baseline-src /tmp/base/src

Must not import jsraft (it drives servers over NATS only). Imports: stdlib, nats-py, psutil, siblings
`nats_servers`, `create_latency`.
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
from create_latency import BASELINE, server_cpu_s, start  # noqa: E402


async def _block(url: str, first: int, count: int) -> list[float]:
    import nats

    nc = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=30)
        seconds = []
        for i in range(first, first + count):
            began = time.perf_counter()
            await js.add_stream(name=f"G{i}", subjects=[f"g{i}.>"])
            seconds.append(time.perf_counter() - began)
        return seconds
    finally:
        await nc.close()


def run(root: str, streams: int, block: int, systems: list[str], baseline_src: str | None) -> dict[str, Any]:
    running: dict[str, Any] = {}
    rows: dict[str, list[dict[str, float]]] = {system: [] for system in systems}
    load_start = os.getloadavg()[0]
    try:
        for system in systems:
            running[system] = start(system, 1, root, baseline_src)
        for first in range(0, streams, block):
            count = min(block, streams - first)
            for system in systems:
                began = server_cpu_s(running[system].pids)
                seconds = asyncio.run(_block(running[system].urls[0], first, count))
                cpu = server_cpu_s(running[system].pids) - began
                rows[system].append({"streams": first + count,
                                     "median_ms": round(statistics.median(seconds) * 1000, 2),
                                     "max_ms": round(max(seconds) * 1000, 1),
                                     "server_cpu_ms": round(cpu / count * 1000, 2)})
    finally:
        for servers in running.values():
            servers.stop()
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "streams": streams, "block": block,
            "loadavg": [load_start, os.getloadavg()[0]], "systems": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--systems", default="jsraft,nats_always",
                        help="comma-separated: jsraft, nats_always, nats_default")
    parser.add_argument("--baseline-src", help="also run jsraft from this source directory (PYTHONPATH)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    systems = args.systems.split(",") + ([BASELINE] if args.baseline_src else [])
    unknown = set(systems) - {"jsraft", "nats_always", "nats_default", BASELINE}
    if unknown:
        parser.error(f"unknown systems: {sorted(unknown)}")
    with tempfile.TemporaryDirectory(prefix="create-growth-") as root:
        result = run(root, args.streams, args.block, systems, args.baseline_src)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['date']}, load {result['loadavg']}: median ms / longest ms / server CPU ms per create, "
          "by streams created")
    print("streams  " + "  ".join(f"{system:>26}" for system in systems))
    for i, row in enumerate(result["systems"][systems[0]]):
        cells = [" / ".join(str(result["systems"][s][i][key]) for key in ("median_ms", "max_ms", "server_cpu_ms"))
                 for s in systems]
        print(f"{row['streams']:>7}  " + "  ".join(f"{cell:>26}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
