#!/usr/bin/env python3
"""Failover benchmark: time from a crash of an R3 stream's leader to the next acknowledged publish.

Setup: three jsraft nodes in this process (`jsraft.testing.cluster.Cluster`: real TCP on 127.0.0.1, real
files, fsync before every ack) built with production settings (`cluster_bench.node_configs`): tick
`--tick-ms` (100), `--election-ticks` (10), so a follower campaigns after a randomized [1.0, 2.0) s
without hearing its leader, with pre-vote and check-quorum on and the production transport timeouts
(`test_mode` off; the router's own per-attempt timeout is then 5 s). One R3 stream.

A run: a publisher on a node that does not lead the stream publishes one message at a time through the
embedded API, each attempt bounded by `--attempt-timeout` seconds (a client-side timeout, as a NATS
client's publish timeout; 0 = none, the router's own), and retried with the same `Nats-Msg-Id` after any
error (the stream's duplicate window makes the retry safe). After a random 0.3–0.6 s of publishing, the
stream leader is crashed with `Cluster.kill` (its tasks are cancelled, nothing is closed or flushed, its
sockets close). Measured from just before the kill:

  failover_s   until the first successful publish whose attempt started after the kill (an ack already
               in flight from the old leader does not count)
  elected_s    until every survivor names the same new stream leader (polled every 5 ms)

Then the publisher stops, the victim is restarted, and the next run waits until it is current again: the
stream's leader reports it `current`, at the leader's last sequence, following the leader; and the meta
group has an agreed leader. `--runs` runs (10); each figure and the median are reported.

Usage: python bench/failover_bench.py [--runs N] [--json] [--attempt-timeout S] [--tick-ms MS]
       [--election-ticks N] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_bench import (ELECTION_TICKS, TICK_MS, describe, machine, production_cluster,  # noqa: E402
                           stream_leader)

from jsraft.errors import JsraftError  # noqa: E402
from jsraft.testing.cluster import Cluster  # noqa: E402

STREAM = "FAIL"
PAYLOAD = bytes(128)


class Publisher:
    """One publish at a time; a failed attempt is retried at once with the same msg id."""

    def __init__(self, js: Any, run: int, attempt_timeout: float | None) -> None:
        self.js, self.run_id, self.timeout = js, run, attempt_timeout
        self.acks: list[tuple[float, float]] = []  # (attempt started, acked), perf_counter seconds
        self.errors: Counter[str] = Counter()

    async def run(self) -> None:
        for index in range(10**9):
            while True:
                started = time.perf_counter()
                try:
                    await self.js.publish("fail.x", PAYLOAD, timeout=self.timeout, msg_id=f"{self.run_id}-{index}")
                except (JsraftError, trio.TooSlowError) as error:
                    self.errors[type(error).__name__] += 1
                    continue
                self.acks.append((started, time.perf_counter()))
                break

    def first_ack_after(self, moment: float) -> float | None:
        return next((acked for started, acked in self.acks if started >= moment), None)


async def wait_current(cluster: Cluster, name: str, timeout: float = 60.0) -> None:
    """Wait until the stream's leader reports replica `name` current, at its last seq, following it."""
    await cluster.wait_for_meta_leader(timeout)

    async def current() -> bool:
        leader = stream_leader(cluster, STREAM)
        if leader is None or leader == name:
            return leader == name
        try:
            info = await cluster.node(leader).jetstream().stream_info(STREAM)
        except JsraftError:
            return False
        replica = info.cluster["replicas"].get(name, {})
        return (replica.get("health") == "current" and replica.get("leader") == leader
                and replica.get("state", {}).get("last_seq") == info.state["last_seq"])
    await cluster.wait_until(current, timeout, interval=0.05, what=f"{name} current")


