"""Count the fsyncs a single `jsraft serve` makes for N sync publishes (issue #18's one-fsync measure).

Method: start `jsraft serve` (R1, fresh store directory, a free port), create a stream with nats-py and
publish one message (the group is then running), attach `strace -f -c -w -e trace=fsync,fdatasync -p PID`
(every thread, and threads started later), publish N messages of 128 B one at a time, each awaiting its
ack, detach strace (SIGINT) and read its summary: the fsyncs of exactly the N publishes, and (`-w`: wall
time from entry to exit, not CPU time) how long each call took on average. `--pythonpath DIR` runs another
checkout's code (e.g. main's `src`) with this venv's packages, for a before/after comparison.
`--system nats_always` measures the real nats-server instead (`bench/nats_servers.py`: one server,
`sync_interval: always`), the same way: its count and its time per fsync on the same disk at the same moment.

    .venv/bin/python bench/fsync_count.py --publishes 500 [--pythonpath /work/main/src]
    .venv/bin/python bench/fsync_count.py --publishes 500 --system nats_always

Imports: stdlib, nats-py, sibling `nats_servers`. Needs `strace`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nats_servers import NatsServers, one_jsraft_serve  # noqa: E402


def _count(summary: str) -> dict[str, float]:
    """Calls of each sync syscall and their mean wall time (ms) from `strace -c -w`'s summary."""
    found: dict[str, float] = {}
    for name in ("fsync", "fdatasync"):
        match = re.search(rf"^\s*[\d.]+\s+[\d.]+\s+(\d+)\s+(\d+)\s+(?:\d+\s+)?{name}\s*$", summary, re.M)
        found[name] = int(match.group(2)) if match else 0
        found[f"{name}_ms_per_call"] = round(int(match.group(1)) / 1000, 3) if match else 0.0
    return found


async def _publish(url: str, publishes: int, attach) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="FSYNC", subjects=["fsync.>"])
    payload = b"x" * 128
    await js.publish("fsync.a", payload)
    attach()
    started = time.monotonic()
    for _ in range(publishes):
        await js.publish("fsync.a", payload)
    elapsed = time.monotonic() - started
    await nc.close()
    return elapsed


def _traced(pid: int, url: str, publishes: int, trace: Path) -> dict[str, float]:
    """Publish with strace attached to `pid` for exactly the `publishes` (see the module docstring)."""
    tracer: list[subprocess.Popen] = []

    def attach() -> None:
        command = ["strace", "-f", "-c", "-w", "-o", str(trace), "-e", "trace=fsync,fdatasync",
                   "-p", str(pid)]
        tracer.append(subprocess.Popen(command, stderr=subprocess.PIPE, text=True))
        # strace says "Process N attached" for each thread once it traces it; wait for the first.
        assert tracer[0].stderr is not None
        tracer[0].stderr.readline()

    try:
        elapsed = asyncio.run(_publish(url, publishes, attach))
    finally:
        for process in tracer:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
    return {**_count(trace.read_text()), "seconds": round(elapsed, 2)}


def run_jsraft(publishes: int, pythonpath: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        with one_jsraft_serve(work, env) as (pid, url):
            return _traced(pid, url, publishes, Path(work) / "strace.txt")


def run_nats(publishes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work:
        with NatsServers(os.path.join(work, "nats"), nodes=1, sync_always=True) as servers:  # enter starts it
            (pid,) = servers.pids.values()
            return _traced(pid, servers.urls[0], publishes, Path(work) / "strace.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=500)
    parser.add_argument("--pythonpath", default=None)
    parser.add_argument("--system", choices=("jsraft", "nats_always"), default="jsraft")
    args = parser.parse_args()
    if args.system == "jsraft":
        counted = run_jsraft(args.publishes, args.pythonpath)
    else:
        counted = run_nats(args.publishes)
    per = {name: counted[name] / args.publishes for name in ("fsync", "fdatasync")}
    print(json.dumps({"system": args.system, "publishes": args.publishes, "counted": counted,
                      "per_publish": per, "loadavg": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
