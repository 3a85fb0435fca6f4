"""Time from exec to `Server is ready` for `jsraft serve` (and nats-server, for comparison).

Method: start the command with stderr piped, read stderr line by line until the readiness line, record the
wall time since just before exec, then SIGTERM the process and wait for it. Repeated `--rounds` times per
command; prints median (min-max) per command. Run with the project's venv:

    .venv/bin/python bench/startup_time.py --rounds 5 [--jetstream] [--nats-server] [-- more server flags]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

READY = b"Server is ready"


def time_once(command: list[str], deadline_s: float = 60.0) -> float:
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert process.stderr is not None
        while time.perf_counter() - start < deadline_s:
            line = process.stderr.readline()
            if not line:
                raise RuntimeError(f"{command[0]} exited before it was ready (status {process.wait()})")
            if READY in line:
                return time.perf_counter() - start
        raise RuntimeError(f"{command[0]} not ready within {deadline_s} s")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jetstream", action="store_true", help="add -js -sd DIR (a fresh directory per round)")
    parser.add_argument("--nats-server", action="store_true", help="also time the nats-server on PATH")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="more server flags, after --")
    options = parser.parse_args()
    jsraft = os.path.join(os.path.dirname(sys.executable), "jsraft")
    commands = {"jsraft serve": [jsraft, "serve"]}
    nats_server = shutil.which("nats-server", path=os.path.dirname(sys.executable)) or shutil.which("nats-server")
    if options.nats_server and nats_server:
        commands["nats-server"] = [nats_server]
    results: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(options.rounds):
        for name, base in commands.items():  # alternate, so load swings hit both sides alike
            with tempfile.TemporaryDirectory(prefix="startup-bench-") as store:
                extra = ["-js", "-sd", store] if options.jetstream else []
                more = [flag for flag in options.extra if flag != "--"]
                results[name].append(time_once([*base, "-p", "-1", "-a", "127.0.0.1", *extra, *more]))
    for name, times in results.items():
        print(f"{name}: median {statistics.median(times):.3f} s (min {min(times):.3f}, max {max(times):.3f}), "
              f"{len(times)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
