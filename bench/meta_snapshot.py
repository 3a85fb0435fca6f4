#!/usr/bin/env python3
"""Meta snapshot cost with thousands of streams: `encode_state`, `state_digest` and `decode_state`.

Why: the meta group snapshots its whole state every `META_SNAPSHOT_ENTRIES` applied entries on the node's
trio thread (`encode_state`, every group's heartbeats wait meanwhile); the chaos checker and the tests
compare `state_digest`; `decode_state` runs when a snapshot is installed and at every restart. Each is
O(streams), and nats-server users run thousands of streams (a KV bucket is a stream).

Method: for each size N in `--streams`, one `MetaState` like a 3-node cluster's after N stream creates and
N consumer creates: peers n1..n3 each with a storage UUID (so format version 2, as on a running server),
N R3 streams `S<i>` (config `{"name": "S<i>", "subjects": ["s<i>.>"], "num_replicas": 3}` as a client
sends it, peers rotated so each node is preferred leader of a third), each with one durable consumer `C`
(`{"durable_name": "C", "ack_policy": "explicit"}`), created at successive meta log indexes. The state is
built the way `decode_state` builds one (`assignment.load_stream` / `load_consumer`), so it needs nothing
but `jsraft.meta`, and runs against any checkout (`PYTHONPATH=<checkout>/src`). Then everything built is
frozen (`gc.collect(); gc.freeze()`, as `jsraft serve` freezes what survives full collections), and each
of the three calls runs `--rounds` times after a `gc.collect()`, timed with `perf_counter` (the median, min
and max are reported) and with `process_time` (the median: on shared cores the process's CPU time moves
less than its wall time). Every size also checks `encode_state(decode_state(b)) == b` once, untimed.

    .venv/bin/python bench/meta_snapshot.py --streams 1000,2000,5000,10000 [--rounds 5] [--json]

Imports: stdlib, `jsraft.meta` (its snapshot, state, assignment, entries and placement modules).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from jsraft.jsapi import API_LEVEL
from jsraft.meta.assignment import load_consumer, load_stream
from jsraft.meta.entries import group_name
from jsraft.meta.placement import PeerInfo
from jsraft.meta.snapshot import decode_state, encode_state, state_digest
from jsraft.meta.state import MetaState

PEERS = ("n1", "n2", "n3")
CONSUMER_CONFIG = json.dumps({"durable_name": "C", "ack_policy": "explicit"}).encode()
NOW_NS = 1_700_000_000_000_000_000


def build_state(streams: int) -> MetaState:
    """The meta state after 3 PEER_ADD, 3 PEER_SEEN, then per stream a create and a consumer create."""
    state = MetaState(API_LEVEL)
    for peer in PEERS:
        state.peers[peer] = PeerInfo(cluster=None, tags=())
        state.storage_uuids[peer] = f"uuid-{peer}"
    index = 2 * len(PEERS)
    for i in range(streams):
        name = f"S{i}"
        peers = PEERS[i % 3:] + PEERS[:i % 3]
        raw = json.dumps({"name": name, "subjects": [f"s{i}.>"], "num_replicas": 3}).encode()
        index += 1
        state.streams[name] = load_stream(name, raw, peers=peers, group=group_name(name, index),
                                          created_ns=NOW_NS + i, created_index=index, required_level=0)
        index += 1
        state.consumers[name] = {"C": load_consumer(name, "C", CONSUMER_CONFIG, created_ns=NOW_NS + i,
                                                    created_index=index, required_level=0)}
    state.applied_index = index
    return state


def _timed_ms(call: Callable[[], object], rounds: int) -> dict[str, float]:
    """Wall time (what the node's other work waits) and this process's CPU time (steadier when other jobs
    share the cores: it leaves out the time the process waited for one)."""
    seconds, cpu_seconds = [], []
    for _ in range(rounds):
        gc.collect()
        began, cpu_began = time.perf_counter(), time.process_time()
        call()
        seconds.append(time.perf_counter() - began)
        cpu_seconds.append(time.process_time() - cpu_began)
    return {"median": round(statistics.median(seconds) * 1000, 2), "min": round(min(seconds) * 1000, 2),
            "max": round(max(seconds) * 1000, 2), "cpu_median": round(statistics.median(cpu_seconds) * 1000, 2)}


def measure(streams: int, rounds: int) -> dict[str, Any]:
    state = build_state(streams)
    data = encode_state(state)
    # Untimed: the snapshot decodes and re-encodes to itself (format invariant 1), so what is timed is right.
    if encode_state(decode_state(data, api_level=API_LEVEL)) != data:
        raise SystemExit(f"{streams} streams: encode_state(decode_state(b)) != b")
    gc.collect()
    gc.freeze()
    try:
        return {"streams": streams, "snapshot_bytes": len(data),
                "encode_ms": _timed_ms(lambda: encode_state(state), rounds),
                "digest_ms": _timed_ms(lambda: state_digest(state), rounds),
                "decode_ms": _timed_ms(lambda: decode_state(data, api_level=API_LEVEL), rounds)}
    finally:
        gc.unfreeze()


def run(sizes: list[int], rounds: int) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    rows = [measure(streams, rounds) for streams in sizes]
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": rounds,
            "python": platform.python_version(), "loadavg": [load_start, os.getloadavg()[0]], "rows": rows}


def _table(result: dict[str, Any]) -> str:
    lines = [f"{result['date']}, wall ms: median of {result['rounds']} rounds (min-max) [CPU ms median], load "
             f"{result['loadavg'][0]:.2f} -> {result['loadavg'][1]:.2f}",
             "| streams | snapshot bytes | encode_state ms | state_digest ms | decode_state ms |",
             "|---|---|---|---|---|"]
    for row in result["rows"]:
        cells = [f"{row[key]['median']} ({row[key]['min']}-{row[key]['max']}) [{row[key]['cpu_median']}]"
                 for key in ("encode_ms", "digest_ms", "decode_ms")]
        lines.append(f"| {row['streams']:,} | {row['snapshot_bytes']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="1000,2000,5000,10000", help="comma-separated state sizes")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.streams.split(",")]
    if args.rounds < 1 or any(size < 0 for size in sizes):
        parser.error("--rounds must be at least 1 and sizes not negative")
    result = run(sizes, args.rounds)
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
