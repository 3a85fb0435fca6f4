"""The quick-start job behind `jsraft demo`: a local 3-node cluster survives the loss of its stream leader
(layer L6: presentation over the server).

Method: three real nodes in this process (`LocalCluster`: real TCP on loopback, real files, real fsync)
keep an R3 file stream `ORDERS` (subjects `ORDERS.*`). The demo publishes with acks, kills the stream
leader as a crash would (nothing closed or flushed), shows the new leader, publishes more through a
survivor, reads back every acknowledged sequence through the API, restarts the killed node, waits (with
a deadline) until its replica has caught up, reads every acked message from every replica's own store,
and prints each replica's state tuple (first_seq, last_seq, messages, bytes, digest), which must be
identical.

Invariants:
  1. Every claim printed as `ok` was checked; any failed check is printed as `FAILED` with what was seen,
     and the demo exits 1. Nothing is assumed to have caught up: it is waited for with a deadline and
     reported honestly if it did not.
  2. A publish is counted as acknowledged only when the API returned its `PubAck`; a retried publish
     carries the same `Nats-Msg-Id`, so a retry after a lost answer cannot store the message twice.

Imports: stdlib, L0, L5 (`server`), cli siblings, trio.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any, TextIO

import trio

from jsraft.cli.local_cluster import LocalCluster
from jsraft.errors import JsraftError
from jsraft.server import JetStreamContext

STREAM = "ORDERS"
KINDS = ("new", "paid", "shipped")
PUBLISH_WORKERS = 32
PUBLISH_ATTEMPTS_MAX = 40
READ_WORKERS = 16
FAILOVER_TIMEOUT_S = 15.0
CATCH_UP_TIMEOUT_S = 30.0
MARKER = ".jsraft-demo"  # a directory the demo made, which it may wipe on the next run


def subject_of(i: int) -> str:
    return f"{STREAM}.{KINDS[i % len(KINDS)]}"


def payload_of(i: int) -> bytes:
    return f'{{"order": {i}, "customer": "c{i % 97}", "amount_cents": {100 + i * 7 % 9900}}}'.encode()


class Demo:
    def __init__(self, cluster: LocalCluster, out: TextIO) -> None:
        self.cluster = cluster
        self.out = out
        self.acked: dict[int, int] = {}  # publish index -> acked stream sequence
        self.unacked: list[int] = []
        self.failed: list[str] = []

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def check(self, what: str, ok: bool, seen: str = "") -> bool:
        self.say(f"  {'ok' if ok else 'FAILED'}: {what}{'' if ok or not seen else f' ({seen})'}")
        if not ok:
            self.failed.append(what)
        return ok

    # --- Publishing ------------------------------------------------------------------------------------

    async def publish(self, js: JetStreamContext, first: int, count: int) -> None:
        """Publish indexes first..first+count-1 from concurrent tasks, with progress lines (invariant 2)."""
        step, started, done = max(count // 5, 1), time.perf_counter(), [0]

        async def worker(offset: int) -> None:
            for i in range(first + offset, first + count, PUBLISH_WORKERS):
                seq = await self._publish_one(js, i)
                if seq is None:
                    self.unacked.append(i)
                    continue
                self.acked[i] = seq
                done[0] += 1
                if done[0] % step == 0 or done[0] == count:
                    self.say(f"  acked {done[0]:>6}/{count}")

        async with trio.open_nursery() as nursery:
            for offset in range(PUBLISH_WORKERS):
                nursery.start_soon(worker, offset)
        elapsed = time.perf_counter() - started
        self.say(f"  {done[0]} acks in {elapsed:.2f}s ({done[0] / elapsed:,.0f} msgs/s; an ack means a majority "
                 "fsynced it)")

    async def _publish_one(self, js: JetStreamContext, i: int) -> int | None:
        for attempt in range(PUBLISH_ATTEMPTS_MAX):
            try:
                return (await js.publish(subject_of(i), payload_of(i), msg_id=f"order-{i}", timeout=5.0)).seq
            except (JsraftError, trio.TooSlowError):
                await trio.sleep(min(0.05 * (attempt + 1), 0.5))  # a leader is being elected: retry, same id
        return None

    # --- Steps -------------------------------------------------------------------------------------------

    async def start(self) -> JetStreamContext:
        cluster = self.cluster
        meta = await cluster.wait_until(cluster.meta_leader, FAILOVER_TIMEOUT_S, "a meta leader")
        for name in cluster.names:
            await cluster.node(name).wait_ready(FAILOVER_TIMEOUT_S)
        ports = ", ".join(f"{n} :{cluster.configs[n].cluster_port}" for n in cluster.names)
        self.say(f"3 nodes up on loopback ({ports}); meta leader: {meta}")
        js = cluster.node(cluster.names[0]).jetstream()
        info = await js.add_stream(name=STREAM, subjects=[f"{STREAM}.*"], num_replicas=3, storage="file")
        self.say(f"created stream {STREAM}: subjects {list(info.config.subjects)}, "
                 f"R{info.config.num_replicas}, {info.config.storage} storage, "
                 f"replicas on {', '.join(sorted(info.cluster['replicas']))}")
        return js

    async def failover(self) -> tuple[str, str]:
        """Kill the stream leader; return (killed, new leader)."""
        cluster = self.cluster
        leader = await cluster.wait_until(lambda: cluster.stream_leader(STREAM), FAILOVER_TIMEOUT_S,
                                          f"a leader for {STREAM}")
        self.say(f"{STREAM} leader: {leader}")
        started = time.perf_counter()
        await cluster.kill(leader)
        self.say(f"killed {leader} (a crash: no store closed or flushed)")
        new = await cluster.wait_until(lambda: cluster.stream_leader(STREAM), FAILOVER_TIMEOUT_S,
                                       f"a new leader for {STREAM}")
        self.say(f"new {STREAM} leader: {new} (elected {time.perf_counter() - started:.2f}s after the kill)")
        return leader, new

    async def verify_acked(self, js: JetStreamContext) -> None:
        """Read back every acknowledged sequence through the API (from the current leader)."""
        wrong: list[str] = []
        items = sorted(self.acked.items())

        async def reader(offset: int) -> None:
            for i, seq in items[offset::READ_WORKERS]:
                try:
                    msg = await js.get_msg(STREAM, seq=seq)
                except JsraftError as error:
                    wrong.append(f"seq {seq}: {error}")
                    continue
                if msg.data != payload_of(i) or msg.subject != subject_of(i):
                    wrong.append(f"seq {seq}: holds {msg.subject} {msg.data[:40]!r}, expected order {i}")

        async with trio.open_nursery() as nursery:
            for offset in range(READ_WORKERS):
                nursery.start_soon(reader, offset)
        seqs = list(self.acked.values())
        self.check(f"every acknowledged message read back with its payload ({len(items) - len(wrong)}/{len(items)})",
                   not wrong, "; ".join(wrong[:3]))
        self.check("no sequence acknowledged twice", len(set(seqs)) == len(seqs),
                   f"{len(seqs) - len(set(seqs))} duplicates")
        self.check("every publish was acknowledged", not self.unacked, f"{len(self.unacked)} gave up after retries")

    async def catch_up(self, victim: str, leader: str) -> bool:
        """Restart `victim` and wait, with a deadline, until its replica equals the leader's (invariant 1)."""
        cluster = self.cluster
        started = time.perf_counter()
        await cluster.restart(victim)
        self.say(f"restarted {victim}; waiting up to {CATCH_UP_TIMEOUT_S:g}s for its replica to catch up")
        last_seq = max(self.acked.values(), default=0)

        def caught_up() -> bool:
            mine, theirs = cluster.replica_state(victim, STREAM), cluster.replica_state(leader, STREAM)
            return (mine is not None and theirs is not None and mine.last_seq >= last_seq
                    and mine.agreement_key() == theirs.agreement_key())
        try:
            await cluster.wait_until(caught_up, CATCH_UP_TIMEOUT_S, f"{victim} caught up")
        except TimeoutError:
            state = cluster.replica_state(victim, STREAM)
            seen = f"its replica is at last_seq {state.last_seq if state else 'not open'}, acked up to {last_seq}"
            return self.check(f"{victim} caught up within {CATCH_UP_TIMEOUT_S:g}s", False, seen)
        return self.check(f"{victim} caught up in {time.perf_counter() - started:.2f}s", True)

    def compare_replicas(self) -> None:
        """Every replica holds every acked message, and all state tuples are identical."""
        cluster = self.cluster
        self.say(f"{'replica':<8} {'first_seq':>9} {'last_seq':>9} {'messages':>9} {'bytes':>9}  digest")
        states = {name: cluster.replica_state(name, STREAM) for name in cluster.names}
        for name, state in states.items():
            if state is not None:
                self.say(f"{name:<8} {state.first_seq:>9} {state.last_seq:>9} {state.msgs:>9} {state.bytes:>9}  "
                         f"{state.digest:016x}")
        for name, state in states.items():
            if state is None:
                self.check(f"{name} has an open replica of {STREAM}", False)
                continue
            missing = self._missing_locally(name)
            self.check(f"{name}'s own store holds all {len(self.acked)} acknowledged messages", not missing,
                       f"{len(missing)} missing or different, e.g. seq {missing[:3]}")
        keys = {state.agreement_key() for state in states.values() if state is not None}
        self.check("the replicas' state tuples (first_seq, last_seq, messages, bytes, digest) are identical",
                   len(keys) == 1 and None not in states.values(), f"{len(keys)} different tuples")

    def _missing_locally(self, name: str) -> list[int]:
        store = self.cluster.node(name).streams.replicas[STREAM].store
        missing = []
        for i, seq in sorted(self.acked.items()):
            try:
                msg = store.load(seq)
            except JsraftError:
                missing.append(seq)
                continue
            if msg.payload != payload_of(i) or msg.subject != subject_of(i):
                missing.append(seq)
        return missing


