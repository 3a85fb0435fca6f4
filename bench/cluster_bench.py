#!/usr/bin/env python3
"""Cluster benchmark: publish throughput through jsraft's embedded API (R1, R3) against PySyncObj, one run.

jsraft: R1 is one node (`jsraft.open_node`, no peers); R3 is three nodes in this process
(`jsraft.testing.cluster.Cluster`: real TCP on 127.0.0.1, real files, fsync before every ack), built with
the settings a production node runs (`NodeConfig` defaults: tick 100 ms, election 10 ticks, production
transport timeouts, `test_mode` off). Publishes go through `node.jetstream().publish` on the node that
leads the stream (as the anchor's PySyncObj figure is taken in the leader's process), and every PubAck is
awaited. Workloads, `--payload` bytes each (random, from a pool of 1,024 distinct payloads):

  sync     one publisher, one publish at a time
  async    `--inflight` publishers (256) sharing the count: that many publishes in flight

PySyncObj (if importable): three `SyncObj` processes on localhost (`bench/pysyncobj_node.py`), each with
`SyncObjConf(journalFile=...)` (an mmap'ed file journal: written per append, never fsynced), replicating
`append(payload)` onto a list. The driver runs inside the leader's process: sync = `append(..., sync=True)` one at a time; async =
`append(..., callback=...)` with at most `--inflight` uncommitted. Its command batching
(`appendEntriesUseBatch`) is off: with it on (PySyncObj's default) a command waits for the next 50 ms
tick, which measured slower for both workloads here (`--pysyncobj-batch` turns it on to check). A commit
is counted when its callback reports success; the bench then checks that every node applied every append.

Each round runs jsraft R1 sync, R3 sync, PySyncObj sync, R1 async, R3 async, PySyncObj async (after one
unrecorded warm-up of each); medians over `--rounds` with min–max; the ratio jsraft R3 / PySyncObj is taken
per round, from the two runs made one after the other, and its median reported. Every system stays up for the
whole run (the idle ones tick in the background). CPU: seconds per 1,000 messages, all processes of that
system together (for jsraft this process, which also runs the publishers; for PySyncObj its three
processes, the driver included). The counts are verified: the stream holds every acked message.

Usage: python bench/cluster_bench.py [--quick] [--json] [--rounds N] [--sync-msgs N] [--async-msgs N]
       [--inflight K] [--payload BYTES] [--tick-ms MS] [--election-ticks N] [--no-pysyncobj] [--pysyncobj-batch]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

import jsraft
from jsraft.server import NodeConfig
from jsraft.testing.cluster import Cluster, free_ports

TICK_MS = 100  # NodeConfig's defaults: what a production node runs
ELECTION_TICKS = 10
POOL = 1024
NODE_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pysyncobj_node.py")


# --- Figures ----------------------------------------------------------------------------------------------

def summarize(count: int, elapsed: float, latencies: list[float], failures: int = 0) -> dict[str, Any]:
    """msgs/s and nearest-rank p50/p99 of the ack latencies (seconds in, ms out)."""
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else 0.0
    return {"msgs": count, "failures": failures, "seconds": round(elapsed, 3),
            "msgs_per_s": round(count / elapsed) if elapsed > 0 else 0, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


def payload_pool(size: int) -> list[bytes]:
    blob = os.urandom(size * POOL)
    return [blob[i * size:(i + 1) * size] for i in range(POOL)]


def machine(probe_dir: str | None = None) -> dict[str, Any]:
    """CPUs, load average and, given a directory, the disk's latency for 200 x (write 128 B + fsync)."""
    found: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "platform": platform.platform(), "loadavg": [round(x, 2) for x in os.getloadavg()]}
    if probe_dir is not None:
        path = os.path.join(probe_dir, "fsync.probe")
        fd, latencies = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), []
        for _ in range(200):
            os.write(fd, bytes(128))
            started = time.perf_counter()
            os.fsync(fd)
            latencies.append(time.perf_counter() - started)
        os.close(fd)
        os.unlink(path)
        figures = summarize(len(latencies), sum(latencies), latencies)
        found |= {"fsync_p50_ms": figures["p50_ms"], "fsync_p99_ms": figures["p99_ms"]}
    return found


def describe(found: dict[str, Any]) -> str:
    return (f"{found['cpus']} CPUs, load average {found['loadavg']} before, {found.get('loadavg_after')} after; "
            f"write 128 B + fsync p50 {found.get('fsync_p50_ms')} ms, p99 {found.get('fsync_p99_ms')} ms")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (Linux /proc), in seconds."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- jsraft ---------------------------------------------------------------------------------------------

