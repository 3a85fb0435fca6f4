#!/usr/bin/env python3
"""Restart benchmark: how long a node holding a large R3 stream takes to be `current` again.

Setup: a 3-node `jsraft.testing.cluster.Cluster` (three real nodes in one trio process: real TCP on
loopback, real files and fsync under `--dir` or a temporary directory). One R3 stream is filled with
`--messages` messages of `--payload` bytes through the embedded JetStream API, `--inflight` publishes in
flight, every ack awaited (the fill rate is reported too). Then a follower of the stream is crashed
(`Cluster.kill`: nothing closed or flushed) or stopped cleanly (`--clean`), and started again on the same
directory.

Measured, from the restart call:
  node_started_s   `Cluster.restart` returned: identity checked, transport listening, the runtime running
                   (the meta log replays and stream replicas open after this, in the node's own tasks);
  replica_open_s   the stream replica is open: its message store recovered (from its index when that checks
                   against the blocks, plus a scan of what the index does not cover; else a full scan
                   checking every record's CRC) and its Raft group opened (WAL recovered, snapshot restored);
  current_s        the replica is `current`: its state machine is healthy and done replaying its log, it
                   has applied what the group committed, and its store's state tuple (first, last, count, bytes, digest) equals the
                   stream leader's;
  replay_done_s    its state machine finished replaying its log (part of `current_s`);
  replayed_msgs    the messages that replay applied (those since the replica's last snapshot, bounded by
                   `stream_snapshot_every_msgs`/`_bytes` since 2026-11-27; where the crash fell in the
                   snapshot period decides how many of the bound it is);
  store_verified_s the background verifier has read and CRC-checked every block the open took from the
                   store's index (0 blocks after a full scan).

Usage: python bench/restart_bench.py [--messages N] [--payload B] [--inflight K] [--clean] [--json] [--quick]
       [--profile out.svg|out.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import trio

from jsraft.stream.results import Health
from jsraft.testing.cluster import Cluster

STREAM = "BIG"


def _stream_leader(cluster: Cluster) -> str | None:
    leaders = {n.streams.replicas[STREAM].leader_id() for n in cluster.running() if STREAM in n.streams.replicas}
    return leaders.pop() if len(leaders) == 1 else None


async def _fill(cluster: Cluster, count: int, payload: bytes, inflight: int) -> float:
    js = cluster.node("n1").jetstream()
    next_index = 0
    started = time.perf_counter()

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            ack = await js.publish(f"big.{i % 16}", payload)
            assert ack.seq > 0

    async with trio.open_nursery() as nursery:
        for _ in range(inflight):
            nursery.start_soon(worker)
    return time.perf_counter() - started


def _replica_open(cluster: Cluster, name: str) -> bool:
    """The store is open and so is the Raft group (the adapter learns its recovery target only after
    `open_group` returned; before 2026-11-27 this looked only for the adapter, made before the WAL opens)."""
    replica = cluster.nodes[name].streams.replicas.get(STREAM) if name in cluster.nodes else None
    return replica is not None and replica.adapter is not None and replica.adapter.recovery_target is not None


def _is_current(cluster: Cluster, name: str, leader: str) -> bool:
    node, lead = cluster.nodes.get(name), cluster.nodes.get(leader)
    if node is None or lead is None:
        return False
    replica, leading = node.streams.replicas.get(STREAM), lead.streams.replicas.get(STREAM)
    if replica is None or leading is None or replica.machine is None or leading.store is None:
        return False
    if replica.machine.health is not Health.current or replica.machine.replaying:
        return False  # (until 2026-11-27 the replay's end was not waited for: `replay_done_s` came later)
    status = node.runtime.status(replica.group).raft
    if status.repairing or status.applied_index < status.commit_index:
        return False
    return replica.store.state().agreement_key() == leading.store.state().agreement_key()


def _start_profiler(path: str | None) -> subprocess.Popen[bytes] | None:
    """py-spy sampling this process from the restart call to `current` (`--profile`), or None."""
    if not path:
        return None
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    command = [spy, "record", "--pid", str(os.getpid()), "--rate", "200", "--nonblocking", "-o", path]
    if path.endswith(".txt"):
        command += ["--format", "raw"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # py-spy attaches before the restart starts
    return process


def _stop_profiler(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


async def _watch(cluster: Cluster, name: str, started: float, marks: dict[str, float]) -> None:
    """Record when the restarted replica's replay of its log ended and when its store was verified."""
    while len(marks) < 3:
        replica = cluster.nodes[name].streams.replicas.get(STREAM) if name in cluster.nodes else None
        if _replica_open(cluster, name):
            if not replica.machine.replaying and "replay_done_s" not in marks:
                marks["replay_done_s"] = round(time.perf_counter() - started, 3)
                marks["replayed_msgs"] = replica.adapter.pace.msgs  # no publish since the crash
            if not getattr(replica.store, "unverified", None):
                marks.setdefault("store_verified_s", round(time.perf_counter() - started, 3))
        await trio.sleep(0.005)


