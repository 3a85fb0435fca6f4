"""Where a sync publish's time goes on one node: a time budget from timestamps along the path (issue #18).

Method: start one `jsraft serve` (R1, fresh store directory, a free port) with a tracer on its
`PYTHONPATH` — a `sitecustomize.py` this script writes to a temporary directory, which wraps about fifteen
functions along the publish path (the client connection's socket reads and writes, `_on_pub`, the
stream's ingest and pump, the proposal's entry into the Raft log, the ready loop's cycles, the worker
thread's WAL writes and each `OsFile.sync`, the apply and the PubAck) so that each call leaves a
`time.perf_counter_ns()` mark (the same monotonic clock in every thread). With nats-py, create a stream,
publish 200 warm-up messages, then N messages of 128 B one at a time, each awaiting its ack. Only one
publish is in flight at a time, so the marks between a PUB's socket read and the next write of its ack
belong to that publish; for each, the time from one stage's mark to the next stage's is taken, and the
table shows each stage's median and mean over the publishes (the means add up to the mean total). The
tracer costs about a microsecond per mark; the server's code is otherwise unchanged. `--pythonpath DIR`
runs another checkout's code (e.g. main's `src`) under the same tracer, for a before/after comparison.

    .venv/bin/python bench/publish_trace.py --publishes 3000 [--pythonpath /work/main/src]

Imports: stdlib, nats-py. R1 only: on three nodes the stages interleave across processes.
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
from pathlib import Path

import nats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nats_servers import one_jsraft_serve  # noqa: E402

TRACER = r'''
import atexit, functools, os, threading, time
_out = os.environ["JSRAFT_PUBLISH_TRACE"]
_marks = []
_clock = time.perf_counter_ns
def _flush():
    global _marks
    marks, _marks = _marks, []
    with open(_out, "a") as f:
        f.writelines(f"{t} {name}\n" for name, t in marks)
def _mark(name):
    _marks.append((name, _clock()))
def _wrap(owner, attr, label, end=None, is_async=False):
    orig = getattr(owner, attr)
    if is_async:
        async def wrapper(*args, **kwargs):
            _mark(label)
            try:
                return await orig(*args, **kwargs)
            finally:
                if end: _mark(end)
    else:
        def wrapper(*args, **kwargs):
            _mark(label)
            try:
                return orig(*args, **kwargs)
            finally:
                if end: _mark(end)
    setattr(owner, attr, functools.wraps(orig)(wrapper))
import trio
import jsraft.disk.os_disk as os_disk
import jsraft.replica.persist as replica_persist
import jsraft.replica.publish_pipeline as pipeline
import jsraft.runtime.group as group
import jsraft.runtime.node_runtime as node_runtime
import jsraft.server.groups.stream_publish as stream_publish
import jsraft.server.groups.stream_replica as stream_replica
import jsraft.server.nats.client_conn as client_conn
_wrap(client_conn.ClientConn, "_on_pub", "on_pub")
_wrap(stream_publish.StreamPublishes, "_ingest", "ingest")
_wrap(stream_replica.StreamReplica, "_decide_and_propose", "pump_decide", is_async=True)
_wrap(group.Group, "_propose_now", "propose_now")
_wrap(group.Group, "take_work", "take_work")
_wrap(node_runtime.NodeRuntime, "_persist", "persist_call", "persist_back", is_async=True)
_wrap(replica_persist, "write_work", "t_write")
_wrap(os_disk.OsFile, "sync", "t_fsync", "t_fsync_end")
_wrap(group.Group, "finish", "finish", "finish_end")
_wrap(pipeline.InFlightBatches, "settled", "settled")
_wrap(client_conn.ClientConn, "deliver", "conn_deliver")
if hasattr(client_conn.ClientConn, "_send_now"):  # the ack written by its caller (client_conn invariant 10)
    _wrap(client_conn.ClientConn, "_send_now", "send_all")
_receive_some, _send_all = trio.SocketStream.receive_some, trio.SocketStream.send_all
async def receive_some(self, max_bytes=None):
    data = await _receive_some(self, max_bytes)
    _mark("recv")
    return data
async def send_all(self, data):
    _mark("send_all")
    await _send_all(self, data)
trio.SocketStream.receive_some, trio.SocketStream.send_all = receive_some, send_all
def _flusher():
    while True:
        time.sleep(0.5)
        _flush()
threading.Thread(target=_flusher, daemon=True).start()
atexit.register(_flush)
'''

# (label, the mark that ends the stage): each stage runs from the previous stage's end mark (the first
# from the `recv` of the PUB) to the first mark named here after it.
STAGES = [
    ("client socket read, parse, route to the stream (`_ingest`)", "ingest"),
    ("to the replica's pump task (a scheduling pass)", "pump_decide"),
    ("propose lock, `decide`, permit, into the Raft log", "propose_now"),
    ("pump parks, the ready loop wakes and takes the Ready", "take_work"),
    ("the cycle starts its persistence", "persist_call"),
    ("hand-in to the fsync worker thread (none when inline)", "t_write"),
    ("WAL entry + hard-state record written (page cache)", "t_fsync"),
    ("fsync 1: the WAL segment", "t_fsync_end"),
    ("witness write", "t_fsync"),
    ("fsync 2: the witness", "t_fsync_end"),
    ("hand-back to the trio thread (none when inline)", "persist_back"),
    ("finish cycle 1 (`advance`: the entry commits)", "finish_end"),
    ("cycle 2: the commit's Ready, apply (store append)", "settled"),
    ("settle, PubAck built and queued on the connection", "conn_deliver"),
    ("the ack's write (the writer's, or its caller's: client_out invariant 4)", "send_all"),
]


def budget(trace: Path, last: int) -> dict:
    """Per-stage medians and means (µs) over the `last` publishes in `trace` (the warm-up's are left out)."""
    marks = []
    for line in trace.read_text().splitlines():
        t, name = line.split()
        marks.append((int(t), name))
    marks.sort()
    rows: list[list[float]] = [[] for _ in STAGES]
    totals: list[float] = []
    i, n = 0, len(marks)
    while i < n:
        if marks[i][1] != "on_pub":
            i += 1
            continue
        start = i
        while start > 0 and marks[start][1] != "recv":
            start -= 1
        position, times = start, []
        for _, end in STAGES:
            k = position
            while k < n and marks[k][1] != end:
                k += 1
            if k == n:
                break
            times.append((marks[k][0] - marks[position][0]) / 1000)
            position = k
        if len(times) < len(STAGES):
            break
        for row, value in zip(rows, times):
            row.append(value)
        totals.append((marks[position][0] - marks[start][0]) / 1000)
        i = position + 1
    rows, totals = [row[-last:] for row in rows], totals[-last:]
    return {"publishes": len(totals),
            "stages": [{"stage": label, "p50_us": round(statistics.median(row), 1),
                        "mean_us": round(statistics.mean(row), 1)} for (label, _), row in zip(STAGES, rows)],
            "total_p50_us": round(statistics.median(totals), 1), "total_mean_us": round(statistics.mean(totals), 1)}


async def _publish(url: str, publishes: int) -> list[float]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="TRACE", subjects=["trace.>"])
    payload = b"x" * 128
    for _ in range(200):
        await js.publish("trace.a", payload)
    latencies = []
    for _ in range(publishes):
        begun = time.perf_counter()
        await js.publish("trace.a", payload)
        latencies.append((time.perf_counter() - begun) * 1e6)
    await nc.close()
    return latencies


