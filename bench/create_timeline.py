"""Where a stream create's time goes inside one jsraft node: in-process timestamps of its steps.

Method: one `jsraft serve` (this file re-run with `--serve`, which wraps chosen functions of the server
with timers before starting it — the server's code is not changed), one nats-py connection creating
`--creates` assets of `--kind` one after the other (streams named as nats-py's
`test_jsm_stream_management_with_offset` names them; a pause of `--gap-ms` between them so each create's
steps are its own; `--gap-ms 0` for back to back, where a create's tail overlaps the next one). Each wrapped call records its start, end and thread; for each create (its
`JsApi.stream_create` call) every recorded step inside it is placed relative to the request's arrival.
Printed per step (over the creates after `--skip`, or the `--last` N of them): how many creates had it, the median start and end offset (ms), and the median summed
duration when a step ran more than once in a create (fsyncs). Under strace or py-spy the figures move; this
one adds only a `perf_counter` pair per wrapped call.

    .venv/bin/python bench/create_timeline.py --creates 50 --kind stream
    PYTHONPATH=/work/main/src .venv/bin/python bench/create_timeline.py --creates 50   # another checkout

The work directory (the store, `events.json`, `serve.log`: a few MiB) is removed at the end, also when the
run fails; `--keep` keeps it and prints its path.

Imports: stdlib, nats-py in the driver; jsraft only in the `--serve` child.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

# (module, attribute path, label): the steps timed in the server.
STEPS = (
    ("jsraft.server.api.jsapi_handlers", "JsApi.stream_create", "api.stream_create"),
    ("jsraft.server.groups.meta_service", "MetaService.create_stream", "meta.create_stream"),
    ("jsraft.replica.meta_adapter", "MetaAdapter.apply", "meta.apply"),
    ("jsraft.server.groups.streams", "prepare_format", "format.prepare (thread)"),
    ("jsraft.server.groups.streams", "format_new_replica", "format.rename (thread)"),  # before `format_and_open`
    ("jsraft.server.groups.stream_format", "format_new_replica", "format.rename (thread)"),
    ("jsraft.runtime.node_runtime", "open_storage", "wal.open (thread)"),  # before `format_and_open`
    ("jsraft.server.groups.stream_format", "open_storage", "wal.open (thread)"),
    ("jsraft.server.groups.streams", "open_replica_files", "store.open (thread)"),
    ("jsraft.server.groups.streams", "StreamManager._open", "streams.open"),
    ("jsraft.server.groups.stream_replica", "StreamReplica.open", "replica.open"),
    ("jsraft.server.groups.stream_replica", "StreamReplica.wait_leader", "replica.wait_leader"),
    ("jsraft.server.api.jsapi_handlers", "JsApi._settled_info", "api.settled_info"),
    ("jsraft.replica.persist", "sync_work", "persist.sync_work"),
    ("jsraft.wal.log", "Wal.sync", "wal.sync"),
    ("jsraft.disk.os_disk", "OsFile.sync", "fsync file"),
    ("jsraft.disk.os_disk", "OsDisk._fsync_dir", "fsync dir"),
    ("jsraft.disk.os_disk", "OsDisk.write_atomic", "write_atomic"),
)


def _wrap(events: list, label: str, fn: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                events.append((label, start, time.perf_counter(), threading.current_thread().name))
        return timed_async

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            events.append((label, start, time.perf_counter(), threading.current_thread().name))
    return timed


def serve(out: str, argv: list[str]) -> None:
    """The child: wrap the steps, run `jsraft serve argv`, dump the events at SIGTERM."""
    import importlib
    events: list = []
    for module_name, path, label in STEPS:
        owner: Any = importlib.import_module(module_name)
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        if not hasattr(owner, attribute):  # a step of another version of the code (the STEPS comments)
            continue
        setattr(owner, attribute, _wrap(events, label, getattr(owner, attribute)))

    from jsraft.cli import main
    sys.argv = ["jsraft", "serve", *argv]
    try:
        main()  # until SIGTERM, which `jsraft serve` handles as a clean stop
    finally:
        with open(out, "w") as file:
            json.dump(list(events), file)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _drive(port: int, kind: str, creates: int, gap_s: float) -> list[float]:
    import nats
    from nats.js.api import KeyValueConfig, ObjectStoreConfig
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    js = nc.jetstream()
    latencies = []
    for i in range(creates):
        start = time.perf_counter()
        if kind == "stream":
            await js.add_stream(name=f"stream_{i}")  # as nats-py's test_jsm_stream_management_with_offset
        elif kind == "kv":
            await js.create_key_value(KeyValueConfig(bucket=f"B{i}"))
        else:
            await js.create_object_store(bucket=f"O{i}", config=ObjectStoreConfig())
        latencies.append((time.perf_counter() - start) * 1000)
        await asyncio.sleep(gap_s)
    await nc.close()
    return latencies


def report(events: list, skip: int, last: int = 0) -> None:
    events.sort(key=lambda event: event[1])
    creates = [event for event in events if event[0] == "api.stream_create"][skip:]
    creates = creates[-last:] if last else creates
    per_label: dict[str, list[tuple[float, float, float, int]]] = {}
    for _, begin, end, _ in creates:
        inside: dict[str, list] = {}
        for label, start, stop, _ in events:
            if begin <= start <= end and label != "api.stream_create":
                inside.setdefault(label, []).append((start, stop))
        for label, spans in inside.items():
            per_label.setdefault(label, []).append(
                ((spans[0][0] - begin) * 1000, (spans[-1][1] - begin) * 1000,
                 sum(stop - start for start, stop in spans) * 1000, len(spans)))
    total = [(end - begin) * 1000 for _, begin, end, _ in creates]
    print(f"creates {len(creates)}; api.stream_create median {statistics.median(total):.2f} ms")
    print(f"{'step':28} {'n':>4} {'first start':>11} {'last end':>9} {'sum dur':>8} {'calls':>5}")
    rows = sorted(per_label.items(), key=lambda item: statistics.median(row[0] for row in item[1]))
    for label, rows_ in rows:
        print(f"{label:28} {len(rows_):4d} {statistics.median(r[0] for r in rows_):11.2f} "
              f"{statistics.median(r[1] for r in rows_):9.2f} {statistics.median(r[2] for r in rows_):8.2f} "
              f"{statistics.median(r[3] for r in rows_):5.1f}")


def show(events: list, which: int) -> None:
    """Every recorded step of create number `which`, in order of start (ms from the request; thread)."""
    creates = [event for event in events if event[0] == "api.stream_create"]
    _, begin, end, _ = creates[which]
    print(f"create {which}: {(end - begin) * 1000:.2f} ms")
    for label, start, stop, thread in events:
        if begin <= start <= end:
            print(f"  {(start - begin) * 1000:7.2f} {(stop - begin) * 1000:7.2f}  {label:26} {thread}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=50)
    parser.add_argument("--kind", default="stream", choices=("stream", "kv", "obj"))
    parser.add_argument("--gap-ms", type=float, default=50.0)
    parser.add_argument("--show", type=int, default=-1, help="also list every step of this create (0-based)")
    parser.add_argument("--skip", type=int, default=5, help="first creates left out (warm-up)")
    parser.add_argument("--last", type=int, default=0, help="report only the last N creates (0: all after --skip)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (store, events.json, "
                        "serve.log) and print its path")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="jsraft-create-timeline-")
    try:
        events, latencies = run(work, args)
    finally:
        # The store, events.json and serve.log are a few MiB a run: left in /tmp they pile up, run after run.
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{args.kind}: client median {statistics.median(latencies[args.skip:]):.2f} ms, load {os.getloadavg()[0]:.1f}")
    report(events, args.skip, args.last)
    if args.show >= 0:
        show(events, args.show)


def run(work: str, args: argparse.Namespace) -> tuple[list, list[float]]:
    """One `--serve` child with its store under `work`, driven by `--creates` creates: its events, the latencies."""
    port, out, log_path = _free_port(), os.path.join(work, "events.json"), os.path.join(work, "serve.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", out, "-p", str(port), "-js",
                                 "-sd", os.path.join(work, "store"), "--name", "n1"],
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        _wait_listening(proc, port, log_path)
        latencies = asyncio.run(_drive(port, args.kind, args.creates, args.gap_ms / 1000))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # the work directory is removed next: no child may still write there
            proc.kill()
            proc.wait()
    with open(out) as file:
        return json.load(file), latencies


def _wait_listening(proc: subprocess.Popen, port: int, log_path: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                # The work directory goes with the failure (unless --keep): say what the server said here.
                with open(log_path) as log:
                    tail = log.read()[-4000:]
                raise SystemExit(f"server did not start; the end of its serve.log:\n{tail}")
            time.sleep(0.05)


if __name__ == "__main__":
    main()
