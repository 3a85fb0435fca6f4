"""The chaos workloads of ../shared/CHAOS.md: W-pub, W-cons and W-meta, as nats-py clients, and `Workload`,
which starts and stops them together in one asyncio loop and counts what they did.

Owns: the stream under test's setup (`create_stream`, `create_consumers`), the three client kinds, and one
consumer batch fetched, recorded and double-acked (`fetch_and_ack`, also used by the final phase's drain).

  - W-pub: `publishers` clients `p0..`, client i pinned to node `names[i % n]` (two per node with six
    publishers on three nodes), publishing value `c<i>-<counter>` on `chaos.<i>` with `Nats-Msg-Id` =
    value and a random 32..4096-byte payload from `random.Random(f"{seed}-p{i}")`, at most
    `Rates.publish_per_s` publishes per second each; a publish that did not end `ok` is tried once more
    with the same value (`"retry": 1`; the duplicate window makes it idempotent).
  - W-cons: durable pull consumers `C0..` on the stream (explicit ack, ack_wait 2 s), consumer i read by
    client `c<i>` pinned to node `names[i % n]`; every delivery is recorded, then double-acked
    (`ack_sync`) with the ack recorded as invoke + ok / fail / info.
  - W-meta: client `m0`, each step on the next node in turn, every `Rates.meta_interval_s`: create stream
    `SCRATCH_<n>`, a consumer on it, delete the consumer, delete the stream — each recorded.

Invariants:
  1. Bounded: every loop ends at `stop()` or at the workload's deadline (`duration_s`, default one hour),
     whichever comes first; each client does at most `Rates.publish_per_s` publishes per second (so a
     two-core machine is not saturated); a stuck call is cut by its own timeout (2 s publish, 2 s ack,
     5 s meta request), and `stop()` cancels anything still running after `STOP_GRACE_S`.
  2. Every history event comes through `clients.Recorder`: each invoke gets exactly one completion
     (clients invariant 3), and outcomes are classified by `clients.classify` (ambiguous → `info`).
  3. The payloads, values and subjects depend only on the seed; what the cluster answers is real.

Imports: anything (test code); never imported by production code.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import attrs
import nats.errors
import nats.js.errors

from jsraft.testing.chaos.clients import (META_FAIL_CODES, PUBLISH_TIMEOUT_S, Recorder, classify, close_quietly,
                                          connect_pinned, payload_hash, publish_recorded)

STREAM = "CHAOS"
SUBJECTS = ["chaos.>"]
DUPLICATE_WINDOW_S = 120.0
ACK_WAIT_S = 2.0
ACK_TIMEOUT_S = 2.0
META_TIMEOUT_S = 5.0
STOP_GRACE_S = 8.0
DURATION_MAX_S = 3600.0
SETUP_DEADLINE_S = 60.0


@attrs.frozen(kw_only=True)
class Rates:
    publish_per_s: float = 10.0     # per publisher
    fetch_batch: int = 64
    fetch_timeout_s: float = 1.0
    meta_interval_s: float = 3.0
    payload_bytes_min: int = 32
    payload_bytes_max: int = 4096


PUBLISHERS = 6  # W-pub clients by default: two pinned to each node of three


def consumer_names(count: int = 3) -> list[str]:
    return [f"C{i}" for i in range(count)]


# --- Setup ----------------------------------------------------------------------------------------------

async def _with_any_node(cluster: Any, what: str, call: Any, deadline_s: float) -> Any:
    """`await call(js)` through each node in turn until one answers, within `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        for name in list(cluster.names):
            nc = None
            try:
                nc = await connect_pinned(cluster.client_url(name), f"setup-{name}", deadline=time.monotonic())
                return await call(nc.jetstream(timeout=META_TIMEOUT_S))
            except nats.js.errors.APIError as error:
                if error.err_code in (10058, 10148, 10013):  # already exists (an earlier try got through)
                    return None
                last = error
            except Exception as error:
                last = error
            finally:
                await close_quietly(nc)
        await asyncio.sleep(0.25)
    raise RuntimeError(f"{what}: no node answered in {deadline_s}s (last: {last!r})")


async def create_stream(cluster: Any, name: str = STREAM, *, replicas: int | None = None,
                        deadline_s: float = SETUP_DEADLINE_S) -> None:
    """The stream under test: subjects `chaos.>`, file storage, R3 (or fewer nodes), duplicate window 2 min."""
    replicas = replicas or min(3, len(list(cluster.names)))

    async def add(js: Any) -> Any:
        return await js.add_stream(name=name, subjects=SUBJECTS, num_replicas=replicas, storage="file",
                                   duplicate_window=DUPLICATE_WINDOW_S)

    await _with_any_node(cluster, f"create stream {name}", add, deadline_s)


async def create_consumers(cluster: Any, names: list[str], stream: str = STREAM, *,
                           deadline_s: float = SETUP_DEADLINE_S) -> None:
    for consumer in names:
        async def add(js: Any, consumer: str = consumer) -> Any:
            return await js.add_consumer(stream, durable_name=consumer, ack_policy="explicit",
                                         ack_wait=ACK_WAIT_S, deliver_policy="all", max_ack_pending=20000)

        await _with_any_node(cluster, f"create consumer {consumer}", add, deadline_s)


# --- One consumer batch ---------------------------------------------------------------------------------

async def fetch_and_ack(record: Recorder, sub: Any, *, process: str, node: str, stream: str, consumer: str,
                        batch: int, timeout_s: float) -> tuple[int, int]:
    """Fetch up to `batch` messages, record each delivery, double-ack them all (concurrently), recording
    each ack. (deliveries, confirmed acks); (0, 0) when nothing came before `timeout_s`."""
    try:
        msgs = await sub.fetch(batch, timeout=timeout_s)
    except nats.errors.TimeoutError:
        return 0, 0
    for msg in msgs:
        meta = msg.metadata
        headers = msg.headers or {}
        record("ok", "deliver", process, node, stream=stream, consumer=consumer, seq=meta.sequence.stream,
               cseq=meta.sequence.consumer, count=meta.num_delivered, value=headers.get("Nats-Msg-Id"),
               hash=payload_hash(msg.data))

    async def ack(msg: Any) -> bool:
        seq = msg.metadata.sequence.stream
        record("invoke", "ack", process, node, stream=stream, consumer=consumer, seq=seq)
        try:
            await msg.ack_sync(timeout=ACK_TIMEOUT_S)
        except BaseException as error:
            kind, fields = classify(error)
            record(kind, "ack", process, node, stream=stream, consumer=consumer, seq=seq, **fields)
            if isinstance(error, asyncio.CancelledError):
                raise
            return False
        record("ok", "ack", process, node, stream=stream, consumer=consumer, seq=seq)
        return True

    results = await asyncio.gather(*(ack(msg) for msg in msgs))
    return len(msgs), sum(results)


# --- The workload ---------------------------------------------------------------------------------------

class Workload:
    """W-pub + W-cons + W-meta against a cluster with `names`, `client_url(name)`."""

    def __init__(self, *, seed: int = 0, rate: float | None = None, rates: Rates | dict[str, Any] | None = None,
                 stream: str = STREAM, publishers: int = PUBLISHERS, consumers: int = 3, meta: bool = True,
                 duration_s: float = DURATION_MAX_S) -> None:
        self.seed, self.stream, self.duration_s = seed, stream, min(duration_s, DURATION_MAX_S)
        self.rates = _rates(rates, rate)
        self.publishers, self.meta = publishers, meta
        self.consumers = consumer_names(consumers)
        self.counts = {"publish_ok": 0, "publish_fail": 0, "publish_info": 0, "deliveries": 0, "acks": 0,
                       "ack_unconfirmed": 0, "meta_ok": 0, "meta_fail": 0, "meta_info": 0}
        self.scratch: dict[str, str] = {}  # SCRATCH_<n> -> "present" | "absent" | "uncertain"
        self.scratch_deleted: list[str] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._deadline = 0.0
        self.cluster: Any = None
        self.record: Recorder | None = None

    async def start(self, cluster: Any, writer: Any, seed: int | None = None,
                    rates: Rates | dict[str, Any] | None = None) -> None:
        """Create the consumers (the stream must exist: `create_stream`), then start every client."""
        if seed is not None:
            self.seed = seed
        if rates is not None:
            self.rates = _rates(rates, None)
        self.cluster, self.record = cluster, Recorder(writer)
        self._stop = asyncio.Event()
        await create_consumers(cluster, self.consumers, self.stream)
        self._deadline = time.monotonic() + self.duration_s
        names = list(cluster.names)
        for i in range(self.publishers):
            self._spawn(self._publisher(i, names[i % len(names)]))
        for i, consumer in enumerate(self.consumers):
            self._spawn(self._consumer(i, consumer, names[i % len(names)]))
        if self.meta:
            self._spawn(self._meta(names))

    def _spawn(self, coro: Any) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro))

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Ask every client to finish its current call, wait up to `grace_s`, cancel what is left."""
        self._stop.set()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def summary(self) -> dict[str, Any]:
        return dict(self.counts)

    def summary_line(self) -> str:
        c = self.counts
        return (f"publish ok {c['publish_ok']} fail {c['publish_fail']} info {c['publish_info']}, "
                f"deliveries {c['deliveries']}, acks {c['acks']}, meta ok {c['meta_ok']}")

    def expected_streams(self) -> list[str]:
        """Streams that must exist at the end: the stream under test and scratch streams known present."""
        return sorted([self.stream] + [name for name, state in self.scratch.items() if state == "present"])

    def uncertain_streams(self) -> list[str]:
        return sorted(name for name, state in self.scratch.items() if state == "uncertain")

    # --- Helpers for the loops --------------------------------------------------------------------------

    def _running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._deadline

    async def _wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less if the workload is stopped."""
        if seconds > 0:
            try:
                await asyncio.wait_for(self._stop.wait(), seconds)
            except asyncio.TimeoutError:
                pass

    async def _connect(self, url: str, name: str, old: Any = None) -> Any:
        """`old` if it is still open (nats-py reconnects it to the same node by itself), else a new pinned
        connection, retried while running (the node may be down); None once stopped."""
        if old is not None and not old.is_closed:
            return old
        await close_quietly(old)
        while self._running():
            try:
                return await connect_pinned(url, name, deadline=time.monotonic())
            except Exception:
                await self._wait(0.25)
        return None

    # --- W-pub ------------------------------------------------------------------------------------------

    async def _publisher(self, i: int, node: str) -> None:
        process, subject = f"p{i}", f"chaos.{i}"
        rng = random.Random(f"{self.seed}-p{i}")
        nc, url = None, self.cluster.client_url(node)
        try:
            interval, next_at, counter = 1.0 / self.rates.publish_per_s, time.monotonic(), 0
            while self._running():
                await self._wait(next_at - time.monotonic())
                nc = await self._connect(url, process, nc)
                if nc is None or not self._running():
                    break
                js = nc.jetstream(timeout=PUBLISH_TIMEOUT_S)
                next_at = max(next_at + interval, time.monotonic())
                counter += 1
                value = f"c{i}-{counter}"
                size = rng.randint(self.rates.payload_bytes_min, self.rates.payload_bytes_max)
                payload = rng.randbytes(size)
                for retry in (0, 1):
                    kind, _ = await publish_recorded(self.record, js, process=process, node=node,
                                                     stream=self.stream, subject=subject, value=value,
                                                     payload=payload, retry=retry)
                    self.counts[f"publish_{kind}"] += 1
                    if kind == "ok" or self._stop.is_set():
                        break
        finally:
            await close_quietly(nc)

    # --- W-cons -----------------------------------------------------------------------------------------

    async def _consumer(self, i: int, consumer: str, node: str) -> None:
        process = f"c{i}"
        nc, sub, url = None, None, self.cluster.client_url(node)
        try:
            while self._running():
                if nc is None or nc.is_closed:
                    nc = await self._connect(url, process, nc)
                    if nc is None:
                        break
                    sub = None
                try:
                    if sub is None:
                        sub = await nc.jetstream(timeout=META_TIMEOUT_S).pull_subscribe_bind(
                            durable=consumer, stream=self.stream)
                    delivered, acked = await fetch_and_ack(
                        self.record, sub, process=process, node=node, stream=self.stream, consumer=consumer,
                        batch=self.rates.fetch_batch, timeout_s=self.rates.fetch_timeout_s)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the node is down or the pull was refused: try again shortly
                    await self._wait(0.2)
                    continue
                self.counts["deliveries"] += delivered
                self.counts["acks"] += acked
                self.counts["ack_unconfirmed"] += delivered - acked
        finally:
            await close_quietly(nc)

    # --- W-meta -----------------------------------------------------------------------------------------

    async def _meta(self, names: list[str]) -> None:
        conns: dict[str, Any] = {}
        step = 0
        try:
            while self._running():
                await self._wait(self.rates.meta_interval_s)
                if not self._running():
                    break
                node = names[step % len(names)]
                scratch = f"SCRATCH_{step}"
                step += 1
                if node not in conns or conns[node].is_closed:
                    await close_quietly(conns.pop(node, None))
                    try:
                        conns[node] = await connect_pinned(self.cluster.client_url(node), "m0",
                                                           deadline=time.monotonic())
                    except Exception:
                        continue  # that node is down now: the next step goes to another
                await self._scratch_cycle(conns[node].jetstream(timeout=META_TIMEOUT_S), node, scratch,
                                          min(3, len(names)))
        finally:
            for nc in conns.values():
                await close_quietly(nc)

    async def _scratch_cycle(self, js: Any, node: str, name: str, replicas: int) -> None:
        """Create `name`, a consumer on it, delete the consumer, delete the stream; each recorded."""
        n = name.split("_", 1)[1]
        created = await self._meta_op(js, node, "stream_create", {"name": name}, js.add_stream(
            name=name, subjects=[f"scratch.{n}.>"], num_replicas=replicas, storage="file"))
        if created == "fail":
            return
        self.scratch[name] = "present" if created == "ok" else "uncertain"
        if created == "ok":
            consumer = f"SC{n}"
            made = await self._meta_op(js, node, "consumer_create", {"name": consumer, "stream": name},
                                       js.add_consumer(name, durable_name=consumer, ack_policy="explicit"))
            if made != "fail":
                await self._meta_op(js, node, "consumer_delete", {"name": consumer, "stream": name},
                                    js.delete_consumer(name, consumer))
        deleted = await self._meta_op(js, node, "stream_delete", {"name": name}, js.delete_stream(name))
        if deleted == "ok":
            self.scratch[name] = "absent"
            self.scratch_deleted.append(name)
        elif deleted == "info":
            self.scratch[name] = "uncertain"

    async def _meta_op(self, js: Any, node: str, f: str, fields: dict[str, Any], call: Any) -> str:
        self.record("invoke", f, "m0", node, **fields)
        try:
            await call
        except BaseException as error:
            kind, outcome = classify(error, META_FAIL_CODES)
            self.record(kind, f, "m0", node, **fields, **outcome)
            self.counts[f"meta_{kind}"] += 1
            if isinstance(error, asyncio.CancelledError):
                raise
            return kind
        self.record("ok", f, "m0", node, **fields)
        self.counts["meta_ok"] += 1
        return "ok"


def _rates(rates: Rates | dict[str, Any] | None, rate: float | None) -> Rates:
    if isinstance(rates, dict):
        rates = Rates(**rates)
    rates = rates or Rates()
    return attrs.evolve(rates, publish_per_s=rate) if rate else rates