def node_configs(n: int, base_dir: str, *, tick_ms: int = TICK_MS,
                 election_ticks: int = ELECTION_TICKS) -> dict[str, NodeConfig]:
    """What `Cluster.start` builds, but with `test_mode` off: production transport timeouts."""
    names = [f"n{i + 1}" for i in range(n)]
    addresses = {name: f"127.0.0.1:{port}" for name, port in zip(names, free_ports(n))}
    return {name: NodeConfig(name=name, store_dir=os.path.join(base_dir, name), cluster_name="bench",
                             cluster_port=int(addresses[name].rpartition(":")[2]), client_port=0,
                             tick_ms=tick_ms, election_ticks=election_ticks, test_mode=False,
                             peers={p: a for p, a in addresses.items() if p != name})
            for name in names}


@contextlib.asynccontextmanager
async def production_cluster(nursery: trio.Nursery, n: int, base_dir: str, **settings: int) -> AsyncIterator[Cluster]:
    cluster = Cluster(nursery, node_configs(n, base_dir, **settings))
    try:
        for name in cluster.names:
            await cluster.start_node(name)
        await cluster.wait_for_meta_leader(30)
        await cluster.wait_ready(30)
        yield cluster
    finally:
        await cluster.stop_all()


def stream_leader(cluster: Cluster, stream: str) -> str | None:
    """The leader every running replica of `stream` names, if they agree and it is running."""
    running = cluster.running()
    leaders = {node.streams.replicas[stream].leader_id() for node in running if stream in node.streams.replicas}
    leader = leaders.pop() if len(leaders) == 1 else None
    return leader if leader in {node.name for node in running} else None


async def publish_load(js: Any, subject: str, count: int, inflight: int, payloads: list[bytes]) -> dict[str, Any]:
    """`count` publishes from `inflight` tasks, each awaiting its PubAck; latency per publish."""
    latencies: list[float] = []
    issued = 0

    async def worker() -> None:
        nonlocal issued
        while issued < count:
            payload = payloads[issued % POOL]
            issued += 1
            started = time.perf_counter()
            await js.publish(subject, payload)
            latencies.append(time.perf_counter() - started)

    cpu, started = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(min(inflight, count)):
            nursery.start_soon(worker)
    result = summarize(len(latencies), time.perf_counter() - started, latencies)
    result["cpu_s_per_1000"] = round(1000 * (time.process_time() - cpu) / count, 3)
    return result


class JsraftTarget:
    """A stream and the node that publishes to it; `run` verifies the stream holds every ack."""

    def __init__(self, js: Any, stream: str, payloads: list[bytes]) -> None:
        self.js, self.stream, self.payloads = js, stream, payloads
        self.published = 0

    async def run(self, count: int, inflight: int) -> dict[str, Any]:
        result = await publish_load(self.js, f"{self.stream.lower()}.x", count, inflight, self.payloads)
        self.published += count
        messages = (await self.js.stream_info(self.stream)).state["messages"]
        if messages != self.published:
            raise RuntimeError(f"{self.stream}: {messages} messages stored, {self.published} acked")
        return result


@contextlib.asynccontextmanager
async def jsraft_targets(root: str, payloads: list[bytes], **settings: int) -> AsyncIterator[dict[str, JsraftTarget]]:
    """R1 on a single node, R3 on a three-node cluster; the R3 publisher is the stream leader's node."""
    single = NodeConfig(name="solo", store_dir=os.path.join(root, "r1"), cluster_port=0, client_port=0, **settings)
    async with jsraft.open_node(single, ready_timeout_s=30) as solo, trio.open_nursery() as nursery:
        async with production_cluster(nursery, 3, os.path.join(root, "r3"), **settings) as cluster:
            await solo.jetstream().add_stream(name="R1", subjects=["r1.>"], num_replicas=1)
            await cluster.node("n1").jetstream().add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
            leader = await cluster.wait_until(lambda: stream_leader(cluster, "R3"), 30, what="R3 stream leader")
            yield {"r1": JsraftTarget(solo.jetstream(), "R1", payloads),
                   "r3": JsraftTarget(cluster.node(leader).jetstream(), "R3", payloads)}


# --- PySyncObj: the driver --------------------------------------------------------------------------------