async def _run(base_dir: str, count: int, out: TextIO) -> bool:
    async with trio.open_nursery() as nursery:
        async with LocalCluster.start(nursery, 3, base_dir) as cluster:
            demo = Demo(cluster, out)
            try:
                await _steps(demo, count)
            except (TimeoutError, JsraftError) as error:  # a wait ran out or a request failed for good
                demo.check("the demo ran to the end", False, f"{type(error).__name__}: {error}")
        return not demo.failed


async def _steps(demo: Demo, count: int) -> None:
    cluster = demo.cluster
    js = await demo.start()
    demo.say(f"publishing {count} orders with acks")
    await demo.publish(js, 0, count)
    victim, leader = await demo.failover()
    survivor = next(name for name in cluster.running() if name != leader)
    more = max(count // 5, 1)
    demo.say(f"publishing {more} more through {survivor} (forwarded to the leader {leader})")
    survivor_js = cluster.node(survivor).jetstream()
    await demo.publish(survivor_js, count, more)
    await demo.verify_acked(survivor_js)
    if await demo.catch_up(victim, leader):
        demo.compare_replicas()


def prepare_dir(directory: str | None) -> tuple[str, bool]:
    """The demo's data directory and whether the demo created it as a temporary one. A given directory
    must be absent, empty, or one an earlier demo made (it is wiped): the demo never wipes anything else."""
    if directory is None:
        return tempfile.mkdtemp(prefix="jsraft-demo-"), True
    if os.path.isdir(directory) and os.listdir(directory):
        if not os.path.exists(os.path.join(directory, MARKER)):
            raise FileExistsError(f"{directory} is not empty and was not made by jsraft demo; give another --dir")
        shutil.rmtree(directory)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, MARKER), "w") as handle:
        handle.write("made by jsraft demo; wiped by the next run\n")
    return directory, False


def run_cluster_demo(directory: str | None, count: int, out: Any = None) -> int:
    out = out or sys.stdout
    try:
        base_dir, temporary = prepare_dir(directory)
    except OSError as error:
        print(f"jsraft demo: {error}", file=sys.stderr)
        return 2
    print(f"jsraft demo: a 3-node cluster in this process, data under {base_dir}", file=out, flush=True)
    started = time.perf_counter()
    ok = trio.run(_run, base_dir, count, out)
    print(f"{'demo passed' if ok else 'demo FAILED'} in {time.perf_counter() - started:.1f}s", file=out, flush=True)
    if temporary and ok:
        shutil.rmtree(base_dir, ignore_errors=True)
    elif temporary:
        print(f"data kept for inspection: {base_dir} (try: jsraft check {base_dir}/n1)", file=out)
    return 0 if ok else 1
