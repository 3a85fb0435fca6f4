"""Test kit for the runtime tests: a list state machine, an in-memory router, an instrumented disk, and a
cluster of `NodeRuntime`s in one trio process.

Method: each node is a real `NodeRuntime` with a real `Wal`, on either an `OsDisk` (restart tests) or a
`SimDisk` behind `RecordingDisk`. `RecordingDisk` serialises every disk operation with one lock (the
runtime's worker threads write while the test reads), counts fsyncs per file, can slow or hold fsyncs,
and can produce a *durable image*: a copy of the disk crashed at this instant, i.e. exactly what a power
cut now would leave. `durable_recovered()` opens a WAL on that image, so checks ask "what would a restart
find?" rather than trusting the runtime's own bookkeeping. `Router` connects the runtimes with bounded
per-node queues and partitions, and calls `on_send` hooks at the moment a runtime hands it a message.
"""

from __future__ import annotations

import collections
import copy
import errno
import json
import random
import threading
import time
from collections.abc import Callable, Sequence

import trio

from jsraft.disk import OsDisk
from jsraft.raft import (
    AppendEntries, AppendEntriesResponse, Entry, EntryType, Message, RequestVote, RequestVoteResponse,
)
from jsraft.runtime import NodeRuntime, SystemClock
from jsraft.runtime.quiesce import BEAT_GROUP
from jsraft.testing.simdisk import SimDisk
from jsraft.wal import Recovered, Wal

TICK_MS = 10
GROUP = "g"


class ListMachine:
    """Appends each NORMAL entry's data to a list; the result of an entry is `(index, data)`."""

    def __init__(self, on_apply: Callable[[Sequence[Entry]], None] | None = None) -> None:
        self.values: list[bytes] = []
        self.applied_index = 0
        self.applies = 0
        self.restores = 0
        self.on_apply = on_apply

    def apply(self, entries: Sequence[Entry]) -> list[object]:
        if self.on_apply is not None:
            self.on_apply(entries)
        results: list[object] = []
        for entry in entries:
            assert entry.index == self.applied_index + 1, f"applied {entry.index} after {self.applied_index}"
            self.applied_index = entry.index
            if entry.type is EntryType.NORMAL:
                self.values.append(entry.data)
                results.append((entry.index, entry.data))
            else:
                results.append(None)
        self.applies += 1
        return results

    def snapshot(self) -> bytes:
        return json.dumps({"applied": self.applied_index, "values": [v.hex() for v in self.values]}).encode()

    def restore(self, data: bytes) -> None:
        decoded = json.loads(data)
        self.applied_index = decoded["applied"]
        self.values = [bytes.fromhex(v) for v in decoded["values"]]
        self.restores += 1


# --- Instrumented disk -------------------------------------------------------------------------------


class _Shared:
    def __init__(self, root: SimDisk) -> None:
        self.root = root
        self.lock = threading.RLock()
        self.fsyncs: collections.Counter[str] = collections.Counter()
        self.fsync_delay_s = 0.0
        self.gate: threading.Event | None = None  # when set to an Event, fsyncs wait for it
        self.failing_path_part: str | None = None  # fsyncs of paths containing this raise EIO


class RecordingFile:
    def __init__(self, inner, shared: _Shared) -> None:
        self._inner, self._shared = inner, shared
        self.path = inner.path

    def sync(self) -> None:
        shared = self._shared
        if shared.gate is not None:
            shared.gate.wait(timeout=30)
        if shared.fsync_delay_s:
            time.sleep(shared.fsync_delay_s)  # a real fsync's latency, outside the lock like a real disk
        if shared.failing_path_part is not None and shared.failing_path_part in self.path:
            raise OSError(errno.EIO, "injected fsync failure", self.path)
        with shared.lock:
            self._inner.sync()
            shared.fsyncs[self.path] += 1

    def __getattr__(self, name: str):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def locked(*args, **kwargs):
            with self._shared.lock:
                return attr(*args, **kwargs)
        return locked


