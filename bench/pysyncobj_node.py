#!/usr/bin/env python3
"""One PySyncObj node for `cluster_bench.py`: a replicated log, driven over stdin/stdout.

Started by `cluster_bench.PsoCluster` as `python bench/pysyncobj_node.py SPEC` (SPEC: JSON with `self`,
`peers`, `journal`, `batch`, `payload`). It runs a `SyncObj` whose replicated method `append(data)`
appends to a list, with `SyncObjConf(journalFile=SPEC.journal, appendEntriesUseBatch=SPEC.batch)` (the
file journal is an mmap'ed file written per append and never fsynced), and serves one JSON request per
stdin line, answering one JSON line on stdout, until stdin closes:

  {"op": "status"}                          -> leader?, leader known?, ready?, entries applied here
  {"op": "run", "count": N, "inflight": K}  -> N appends of random SPEC.payload-byte payloads, one at a time
                                               (`sync=True`) when K == 1, else through callbacks with at
                                               most K uncommitted; answers the elapsed time, each
                                               committed append's latency and the failures (by
                                               FAIL_REASON: a failed append is not counted)

Imports only the standard library and pysyncobj, so three of these start quickly on a busy machine.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

POOL = 1024
REASONS = {value: name for name, value in vars(FAIL_REASON).items() if name.isupper()}


class ReplicatedLog(SyncObj):  # type: ignore[misc]
    def __init__(self, spec: dict[str, Any]) -> None:
        conf = SyncObjConf(journalFile=spec["journal"], appendEntriesUseBatch=spec["batch"])
        super().__init__(spec["self"], spec["peers"], conf)
        self.entries: list[bytes] = []

    @replicated
    def append(self, data: bytes) -> int:
        self.entries.append(data)
        return len(self.entries)


def run_sync(log: ReplicatedLog, count: int, payloads: list[bytes]) -> dict[str, Any]:
    latencies = []
    started = time.perf_counter()
    for i in range(count):
        sent = time.perf_counter()
        log.append(payloads[i % POOL], sync=True, timeout=30)
        latencies.append(time.perf_counter() - sent)
    return {"elapsed": time.perf_counter() - started, "latencies": latencies, "failures": 0}


def run_async(log: ReplicatedLog, count: int, inflight: int, payloads: list[bytes]) -> dict[str, Any]:
    slots, done, lock = threading.BoundedSemaphore(inflight), threading.Event(), threading.Lock()
    latencies: list[float] = []
    outcome = {"left": count, "failures": 0}
    reasons: dict[int, int] = {}

    def callback_for(sent: float) -> Callable[[Any, int], None]:
        def callback(_result: Any, error: int) -> None:  # called on PySyncObj's tick thread
            with lock:
                if error == FAIL_REASON.SUCCESS:
                    latencies.append(time.perf_counter() - sent)
                else:
                    outcome["failures"] += 1
                    reasons[error] = reasons.get(error, 0) + 1
                outcome["left"] -= 1
                if not outcome["left"]:
                    done.set()
            slots.release()
        return callback

    started = time.perf_counter()
    for i in range(count):
        slots.acquire()
        log.append(payloads[i % POOL], callback=callback_for(time.perf_counter()))
    if not done.wait(120):
        raise RuntimeError(f"PySyncObj: {outcome['left']} appends never completed")
    return {"elapsed": time.perf_counter() - started, "latencies": latencies, "failures": outcome["failures"],
            "failure_reasons": {REASONS.get(code, str(code)): n for code, n in reasons.items()}}


def main(spec: dict[str, Any]) -> int:
    log = ReplicatedLog(spec)
    blob = os.urandom(spec["payload"] * POOL)
    payloads = [blob[i * spec["payload"]:(i + 1) * spec["payload"]] for i in range(POOL)]
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "status":
            reply = {"leader": log._isLeader(), "known": log._getLeader() is not None, "ready": log.isReady(),
                     "entries": len(log.entries)}
        elif request["inflight"] == 1:
            reply = run_sync(log, request["count"], payloads)
        else:
            reply = run_async(log, request["count"], request["inflight"], payloads)
        print(json.dumps(reply), flush=True)
    log.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
