#!/usr/bin/env python3
"""Raft + WAL benchmark: committed entries per second for a 3-node group in one process, real files, fsync.

Setup: three `RaftNode`s, each with its own `Wal` on an `OsDisk` under a temporary directory (real files,
real fsync of segments, hard state and directories). Messages are delivered in-process (a FIFO queue), so
what is measured is the Raft core, the WAL's encoding and the fsyncs, not a network.

Group commit: a node processes one `Ready` per cycle, and that Ready carries everything that accumulated
since the previous one (entries, hard state); the node persists it and fsyncs once (`Wal.sync`, plus the
hard-state slot write, which always fsyncs) before sending, exactly as the Ready contract requires. A
*round* proposes `batch` entries of `--payload` bytes at the leader (one `propose` call each), then cycles
the three nodes until the leader's commit index covers them. Workloads:

  batch_1      one entry per round: the latency-bound case (each round costs the leader's fsync, then the
               followers' fsyncs, then the leader's commit)
  batch_100    100 entries per round: what group commit buys

For each workload it reports committed entries/s (median of `--rounds` runs, with min and max), fsyncs per
round, and, with `--lazy-hint`, the same with the commit-index hint saved only alongside a durable change
(the hint is safe to lose; see `raft.ready._durable_fields`), which saves one hard-state fsync per cycle.

Usage: python bench/raft_bench.py [--quick] [--json] [--rounds N] [--entries N] [--payload BYTES]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from jsraft.disk import OsDisk
from jsraft.raft import RaftConfig, RaftNode, Ready, RestoredState
from jsraft.wal import Wal

VOTERS = ("n1", "n2", "n3")


class _CountingFile:
    """An `OsFile` whose `sync()` is counted; everything else is passed through."""

    def __init__(self, handle) -> None:  # type: ignore[no-untyped-def]
        self._handle = handle
        self.path = handle.path

    def sync(self) -> None:
        CountingDisk.fsyncs += 1
        self._handle.sync()

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._handle, name)


class CountingDisk(OsDisk):
    """`OsDisk` that counts fsyncs of files (through their handles) and directories."""

    fsyncs = 0

    def open(self, path, *, create=False):  # type: ignore[no-untyped-def]
        return _CountingFile(super().open(path, create=create))

    def sync_dir(self, path: str) -> None:
        CountingDisk.fsyncs += 1
        super().sync_dir(path)


class Member:
    """One node: core + WAL, persisting each Ready (group commit) before its messages leave."""

    def __init__(self, root: str, node_id: str, lazy_hint: bool) -> None:
        self.disk = CountingDisk(os.path.join(root, node_id))
        self.wal, _ = Wal.open(self.disk)
        config = RaftConfig(node_id=node_id, election_ticks=10, max_entries_per_msg=256, max_inflight_msgs=64)
        self.node = RaftNode(config, random.Random(node_id), RestoredState.bootstrap(VOTERS))
        self.lazy_hint = lazy_hint

    def cycle(self, outbox: collections.deque) -> bool:
        node = self.node
        if not node.has_ready():
            return False
        rd: Ready = node.ready()
        wal = self.wal
        if rd.truncate_from is not None and rd.truncate_from <= wal.last_index():
            wal.truncate_from(rd.truncate_from)
        if rd.entries:
            wal.append(list(rd.entries))
        if rd.hard_state is not None and (not self.lazy_hint or rd.must_sync or _durable(rd, wal)):
            wal.save_hard_state(rd.hard_state)
        if rd.must_sync:
            wal.sync()
        outbox.extend(rd.messages)
        node.advance(rd)
        return True

    def close(self) -> None:
        self.wal.close()


def _durable(rd: Ready, wal: Wal) -> bool:
    new, old = rd.hard_state, wal.hard_state
    assert new is not None
    return (new.current_term, new.voted_for, new.acked_watermark, new.repairing) != (
        old.current_term, old.voted_for, old.acked_watermark, old.repairing)


class Group:
    def __init__(self, root: str, lazy_hint: bool) -> None:
        self.members = {n: Member(root, n, lazy_hint) for n in VOTERS}
        self.queue: collections.deque = collections.deque()
        self.members["n1"].node.campaign()
        self.settle(lambda: self.leader.role == "leader")

    @property
    def leader(self) -> RaftNode:
        return self.members["n1"].node

    def settle(self, done, cycles_max: int = 100_000) -> None:  # type: ignore[no-untyped-def]
        for _ in range(cycles_max):
            if done():
                return
            progressed = False
            for member in self.members.values():
                progressed |= member.cycle(self.queue)
            while self.queue:
                message = self.queue.popleft()
                self.members[message.to_id].node.step(message)
                progressed = True
            if not progressed and not done():
                raise RuntimeError("the group stopped making progress")
        raise RuntimeError("did not settle")

    def close(self) -> None:
        for member in self.members.values():
            member.close()


def run_workload(batch: int, entries: int, payload: int, lazy_hint: bool) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix="jsraft-raft-bench-")
    try:
        group = Group(root, lazy_hint)
        data = os.urandom(payload)
        rounds = max(1, entries // batch)
        CountingDisk.fsyncs = 0
        started = time.perf_counter()
        for _ in range(rounds):
            for _ in range(batch):
                target = group.leader.propose(data)
            group.settle(lambda t=target: group.leader.log.commit_index >= t)
        elapsed = time.perf_counter() - started
        fsyncs = CountingDisk.fsyncs
        group.close()
        return {"entries_per_s": rounds * batch / elapsed, "fsyncs_per_round": fsyncs / rounds,
                "ms_per_round": 1000 * elapsed / rounds}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer entries and rounds (a smoke run)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=None, help="runs per workload (median reported)")
    parser.add_argument("--entries", type=int, default=None, help="entries committed per run")
    parser.add_argument("--payload", type=int, default=128, help="bytes per entry")
    parser.add_argument("--lazy-hint", action="store_true", help="also measure with the lazy commit hint")
    args = parser.parse_args(argv)
    runs = args.rounds or (3 if args.quick else 5)
    workloads = {"batch_1": (1, args.entries or (300 if args.quick else 2000)),
                 "batch_100": (100, args.entries or (3000 if args.quick else 30000))}
    modes = [False, True] if args.lazy_hint else [False]
    results: dict[str, dict[str, object]] = {}
    for name, (batch, entries) in workloads.items():
        for lazy in modes:
            key = name + ("_lazy_hint" if lazy else "")
            samples = [run_workload(batch, entries, args.payload, lazy) for _ in range(runs)]
            rates = [s["entries_per_s"] for s in samples]
            results[key] = {
                "batch": batch, "entries": entries, "runs": runs, "payload_bytes": args.payload,
                "entries_per_s_median": round(statistics.median(rates)), "entries_per_s_min": round(min(rates)),
                "entries_per_s_max": round(max(rates)),
                "fsyncs_per_round": round(statistics.median(s["fsyncs_per_round"] for s in samples), 2),
                "ms_per_round": round(statistics.median(s["ms_per_round"] for s in samples), 3),
            }
    print(f"{'workload':<22}{'entries/s (median)':>20}{'min–max':>20}{'fsyncs/round':>14}{'ms/round':>10}")
    for key, r in results.items():
        spread = f"{r['entries_per_s_min']:,}–{r['entries_per_s_max']:,}"
        print(f"{key:<22}{r['entries_per_s_median']:>20,}{spread:>20}{r['fsyncs_per_round']:>14}"
              f"{r['ms_per_round']:>10}")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