class RecordingDisk:
    """A `SimDisk` (or a `sub()` view of one) with one lock, fsync counts and durable images."""

    def __init__(self, inner: SimDisk | None = None, shared: _Shared | None = None, seed: int = 0) -> None:
        self._inner = inner if inner is not None else SimDisk(random.Random(seed), corruption_allowed=False)
        self._shared = shared if shared is not None else _Shared(self._inner)

    @property
    def shared(self) -> _Shared:
        return self._shared

    def open(self, path: str, *, create: bool = False) -> RecordingFile:
        with self._shared.lock:
            return RecordingFile(self._inner.open(path, create=create), self._shared)

    def sub(self, path: str) -> RecordingDisk:
        with self._shared.lock:
            return RecordingDisk(self._inner.sub(path), self._shared)

    def __getattr__(self, name: str):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def locked(*args, **kwargs):
            with self._shared.lock:
                return attr(*args, **kwargs)
        return locked

    def wal_fsyncs(self) -> int:
        """fsyncs of WAL segment files (not the hard state, snapshots or directories)."""
        return sum(count for path, count in self._shared.fsyncs.items() if "/wal/" in path)

    def durable_image(self) -> SimDisk:
        """What a power cut right now would leave (a crashed copy; this disk is untouched)."""
        with self._shared.lock:
            image = copy.deepcopy(self._shared.root)
        image.crash()
        return image

    def durable_recovered(self, group: str = GROUP) -> Recovered:
        image = self.durable_image()
        wal, recovered = Wal.open(image.sub(f"groups/{group}"))
        wal.close()
        return recovered


# --- Durability checks -------------------------------------------------------------------------------


def _holds(recovered: Recovered, index: int, term: int | None = None) -> bool:
    snap_index = recovered.snapshot[0].index if recovered.snapshot is not None else 0
    if index <= snap_index:
        return True
    by_index = {entry.index: entry for entry in recovered.entries}
    entry = by_index.get(index)
    return entry is not None and (term is None or entry.term == term)


def message_problem(node_id: str, message: Message, recovered: Recovered) -> str | None:
    """Is `message` backed by what `node_id` durably holds (the Ready contract, rules 1 and 2)?"""
    hs = recovered.hard_state
    if isinstance(message, RequestVoteResponse) and message.vote_granted and not message.pre_vote:
        if hs.current_term < message.term or (
                hs.current_term == message.term and hs.voted_for != message.to_id):
            return f"{node_id} granted a vote in term {message.term} that is not durable ({hs})"
    elif isinstance(message, RequestVote) and not message.pre_vote:
        if hs.current_term < message.term or (hs.current_term == message.term and hs.voted_for != node_id):
            return f"{node_id} campaigns in term {message.term} without a durable self-vote ({hs})"
    elif isinstance(message, AppendEntries):
        if hs.current_term < message.term:
            return f"{node_id} leads in term {message.term} but durably knows term {hs.current_term}"
        # Its entries need not be durable here yet: a leader sends them while its own fsync runs
        # (pipelining, `Ready.send_first`); its own copy counts toward commit only after that fsync, which
        # the fsync-before-ack check (a majority holds every applied entry) covers.
    elif isinstance(message, AppendEntriesResponse) and message.success:
        if not _holds(recovered, message.match_index) or hs.acked_watermark < message.match_index:
            return (f"{node_id} acknowledged {message.match_index} without it durable "
                    f"(watermark {hs.acked_watermark})")
    return None


def checked_kind(message: Message) -> str | None:
    if isinstance(message, RequestVoteResponse) and message.vote_granted and not message.pre_vote:
        return "vote"
    if isinstance(message, RequestVote) and not message.pre_vote:
        return "campaign"
    if isinstance(message, AppendEntries) and message.entries:
        return "append"
    if isinstance(message, AppendEntriesResponse) and message.success:
        return "ack"
    return None


class DurabilityChecker:
    """A `Router.on_send` hook: every message that depends on durable state is checked against the
    sender's durable image at the moment it is handed to the network."""

    def __init__(self, disks: dict[str, RecordingDisk]) -> None:
        self.disks = disks
        self.checked: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []

    def __call__(self, from_node: str, to_node: str, group: str, message: Message) -> None:
        kind = checked_kind(message)
        if kind is None:
            return
        self.checked[kind] += 1
        problem = message_problem(from_node, message, self.disks[from_node].durable_recovered(group))
        if problem is not None:
            self.violations.append(problem)