async def one_run(cluster: Cluster, run: int, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    victim = await cluster.wait_until(lambda: stream_leader(cluster, STREAM), 30, what="a stream leader")
    publisher_node = next(name for name in cluster.names if name != victim)
    meta_leader = cluster.node(publisher_node).meta_leader()
    publisher = Publisher(cluster.node(publisher_node).jetstream(), run, args.attempt_timeout or None)
    elected: list[float] = []

    async def watch_election(killed_at: float) -> None:
        while stream_leader(cluster, STREAM) in (None, victim):
            await trio.sleep(0.005)
        elected.append(time.perf_counter() - killed_at)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publisher.run)
        await cluster.wait_until(lambda: len(publisher.acks) >= 10, 30, what="publisher running")
        await trio.sleep(rng.uniform(0.3, 0.6))
        acks_before = len(publisher.acks)
        killed_at = time.perf_counter()
        await cluster.kill(victim)
        nursery.start_soon(watch_election, killed_at)
        await cluster.wait_until(lambda: publisher.first_ack_after(killed_at), 60, interval=0.002,
                                 what="an ack after the kill")
        await cluster.wait_until(lambda: elected, 60, what="survivors agree on a new leader")
        nursery.cancel_scope.cancel()
    acked = publisher.first_ack_after(killed_at)
    assert acked is not None
    await cluster.restart(victim)
    await wait_current(cluster, victim)
    return {"run": run, "victim": victim, "victim_was_meta_leader": meta_leader == victim,
            "publisher_node": publisher_node, "acks_before_kill": acks_before,
            "elected_s": round(elected[0], 3), "failover_s": round(acked - killed_at, 3),
            "errors": dict(publisher.errors)}


async def run_all(args: argparse.Namespace, root: str) -> list[dict[str, Any]]:
    rng = random.Random(args.seed)
    results = []
    async with trio.open_nursery() as nursery:
        async with production_cluster(nursery, 3, root, tick_ms=args.tick_ms,
                                      election_ticks=args.election_ticks) as cluster:
            await cluster.node("n1").jetstream().add_stream(name=STREAM, subjects=["fail.>"], num_replicas=3)
            for name in cluster.names:
                await wait_current(cluster, name)
            for run in range(args.runs):
                results.append(await one_run(cluster, run, args, rng))
                print(f"run {run}: {results[-1]}", file=sys.stderr)
    return results


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="print the result as JSON on the last line")
    parser.add_argument("--attempt-timeout", type=float, default=0.5,
                        help="client-side timeout of one publish attempt, seconds (0: none, the router's)")
    parser.add_argument("--tick-ms", type=int, default=TICK_MS)
    parser.add_argument("--election-ticks", type=int, default=ELECTION_TICKS)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="jsraft-failover-bench-")
    before = machine(root)
    try:
        runs = trio.run(run_all, args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    failover = [r["failover_s"] for r in runs]
    result = {"machine": {**before, "loadavg_after": machine()["loadavg"]},
              "settings": {"tick_ms": args.tick_ms, "election_ticks": args.election_ticks,
                           "election_timeout_s": [args.tick_ms * args.election_ticks / 1000,
                                                  2 * args.tick_ms * args.election_ticks / 1000],
                           "attempt_timeout_s": args.attempt_timeout or None, "test_mode": False,
                           "runs": args.runs, "seed": args.seed},
              "runs": runs, "failover_s": summary(failover), "elected_s": summary([r["elected_s"] for r in runs]),
              "under_2s": sum(f < 2.0 for f in failover)}
    print(describe(result["machine"]))
    print(f"{'run':>4}{'victim':>8}{'publisher':>11}{'elected s':>11}{'failover s':>12}  errors")
    for r in runs:
        print(f"{r['run']:>4}{r['victim']:>8}{r['publisher_node']:>11}{r['elected_s']:>11}{r['failover_s']:>12}"
              f"  {r['errors']}")
    print(f"failover median {result['failover_s']['median']} s (min {result['failover_s']['min']}, max "
          f"{result['failover_s']['max']}); elected median {result['elected_s']['median']} s; "
          f"{result['under_2s']}/{len(runs)} under 2 s")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