def run(publishes: int, pythonpath: str | None) -> dict:
    with tempfile.TemporaryDirectory() as work:
        tracer_dir = Path(work) / "tracer"
        tracer_dir.mkdir()
        (tracer_dir / "sitecustomize.py").write_text(TRACER)
        trace = Path(work) / "trace.txt"
        env = dict(os.environ, JSRAFT_PUBLISH_TRACE=str(trace),
                   PYTHONPATH=os.pathsep.join(p for p in (str(tracer_dir), pythonpath) if p))
        with one_jsraft_serve(work, env) as (_, url):
            latencies = asyncio.run(_publish(url, publishes))
        result = budget(trace, publishes)
    result["client_p50_us"] = round(statistics.median(latencies), 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=3000)
    parser.add_argument("--pythonpath", default=None)
    args = parser.parse_args()
    result = run(args.publishes, args.pythonpath)
    print("| stage | p50 µs | mean µs |\n|---|---|---|")
    for row in result["stages"]:
        print(f"| {row['stage']} | {row['p50_us']:.0f} | {row['mean_us']:.0f} |")
    print(f"| total, server (PUB read → ack written) | {result['total_p50_us']:.0f} | {result['total_mean_us']:.0f} |")
    print(f"| client: publish → ack (nats-py) | {result['client_p50_us']:.0f} | |")
    result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    result["pythonpath"] = args.pythonpath
    print(json.dumps(result))


if __name__ == "__main__":
    main()