# --- Network -----------------------------------------------------------------------------------------


class Router:
    """In-memory links between runtimes: a bounded queue per node, partitions, send hooks."""

    QUEUE_MAX = 10_000

    def __init__(self) -> None:
        self.runtimes: dict[str, NodeRuntime] = {}
        self.partition: list[set[str]] | None = None
        self.on_send: list[Callable[[str, str, str, Message], None]] = []
        self._inboxes: dict[str, tuple[trio.MemorySendChannel, trio.MemoryReceiveChannel]] = {}
        self.sent = 0
        self.beats_sent = 0

    def connected(self, a: str, b: str) -> bool:
        if a not in self.runtimes or b not in self.runtimes:
            return False
        return self.partition is None or any(a in side and b in side for side in self.partition)

    def send_fn(self, from_node: str):
        def send(to_node: str, group: str, message: Message) -> bool:
            for hook in self.on_send:
                hook(from_node, to_node, group, message)
            self.sent += 1
            if not self.connected(from_node, to_node):
                return False
            try:
                self._inboxes[to_node][0].send_nowait((group, message))
            except trio.WouldBlock:
                return False
            return True
        return send

    def beat_fn(self, from_node: str):
        """A runtime's `send_beat`: node beats share the Raft messages' queue, so their order holds."""
        def send_beat(to_node: str, payload: bytes) -> bool:
            self.beats_sent += 1
            if not self.connected(from_node, to_node):
                return False
            try:
                self._inboxes[to_node][0].send_nowait((BEAT_GROUP, (from_node, payload)))
            except trio.WouldBlock:
                return False
            return True
        return send_beat

    def add_inbox(self, node_id: str) -> None:
        self._inboxes[node_id] = trio.open_memory_channel(self.QUEUE_MAX)

    def attach(self, node_id: str, runtime: NodeRuntime) -> None:
        self.runtimes[node_id] = runtime

    def detach(self, node_id: str) -> None:
        self.runtimes.pop(node_id, None)

    async def deliver_forever(self, node_id: str) -> None:
        receive = self._inboxes[node_id][1]
        async for group, message in receive:
            runtime = self.runtimes.get(node_id)
            if group == BEAT_GROUP:
                if runtime is not None and self.connected(message[0], node_id):
                    runtime.deliver_beat(*message)
                continue
            if runtime is not None and self.connected(message.from_id, node_id):
                runtime.deliver(group, message)


def virtual_worker(latency_s: float = 0.001):
    """A `run_in_worker` that runs the blocking work inline after `latency_s` of trio time. Under
    `autojump_clock` a real thread would let virtual time race ahead while it runs (trio sees every task
    blocked and jumps), so deterministic tests model the fsync's latency in virtual time instead. Like a
    real thread it is not abandoned when cancelled: the work still runs to completion."""
    async def run(fn, *args):
        with trio.CancelScope(shield=True):
            await trio.sleep(latency_s)
        return fn(*args)
    return run


# --- Cluster -----------------------------------------------------------------------------------------


