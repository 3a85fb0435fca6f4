"""Count the fsyncs a single `jsraft serve` makes for N sync publishes (issue #18's one-fsync measure).

Method: start `jsraft serve` (R1, fresh store directory, a free port), create a stream with nats-py and
publish one message (the group is then running), attach `strace -f -c -e trace=fsync,fdatasync -p PID`
(every thread, and threads started later), publish N messages of 128 B one at a time, each awaiting its
ack, detach strace (SIGINT) and read its summary: the fsyncs of exactly the N publishes.
`--pythonpath DIR` runs another checkout's code (e.g. main's `src`) with this venv's packages, for a
before/after comparison.

    .venv/bin/python bench/fsync_count.py --publishes 500 [--pythonpath /work/main/src]

Imports: stdlib, nats-py. Needs `strace`.
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


def _count(summary: str) -> dict[str, int]:
    found = {}
    for name in ("fsync", "fdatasync"):
        match = re.search(rf"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?{name}\s*$", summary, re.M)
        found[name] = int(match.group(1)) if match else 0
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


def run(publishes: int, pythonpath: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        trace = Path(work) / "strace.txt"
        command = [sys.executable, "-m", "jsraft", "serve", "-js", "-sd", f"{work}/store", "-p", "0",
                   "--ports_file_dir", work]
        server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tracer: list[subprocess.Popen] = []

        def attach() -> None:
            tracer.append(subprocess.Popen(["strace", "-f", "-c", "-o", str(trace), "-e", "trace=fsync,fdatasync",
                                            "-p", str(server.pid)], stderr=subprocess.PIPE, text=True))
            # strace says "Process N attached" for each thread once it traces it; wait for the first.
            assert tracer[0].stderr is not None
            tracer[0].stderr.readline()

        try:
            deadline = time.monotonic() + 120
            ports: list[Path] = []
            while not ports:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not write its ports file")
                ports = list(Path(work).glob("*.ports"))
                time.sleep(0.05)
            url = json.loads(ports[0].read_text())["nats"][0]
            elapsed = asyncio.run(_publish(url, publishes, attach))
        finally:
            for process in tracer:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=60)
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
        return {**_count(trace.read_text()), "seconds": round(elapsed, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=500)
    parser.add_argument("--pythonpath", default=None)
    args = parser.parse_args()
    counted = run(args.publishes, args.pythonpath)
    per = {name: counted[name] / args.publishes for name in ("fsync", "fdatasync")}
    print(json.dumps({"publishes": args.publishes, "counted": counted, "per_publish": per}))


if __name__ == "__main__":
    main()