async def run(args: argparse.Namespace, base: str) -> dict[str, object]:
    payload = os.urandom(args.payload)
    async with trio.open_nursery() as nursery:
        async with Cluster.start(nursery, 3, base, tick_ms=args.tick_ms, election_ticks=args.election_ticks) as cluster:
            await cluster.wait_for_meta_leader(30)
            await cluster.wait_ready()
            await cluster.node("n1").jetstream().add_stream(name=STREAM, subjects=["big.>"], num_replicas=3)
            fill_s = await _fill(cluster, args.messages, payload, args.inflight)
            leader = await cluster.wait_until(lambda: _stream_leader(cluster), 30, what="a stream leader")
            victim = next(name for name in cluster.names if name != leader)
            await cluster.wait_until(lambda: _is_current(cluster, victim, leader), 120, what="victim current")
            if args.clean:
                await cluster.stop(victim)
            else:
                await cluster.kill(victim)
            profiler = _start_profiler(args.profile)
            started = time.perf_counter()
            await cluster.restart(victim)
            node_started_s = time.perf_counter() - started
            marks: dict[str, float] = {}
            nursery.start_soon(_watch, cluster, victim, started, marks)
            await cluster.wait_until(lambda: _replica_open(cluster, victim), 600, interval=0.005,
                                     what="the replica open")
            replica_open_s = time.perf_counter() - started
            await cluster.wait_until(lambda: _is_current(cluster, victim, leader), 600, interval=0.005,
                                     what="the restarted replica current")
            current_s = time.perf_counter() - started
            _stop_profiler(profiler)
            await cluster.wait_until(lambda: len(marks) == 3, 600, what="the store verified")
            state = cluster.replica_store(victim, STREAM).state()
            return {
                "messages": args.messages, "payload_bytes": args.payload, "inflight": args.inflight,
                "fill_s": round(fill_s, 2), "fill_msgs_per_s": round(args.messages / fill_s),
                "restart": "clean stop" if args.clean else "crash (kill)", "victim": victim,
                "node_started_s": round(node_started_s, 3), "replica_open_s": round(replica_open_s, 3),
                "current_s": round(current_s, 3), **marks,
                "state": {"first_seq": state.first_seq, "last_seq": state.last_seq, "msgs": state.msgs,
                          "bytes": state.bytes},
            }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--payload", type=int, default=128)
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--tick-ms", type=int, default=50)
    parser.add_argument("--election-ticks", type=int, default=10)
    parser.add_argument("--clean", action="store_true", help="stop the node cleanly instead of crashing it")
    parser.add_argument("--dir", default=None, help="keep the cluster's files here (default: a temporary dir)")
    parser.add_argument("--profile", default=None,
                        help="py-spy the restart → current phase into this file (.svg flame graph, .txt folded)")
    parser.add_argument("--quick", action="store_true", help="20,000 messages")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages = 20_000
    with tempfile.TemporaryDirectory(prefix="jsraft-restart-") as tmp:
        result = trio.run(run, args, args.dir or tmp)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
