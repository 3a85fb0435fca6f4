"""Time from exec to `Server is ready` for `jsraft serve` (and nats-server, for comparison).

Method: start the command with stderr piped, read stderr line by line until the readiness line, record the
wall time since just before exec, then SIGTERM the process and wait for it. Repeated `--rounds` times per
command; prints median (min-max) per command. Run with the project's venv:

    .venv/bin/python bench/startup_time.py --rounds 5 [--jetstream] [--nats-server] [-- more server flags]

`--restart-streams N` (with `--messages M`, `--payload B`) times a restart instead, as nats-py's harness
does one: one store directory per command is filled once (N streams, M core-NATS publishes of B bytes
each, every count checked), then each round SIGKILLs the server and starts it again on that directory, and
records two figures from just before exec: `ready` (the readiness line) and `usable` (every stream's
STREAM.INFO answered with its full count, through nats-py). The server's CPU time (user + system) at
`usable` is printed too: under load the wall time is roughly that CPU time over the share of a core the
process gets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

READY = b"Server is ready"


def start_ready(command: list[str], deadline_s: float = 60.0) -> tuple[subprocess.Popen, float, float]:
    """Start `command`; (process, exec time, readiness time), both from `time.perf_counter`."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    while time.perf_counter() - start < deadline_s:
        line = process.stderr.readline()
        if not line:
            raise RuntimeError(f"{command[0]} exited before it was ready (status {process.wait()})")
        if READY in line:
            threading.Thread(target=process.stderr.read, daemon=True).start()  # never block its writes
            return process, start, time.perf_counter()
    process.kill()
    raise RuntimeError(f"{command[0]} not ready within {deadline_s} s")


def time_once(command: list[str], deadline_s: float = 60.0) -> float:
    process, start, ready = start_ready(command, deadline_s)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    return ready - start


def process_cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def fill(url: str, streams: int, messages: int, payload: int) -> None:
    import nats

    nc = await nats.connect(url, allow_reconnect=False)
    js = nc.jetstream(timeout=30)
    for index in range(streams):
        await js.add_stream(name=f"R{index}", subjects=[f"r{index}"])
        for _ in range(messages):
            await nc.publish(f"r{index}", b"x" * payload)
    await nc.flush()
    await usable(url, streams, messages, deadline_s=60.0)
    await nc.close()


async def usable(url: str, streams: int, messages: int, deadline_s: float) -> None:
    """Poll until every stream's INFO answers with `messages` messages (or raise at `deadline_s`)."""
    import nats

    deadline = time.perf_counter() + deadline_s
    while True:
        try:
            nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0)
            break
        except Exception:  # not listening yet, or INFO not served yet: poll
            if time.perf_counter() > deadline:
                raise
            await asyncio.sleep(0.01)
    js = nc.jetstream(timeout=5)
    try:
        for index in range(streams):
            while (await js.stream_info(f"R{index}")).state.messages != messages:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"stream R{index} not complete within {deadline_s} s")
                await asyncio.sleep(0.01)
    finally:
        await nc.close()


def time_restarts(name: str, base: list[str], options: argparse.Namespace) -> list[tuple[float, float, float]]:
    """(ready s, usable s, CPU s at usable) per round of SIGKILL + start on one filled store directory."""
    rounds = []
    with tempfile.TemporaryDirectory(prefix="restart-bench-") as store:
        port = free_port()
        url = f"nats://127.0.0.1:{port}"
        command = [*base, "-p", str(port), "-a", "127.0.0.1", "-js", f"-sd={store}"]
        process, _, _ = start_ready(command)
        try:
            asyncio.run(fill(url, options.restart_streams, options.messages, options.payload))
            for _ in range(options.rounds):
                process.kill()
                process.wait()
                process, start, ready = start_ready(command)
                asyncio.run(usable(url, options.restart_streams, options.messages, deadline_s=60.0))
                done = time.perf_counter()
                rounds.append((ready - start, done - start, process_cpu_s(process.pid)))
        finally:
            process.kill()
            process.wait()
    print(f"{name}: restart with {options.restart_streams} streams x {options.messages} msgs of "
          f"{options.payload} B, {len(rounds)} rounds: " + ", ".join(
              f"{label} median {statistics.median(r[i] for r in rounds):.3f} s "
              f"(min {min(r[i] for r in rounds):.3f}, max {max(r[i] for r in rounds):.3f})"
              for i, label in enumerate(("ready", "usable", "cpu"))))
    return rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jetstream", action="store_true", help="add -js -sd DIR (a fresh directory per round)")
    parser.add_argument("--nats-server", action="store_true", help="also time the nats-server on PATH")
    parser.add_argument("--restart-streams", type=int, default=0,
                        help="time restarts (SIGKILL, start) of a store with this many streams instead")
    parser.add_argument("--messages", type=int, default=1000, help="messages per stream (--restart-streams)")
    parser.add_argument("--payload", type=int, default=1024, help="payload bytes (--restart-streams)")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="more server flags, after --")
    options = parser.parse_args()
    jsraft = os.path.join(os.path.dirname(sys.executable), "jsraft")
    commands = {"jsraft serve": [jsraft, "serve"]}
    nats_server = shutil.which("nats-server", path=os.path.dirname(sys.executable)) or shutil.which("nats-server")
    if options.nats_server and nats_server:
        commands["nats-server"] = [nats_server]
    if options.restart_streams:
        for name, base in commands.items():
            time_restarts(name, base, options)
        return 0
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