class PsoCluster:
    """Three PySyncObj processes (`pysyncobj_node.py`), spoken to over their stdin/stdout."""

    def __init__(self, root: str, *, batch: bool, payload: int) -> None:
        os.makedirs(root, exist_ok=True)
        addresses = [f"127.0.0.1:{port}" for port in free_ports(3)]
        self.procs, self.logs = [], []
        for i, address in enumerate(addresses):
            spec = {"self": address, "peers": [a for a in addresses if a != address], "batch": batch,
                    "journal": os.path.join(root, f"node{i}.journal"), "payload": payload}
            self.logs.append(open(os.path.join(root, f"node{i}.log"), "w"))
            self.procs.append(subprocess.Popen([sys.executable, NODE_PROGRAM, json.dumps(spec)], text=True,
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.logs[-1]))
        self.applied = 0

    def ask(self, index: int, **request: Any) -> dict[str, Any]:
        proc = self.procs[index]
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"PySyncObj node {index} exited ({proc.poll()})")
        return json.loads(line)

    def wait_until(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            statuses = [self.ask(i, op="status") for i in range(3)]
            if predicate(statuses):
                return statuses
            time.sleep(0.02)
        raise TimeoutError(f"PySyncObj: {what} not reached in {timeout}s")

    def leader(self) -> int:
        statuses = self.wait_until(lambda s: sum(x["leader"] for x in s) == 1 and all(x["known"] and x["ready"]
                                                                                       for x in s), 30, "a leader")
        return next(i for i, status in enumerate(statuses) if status["leader"])

    def run(self, count: int, inflight: int) -> dict[str, Any]:
        leader = self.leader()
        cpu = sum(proc_cpu_s(proc.pid) for proc in self.procs)
        answer = self.ask(leader, op="run", count=count, inflight=inflight)
        result = summarize(len(answer["latencies"]), answer["elapsed"], answer["latencies"], answer["failures"])
        result["failure_reasons"] = answer.get("failure_reasons", {})
        result["cpu_s_per_1000"] = round(1000 * (sum(proc_cpu_s(p.pid) for p in self.procs) - cpu) / count, 3)
        # Every node applied the same log, with every acked append (a failed one may be applied too).
        floor = self.applied + result["msgs"]
        statuses = self.wait_until(lambda s: len({x["entries"] for x in s}) == 1 and s[0]["entries"] >= floor,
                                   30, "every node applied")
        self.applied = statuses[0]["entries"]
        return result

    def close(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()


# --- The run ------------------------------------------------------------------------------------------------

def aggregate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [s["msgs_per_s"] for s in samples]
    return {"msgs": samples[0]["msgs"], "rounds": len(samples), "msgs_per_s_median": round(statistics.median(rates)),
            "msgs_per_s_min": min(rates), "msgs_per_s_max": max(rates),
            "p50_ms": round(statistics.median(s["p50_ms"] for s in samples), 3),
            "p99_ms": round(statistics.median(s["p99_ms"] for s in samples), 3),
            "cpu_s_per_1000": round(statistics.median(s["cpu_s_per_1000"] for s in samples), 3),
            "failures": sum(s["failures"] for s in samples), "samples": rates,
            "failure_reasons": dict(sum((Counter(s.get("failure_reasons", {})) for s in samples), Counter()))}


def ratios(samples: dict[str, list[dict[str, Any]]], mode: str) -> dict[str, Any] | None:
    """jsraft R3 / PySyncObj msgs/s, each round's pair (taken one after the other)."""
    pairs = zip(samples.get(f"jsraft_r3_{mode}", []), samples.get(f"pysyncobj_{mode}", []))
    per_round = [mine["msgs_per_s"] / theirs["msgs_per_s"] for mine, theirs in pairs]
    return {"median": round(statistics.median(per_round), 2), "min": round(min(per_round), 2),
            "max": round(max(per_round), 2)} if per_round else None


async def run_rounds(args: argparse.Namespace, root: str, pso: PsoCluster | None) -> dict[str, list]:
    payloads = payload_pool(args.payload)
    samples: dict[str, list[dict[str, Any]]] = {}
    async with jsraft_targets(root, payloads, tick_ms=args.tick_ms, election_ticks=args.election_ticks) as targets:
        async def measure(key: str, count: int, inflight: int) -> dict[str, Any]:
            system, _, _ = key.partition("_")
            if system == "pysyncobj":
                assert pso is not None
                return await trio.to_thread.run_sync(pso.run, count, inflight)
            return await targets[key.split("_")[1]].run(count, inflight)

        plan = [(f"jsraft_{r}_{m}", n, k) for m, n, k in (("sync", args.sync_msgs, 1),
                                                            ("async", args.async_msgs, args.inflight))
                for r in ("r1", "r3")]
        for mode in ("sync", "async") if pso else ():  # PySyncObj right after jsraft R3, same workload
            at = next(i for i, (key, _, _) in enumerate(plan) if key == f"jsraft_r3_{mode}")
            plan.insert(at + 1, (f"pysyncobj_{mode}", plan[at][1], plan[at][2]))
        for key, count, inflight in plan:  # warm-up, not recorded
            await measure(key, min(count, 200), inflight)
        for _ in range(args.rounds):
            for key, count, inflight in plan:
                samples.setdefault(key, []).append(await measure(key, count, inflight))
    return samples


def start_pysyncobj(args: argparse.Namespace, root: str) -> tuple[PsoCluster | None, str | None]:
    if args.no_pysyncobj:
        return None, "skipped: --no-pysyncobj"
    if importlib.util.find_spec("pysyncobj") is None:
        return None, "skipped: PySyncObj is not installed (pip install 'jsraft[bench]' or pip install pysyncobj)"
    return PsoCluster(os.path.join(root, "pysyncobj"), batch=args.pysyncobj_batch, payload=args.payload), None


def report(args: argparse.Namespace, samples: dict[str, list], pso_note: str | None, before: dict) -> dict:
    pso_version = importlib.metadata.version("pysyncobj") if pso_note is None else None
    return {"machine": {**before, "loadavg_after": machine()["loadavg"]},
            "settings": {"payload_bytes": args.payload, "sync_msgs": args.sync_msgs, "async_msgs": args.async_msgs,
                         "inflight": args.inflight, "rounds": args.rounds, "tick_ms": args.tick_ms,
                         "election_ticks": args.election_ticks, "pysyncobj": pso_version,
                         "pysyncobj_batch": args.pysyncobj_batch},
            "workloads": {key: aggregate(runs) for key, runs in samples.items()},
            "ratio_r3_over_pysyncobj": {mode: ratios(samples, mode) for mode in ("sync", "async")},
            "pysyncobj_note": pso_note}


def print_table(result: dict[str, Any]) -> None:
    print(describe(result["machine"]))
    print(f"{'workload':<22}{'msgs':>8}{'msgs/s (median)':>17}{'min–max':>17}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'cpu s/1000':>11}")
    for key, r in result["workloads"].items():
        spread = f"{r['msgs_per_s_min']:,}–{r['msgs_per_s_max']:,}"
        print(f"{key:<22}{r['msgs']:>8,}{r['msgs_per_s_median']:>17,}{spread:>17}{r['p50_ms']:>9}{r['p99_ms']:>9}"
              f"{r['cpu_s_per_1000']:>11}")
    for key, r in result["workloads"].items():
        if r["failures"]:
            print(f"{key}: {r['failures']} failed (not counted): {r['failure_reasons']}")
    for mode, ratio in result["ratio_r3_over_pysyncobj"].items():
        if ratio:
            print(f"ratio jsraft R3 / PySyncObj, {mode}: {ratio['median']} ({ratio['min']}–{ratio['max']})")
    if result["pysyncobj_note"]:
        print(f"PySyncObj {result['pysyncobj_note']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one round (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on the last line")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--sync-msgs", type=int, default=None, help="messages per sync run")
    parser.add_argument("--async-msgs", type=int, default=None, help="messages per async run")
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--payload", type=int, default=128, help="bytes per message")
    parser.add_argument("--tick-ms", type=int, default=TICK_MS, help="jsraft tick (production default)")
    parser.add_argument("--election-ticks", type=int, default=ELECTION_TICKS)
    parser.add_argument("--no-pysyncobj", action="store_true", help="measure jsraft only")
    parser.add_argument("--pysyncobj-batch", action="store_true", help="PySyncObj with appendEntriesUseBatch on")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.sync_msgs = args.sync_msgs or (100 if args.quick else 500)
    args.async_msgs = args.async_msgs or (1000 if args.quick else 10000)
    root = tempfile.mkdtemp(prefix="jsraft-cluster-bench-")
    before = machine(root)
    pso: PsoCluster | None = None
    try:
        pso, pso_note = start_pysyncobj(args, root)
        samples = trio.run(run_rounds, args, root, pso)
    finally:
        if pso is not None:
            pso.close()
        shutil.rmtree(root, ignore_errors=True)
    result = report(args, samples, pso_note, before)
    print_table(result)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
