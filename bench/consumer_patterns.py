"""The consumer patterns nats-py users write, against jsraft and nats-server: msgs/s and server CPU.

Method: per system (alternating, every round), a fresh single server; a stream `F` on `f.*` filled with
`--msgs` messages of 128 B by `publish_async` (256 in flight), then one consumer reads every message it
should get, timed from its creation to the last message:

  pull    `js.pull_subscribe(subject, durable="A", stream="F", config=...)` (explicit ack, `max_ack_pending`
          10,000, `ack_wait` 60 s), then `psub.fetch(500, timeout=5)` in a loop with `await m.ack()` each
          — the plain loop of nats-py's docs; nats-py sets `subject` as the consumer's filter.
  ordered `js.subscribe(subject, cb=..., ordered_consumer=True)` — a push consumer with flow control and
          heartbeats, what a KV watch is.

over three streams:

  all     every message on `f.a`, the consumer on `f.a`: its filter matches every message;
  part    `f.a` and `f.b` alternating, the consumer on `f.a`: half of them;
  delete  as `all`, with message 5 deleted before the consumer starts (one interior delete).

And a KV bucket (`--kv-keys` keys, history 2, every key written twice): `kv.keys()` (an ordered consumer,
last per subject, over every key), then `kv.watch("k1")` and 200 `kv.put("k1", ...)`, each awaited until the
watcher has the new value (the round trip a KV user sees).

Printed per case and system: the median msgs/s over the rounds and the server's CPU per message received
(user + system of the server process over the timed part, psutil). `--baseline-src DIR` adds
`jsraft_baseline`, the same `jsraft serve` run with `PYTHONPATH=DIR` (another checkout's code), in the same
rounds. A run whose consumer misses a message or takes longer than `--cap-s` is reported as FAILED.

    .venv/bin/python bench/consumer_patterns.py --msgs 30000 --rounds 3
    .venv/bin/python bench/consumer_patterns.py --msgs 30000 --rounds 3 --baseline-src /work/main/src --json
    .venv/bin/python bench/consumer_patterns.py --patterns kv --kv-keys 5000 --rounds 3   # the KV cases alone

Imports: stdlib, psutil, nats-py, sibling `create_latency` (server start and CPU), which imports jsraft's
`cli.local_cluster` through `nats_servers` only for ports.
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
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from create_latency import BASELINE, server_cpu_s, start  # noqa: E402

PATTERNS = ("pull", "ordered", "kv")
WATCH_PUTS = 200
STREAMS = ("all", "part", "delete")
SYSTEMS = ("jsraft", "nats_always")


async def _fill(js: Any, kind: str, count: int) -> int:
    """Fill stream `F`; the number of messages the consumer on `f.a` must receive."""
    await js.add_stream(name="F", subjects=["f.*"])
    pending = []
    for i in range(count):
        subject = "f.b" if kind == "part" and i % 2 else "f.a"
        pending.append(await js.publish_async(subject, b"a" * 128))
        if len(pending) >= 256:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    if kind == "delete":
        await js.delete_msg("F", 5)
        return count - 1
    return count // 2 if kind == "part" else count


async def _pull(js: Any, want: int, cap_s: float) -> int:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                            max_ack_pending=10_000, ack_wait=60)
    psub = await js.pull_subscribe("f.a", durable="A", stream="F", config=config)
    got, deadline = 0, time.monotonic() + cap_s
    while got < want and time.monotonic() < deadline:
        for msg in await psub.fetch(500, timeout=5):
            await msg.ack()
            got += 1
    return got


async def _ordered(js: Any, want: int, cap_s: float) -> int:
    done, got = asyncio.Event(), 0

    async def received(msg: Any) -> None:
        nonlocal got
        got += 1
        if got >= want:
            done.set()

    sub = await js.subscribe("f.a", cb=received, ordered_consumer=True)
    try:
        await asyncio.wait_for(done.wait(), cap_s)
    except asyncio.TimeoutError:
        pass
    await sub.unsubscribe()
    return got


async def one_case(url: str, pids: dict[str, int], pattern: str, kind: str, count: int, cap_s: float) -> dict[str, Any]:
    import nats

    nc = await nats.connect(url, max_reconnect_attempts=0)
    try:
        js = nc.jetstream(timeout=30)
        want = await _fill(js, kind, count)
        cpu0, began = server_cpu_s(pids), time.perf_counter()
        got = await (_pull if pattern == "pull" else _ordered)(js, want, cap_s)
        elapsed, cpu = time.perf_counter() - began, server_cpu_s(pids) - cpu0
        await js.delete_stream("F")
    finally:
        await nc.close()
    if got != want:
        return {"failed": f"received {got} of {want} in {elapsed:.1f} s"}
    return {"msgs_per_s": want / elapsed, "cpu_us_per_msg": cpu / want * 1e6}


async def kv_case(url: str, pids: dict[str, int], keys: int, cap_s: float) -> dict[str, Any]:
    """`keys()` over `keys` keys written twice, then a watch of one key and `WATCH_PUTS` puts to it."""
    import nats

    nc = await nats.connect(url, max_reconnect_attempts=0)
    try:
        js = nc.jetstream(timeout=cap_s)
        kv = await js.create_key_value(bucket="B", history=2)
        pending = []
        for _ in range(2):
            for i in range(keys):
                pending.append(await js.publish_async(f"$KV.B.k{i}", b"v"))
                if len(pending) >= 256:
                    await asyncio.gather(*pending)
                    pending = []
        await asyncio.gather(*pending)
        cpu0, began = server_cpu_s(pids), time.perf_counter()
        listed = await kv.keys()
        keys_s, keys_cpu = time.perf_counter() - began, server_cpu_s(pids) - cpu0
        if sorted(listed) != sorted(f"k{i}" for i in range(keys)):
            return {"failed": f"keys() listed {len(listed)} keys ({len(set(listed))} distinct) of {keys}"}
        watcher = await kv.watch("k1")
        while await watcher.updates(timeout=cap_s) is not None:
            pass  # the current value, then the end of the initial ones
        cpu0, began = server_cpu_s(pids), time.perf_counter()
        for i in range(WATCH_PUTS):
            await kv.put("k1", b"x%d" % i)
            entry = await watcher.updates(timeout=cap_s)
            if entry is None or entry.value != b"x%d" % i:
                return {"failed": f"put {i}: the watcher got {entry and entry.value!r}"}
        watch_s, watch_cpu = time.perf_counter() - began, server_cpu_s(pids) - cpu0
        await watcher.stop()
    finally:
        await nc.close()
    return {"keys_ms": keys_s * 1000, "keys_cpu_ms": keys_cpu * 1000,
            "watch_ms": watch_s / WATCH_PUTS * 1000, "watch_cpu_ms": watch_cpu / WATCH_PUTS * 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--msgs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--streams", default=",".join(STREAMS))
    parser.add_argument("--cap-s", type=float, default=120.0, help="longest a consumer may take")
    parser.add_argument("--kv-keys", type=int, default=5_000)
    parser.add_argument("--baseline-src", help="another checkout's src/ to run as jsraft_baseline")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    systems = SYSTEMS + ((BASELINE,) if args.baseline_src else ())
    patterns = args.patterns.split(",")
    cases = [(p, s) for p in patterns if p != "kv" for s in args.streams.split(",")] + \
        ([("kv", "bucket")] if "kv" in patterns else [])
    samples: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="consumer-patterns-") as root:
        for round_ in range(args.rounds):
            for system in systems:
                for pattern, kind in cases:
                    servers = start(system, 1, os.path.join(root, f"r{round_}-{pattern}-{kind}"), args.baseline_src)
                    try:
                        result = asyncio.run(kv_case(servers.urls[0], servers.pids, args.kv_keys, args.cap_s)
                                             if pattern == "kv" else
                                             one_case(servers.urls[0], servers.pids, pattern, kind, args.msgs, args.cap_s))
                    finally:
                        servers.stop()
                    samples.setdefault((pattern, kind, system), []).append(result)
    figures = {}
    for (pattern, kind, system), runs in samples.items():
        ok = [r for r in runs if "failed" not in r]
        figure = {"runs": len(runs), "failed": [r["failed"] for r in runs if "failed" in r]}
        for key in (ok[0] if ok else {}):
            figure[key] = round(statistics.median(r[key] for r in ok), 1)
            figure[f"each_{key}"] = [round(r[key], 1) for r in ok]
        figures[f"{pattern} {kind} {system}"] = figure
        if pattern == "kv":
            print(f"kv       keys()  {system:16s} {figure.get('keys_ms', 'FAILED')!s:>8} ms ({figure.get('keys_cpu_ms', '-')}"
                  f" ms CPU); watch round trip {figure.get('watch_ms', '-')} ms ({figure.get('watch_cpu_ms', '-')} ms CPU)"
                  f"  {figure['failed'] or ''}", flush=True)
            continue
        print(f"{pattern:8s} {kind:7s} {system:16s} {figure.get('msgs_per_s', 'FAILED')!s:>8} msgs/s  "
              f"{figure.get('cpu_us_per_msg', '-')!s:>7} µs CPU/msg  {figure['failed'] or ''}", flush=True)
    if args.json:
        print(json.dumps({"msgs": args.msgs, "rounds": args.rounds, "load": os.getloadavg(), "figures": figures}))
    return 0 if all(not f["failed"] for f in figures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