class Cluster:
    """Runtimes `n1..nN` in one nursery, connected by a `Router`; nodes can be stopped and restarted."""

    def __init__(self, nursery: trio.Nursery, size: int = 3, *, runtime_cls: type[NodeRuntime] = NodeRuntime,
                 disks: dict[str, object] | None = None, clocks: dict[str, object] | None = None,
                 runtime_options: dict[str, object] | None = None,
                 node_options: dict[str, dict[str, object]] | None = None, seed: int = 1,
                 beats: bool = False) -> None:
        self.nursery = nursery
        self.ids = [f"n{i}" for i in range(1, size + 1)]
        self.router = Router()
        self.runtime_cls = runtime_cls
        self.disks = disks if disks is not None else {n: RecordingDisk(seed=seed) for n in self.ids}
        self.clocks = clocks or {}
        self.options = {"run_in_worker": virtual_worker(), **(runtime_options or {})}
        self.node_options = node_options or {}
        self.runtimes: dict[str, NodeRuntime] = {}
        self.machines: dict[str, ListMachine] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        self._stopped: dict[str, trio.Event] = {}
        self._seed = seed
        self._starts = 0
        self.beats = beats  # wire each runtime's `send_beat`: groups quiesce (runtime/quiesce.py)
        for node_id in self.ids:
            self.router.add_inbox(node_id)
            nursery.start_soon(self.router.deliver_forever, node_id)

    async def start(self, node_id: str, *, group: str = GROUP, machine: ListMachine | None = None,
                    voters: Sequence[str] | None | str = "all", **group_options) -> NodeRuntime:
        self._starts += 1
        runtime = self.runtime_cls(node_id, self.disks[node_id], self.clocks.get(node_id, SystemClock()),
                                   random.Random(f"{self._seed}-{node_id}-{self._starts}"),
                                   self.router.send_fn(node_id), tick_ms=TICK_MS,
                                   **({"send_beat": self.router.beat_fn(node_id)} if self.beats else {}),
                                   **{**self.options, **self.node_options.get(node_id, {})})
        self.runtimes[node_id] = runtime
        self.router.attach(node_id, runtime)
        await self.nursery.start(self._run, node_id, runtime)
        self.machines[node_id] = machine if machine is not None else ListMachine()
        chosen = self.ids if voters == "all" else voters
        assert not isinstance(chosen, str)
        await runtime.open_group(group, voters=chosen, state_machine=self.machines[node_id], **group_options)
        return runtime

    async def _run(self, node_id: str, runtime: NodeRuntime, task_status=trio.TASK_STATUS_IGNORED) -> None:
        stopped = self._stopped[node_id] = trio.Event()
        with trio.CancelScope() as scope:
            self._scopes[node_id] = scope
            await runtime.run(task_status=task_status)
        stopped.set()

    async def start_all(self, **group_options) -> None:
        for node_id in self.ids:
            await self.start(node_id, **group_options)

    async def stop(self, node_id: str) -> None:
        """Cancel the node's runtime (clean shutdown) and wait until `run()` returned."""
        self.router.detach(node_id)
        self._scopes[node_id].cancel()
        await self._stopped[node_id].wait()

    async def stop_all(self) -> None:
        for node_id in list(self.router.runtimes):
            await self.stop(node_id)

    def leaders(self, group: str = GROUP) -> list[str]:
        return [n for n, r in self.runtimes.items()
                if n in self.router.runtimes and group in r.group_names()
                and r.status(group).raft.role == "leader"]

    async def wait_leader(self, group: str = GROUP, timeout_s: float = 30.0) -> str:
        with trio.fail_after(timeout_s):
            while True:
                leaders = self.leaders(group)
                if len(leaders) == 1:
                    leader = leaders[0]
                    status = self.runtimes[leader].status(group).raft
                    if status.commit_index >= status.last_index:  # its no-op committed: it serves
                        return leader
                await trio.sleep(TICK_MS / 1000)


async def eventually(condition: Callable[[], bool], timeout_s: float = 30.0,
                     poll_s: float = TICK_MS / 1000) -> None:
    """Poll `condition` (virtual time under autojump_clock) until it holds; fail after `timeout_s`."""
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(poll_s)


def record_persist_threads(monkeypatch) -> set[str]:
    """The names of the threads that run the runtime's cycle persistence from now on (`persist_jobs`
    wrapped where the runtime looks it up, `runtime.persist` invariant 3)."""
    from jsraft.runtime import persist
    threads: set[str] = set()
    persist_jobs = persist.persist_jobs

    def recording(jobs):
        threads.add(threading.current_thread().name)
        return persist_jobs(jobs)
    monkeypatch.setattr(persist, "persist_jobs", recording)
    return threads


def os_disks(root, ids: Sequence[str]) -> dict[str, object]:
    return {node_id: OsDisk(str(root / node_id)) for node_id in ids}
