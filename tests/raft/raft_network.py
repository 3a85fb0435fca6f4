"""A tiny in-memory cluster for Raft core tests: storage, application, network, contract checker.

Method: every `RaftNode` gets a `MemStorage` that keeps two copies of what a WAL would hold — `written`
(the page cache) and `durable` (what survives a crash) — behind the part of the `Wal` interface the
production persistence steps use. Each node's `Ready`s go through the production cycle,
`jsraft.replica.GroupCycle` (take → `write_work` / `sync_work` → send → apply → advance), so these tests
exercise the order the runtime and the simulator run, not a copy of it: writes land in `written`,
`Wal.sync()` copies them to `durable`, and a hard-state save is durable at once (its own fsync, as in the
WAL); `crash` throws `written` away. `check_ready_contract` runs between the persistence and the first
message and verifies that every message leaving a node is backed by durable state (a granted vote by a
durable vote, an acknowledgement by durable entries and watermark). The network is a FIFO queue with
partitions; nodes that are down receive nothing. Everything is deterministic for a given seed.
"""

from __future__ import annotations

import collections
import copy
import random
from collections.abc import Iterable

import attrs

from jsraft.raft import (
    AppendEntries, AppendEntriesResponse, ConfState, Entry, EntryType, HardState, InstallSnapshot,
    InstallSnapshotResponse, Message, RaftConfig, RaftNode, Ready, RequestVote, RequestVoteResponse,
    RestoredState, Snapshot, SnapshotMeta, StatusProbe, StatusProbeResponse, TermQuery, TermQueryResponse, TimeoutNow,
    decode_conf_change,
)
from jsraft.replica import GroupCycle, Work


@attrs.define
class StorageState:
    hard_state: HardState = attrs.field(factory=HardState)
    snapshot: Snapshot | None = None
    entries: list[Entry] = attrs.field(factory=list)
    faulty: set[int] = attrs.field(factory=set)

    @property
    def snapshot_index(self) -> int:
        return self.snapshot.meta.index if self.snapshot else 0

    @property
    def last_index(self) -> int:
        return self.entries[-1].index if self.entries else self.snapshot_index

    def holds(self, index: int) -> bool:
        """Does storage durably hold a verified copy of everything up to `index`?"""
        if index > self.last_index:
            return False
        return not any(f <= index for f in self.faulty)


class MemStorage:
    """What a WAL holds for one node, behind the `Wal` methods `replica.persist` calls."""

    def __init__(self, bootstrap_conf: ConfState | None) -> None:
        # An initial member bootstraps the group when its storage is empty; a node added later does not.
        self.bootstrap_conf = bootstrap_conf
        self.written = StorageState()
        self.durable = StorageState()
        self.storage_uuid_changed = False
        # Lost storage with no vote-term ceiling (`raft.term_query`): the voters it asks while still empty.
        self.term_query_voters: tuple[str, ...] | None = None
        # What the core asked storage to do, for tests to check: truncation points, in-place rewrites.
        self.truncations: list[int] = []
        self.rewrites: list[int] = []
        # Every version of every entry ever written here: what a rolled-back write can bring back.
        self.history: dict[int, list[Entry]] = {}

    # --- The part of `Wal` that `replica.persist` uses -------------------------------------------

    @property
    def hard_state(self) -> HardState:
        return self.written.hard_state

    def save_hard_state(self, hard_state: HardState) -> None:
        """Durable before returning, like the WAL's two-slot file (its own fsync)."""
        self.written.hard_state = hard_state
        self.durable.hard_state = hard_state

    def first_index(self) -> int:
        return self.written.snapshot_index + 1

    def last_index(self) -> int:
        return self.written.last_index

    def term(self, index: int) -> int | None:
        """None for a faulty entry: this model keeps no successor's claim of its term (the WAL may, and
        then `put_repaired` cuts a suffix it proves divergent; tests/sim covers that path)."""
        state = self.written
        if index in state.faulty:
            return None
        if index == state.snapshot_index and state.snapshot is not None:
            return state.snapshot.meta.term
        position = index - state.snapshot_index - 1
        return state.entries[position].term if 0 <= position < len(state.entries) else None

    def faulty(self) -> frozenset[int]:
        return frozenset(self.written.faulty)

    def truncate_from(self, index: int) -> None:
        """Durable before returning, like `Wal.truncate_from` (which syncs, then cuts)."""
        self.truncations.append(index)
        self.sync()
        for state in (self.written, self.durable):
            state.entries = [e for e in state.entries if e.index < index]
            state.faulty = {f for f in state.faulty if f < index}

    def save_snapshot(self, meta: SnapshotMeta, data: bytes) -> None:
        self.written.snapshot = Snapshot(meta=meta, data=data)

    def compact(self, index: int) -> None:
        state = self.written
        state.entries = [e for e in state.entries if e.index > index]
        state.faulty = {f for f in state.faulty if f > index}

    def append(self, entries: list[Entry]) -> None:
        state = self.written
        assert entries[0].index == state.last_index + 1, (
            f"Ready appends at {entries[0].index} but storage ends at {state.last_index}")
        for entry in entries:
            self.history.setdefault(entry.index, []).append(entry)
        state.entries.extend(entries)

    def replace(self, entries: list[Entry]) -> None:
        state = self.written
        for entry in entries:
            assert entry.index in state.faulty, f"repaired entry {entry.index} was not faulty in storage"
            self.history.setdefault(entry.index, []).append(entry)
            state.entries[entry.index - state.snapshot_index - 1] = entry
            state.faulty.discard(entry.index)
            self.rewrites.append(entry.index)

    def sync(self) -> None:
        self.durable = copy.deepcopy(self.written)

    def crash(self) -> None:
        """Power loss: only what was fsynced survives."""
        self.written = copy.deepcopy(self.durable)

    def corrupt(self, index: int, term: int | None = None) -> None:
        """A bit flip found at recovery: identity kept (maybe with a damaged term), data unknown."""
        for state in (self.durable, self.written):
            position = index - state.snapshot_index - 1
            assert 0 <= position < len(state.entries), f"no entry {index} to corrupt"
            old = state.entries[position]
            state.entries[position] = Entry(index=index, term=term if term is not None else old.term,
                                            type=EntryType.NORMAL, data=b"\xde\xad")
            state.faulty.add(index)

    def roll_back(self, first: int, last: int) -> bool:
        """A rolled-back write: entries `first..last` revert to the versions this node held before (copies
        of an older term that pass their CRC). The WAL notices where they meet newer records and reports
        the replica repairing. False (nothing done) if there is no such self-consistent older stretch."""
        state = self.durable
        base = state.snapshot_index
        if first <= base or last > state.last_index:
            return False
        older: list[Entry] = []
        for index in range(first, last + 1):
            current = state.entries[index - base - 1]
            versions = [v for v in self.history.get(index, []) if v.term < current.term]
            if not versions:
                return False
            older.append(versions[-1])
        entries = state.entries[:first - base - 1] + older + state.entries[last - base:]
        terms = [state.snapshot.meta.term if state.snapshot else 0]
        terms += [e.term for e in entries if e.index not in state.faulty]
        if terms != sorted(terms):
            return False
        for target in (self.durable, self.written):
            target.entries = copy.deepcopy(entries)
            target.faulty -= set(range(first, last + 1))
            target.hard_state = attrs.evolve(state.hard_state, repairing=True)
        return True

    def truncate_log(self, to: int) -> None:
        """The WAL lost its tail above `to` (the hard state, with its watermark, survived)."""
        for state in (self.durable, self.written):
            state.entries = [e for e in state.entries if e.index <= to]
            state.faulty = {f for f in state.faulty if f <= to}

    def restored(self) -> RestoredState:
        state = self.durable
        snap = state.snapshot
        empty = snap is None and not state.entries and state.hard_state == HardState()
        # The term stays unknown while nothing was persisted since the loss (`replica.restore` decision 3).
        query = self.term_query_voters if empty else None
        lost = self.storage_uuid_changed or query is not None
        if empty and self.bootstrap_conf is not None and not lost:
            return RestoredState.bootstrap(self.bootstrap_conf.voters, self.bootstrap_conf.learners)
        return RestoredState(
            hard_state=state.hard_state,
            conf_state=snap.meta.conf if snap else ConfState(voters=()),
            snapshot=snap.meta if snap else None,
            snapshot_data=snap.data if snap else None,
            entries=list(state.entries),
            faulty=frozenset(state.faulty),
            storage_uuid_changed=lost,
            term_query_voters=query,
        )


class App:
    """A state machine that appends each NORMAL entry's data to a list; snapshots are that list."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.applied_index = 0
        self.read_states: list[tuple[int, bytes]] = []

    def install(self, snapshot: Snapshot) -> None:
        self.values = snapshot.data.decode().split("\n") if snapshot.data else []
        self.applied_index = snapshot.meta.index

    def apply(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            assert entry.index == self.applied_index + 1, f"applied {entry.index} after {self.applied_index}"
            if entry.type is EntryType.NORMAL:
                self.values.append(entry.data.decode())
            self.applied_index = entry.index

    def snapshot_data(self) -> bytes:
        return "\n".join(self.values).encode()


class AppMachine:
    """An `App` as the production cycle's `StateMachine` (`jsraft.replica.state_machine`)."""

    def __init__(self, cluster: Cluster, node_id: str) -> None:
        self.cluster, self.node_id = cluster, node_id
        self._installing: SnapshotMeta | None = None

    @property
    def app(self) -> App:
        return self.cluster.apps[self.node_id]

    @property
    def applied_index(self) -> int:
        return self.app.applied_index

    def apply(self, entries: Iterable[Entry]) -> list[None]:
        entries = list(entries)
        self.app.apply(entries)
        return [None] * len(entries)

    def prepare_install(self, meta: SnapshotMeta) -> None:
        self._installing = meta

    def restore(self, data: bytes) -> None:
        assert self._installing is not None, "a snapshot is announced before it is restored"
        self.app.install(Snapshot(meta=self._installing, data=data))

    def snapshot(self) -> bytes:
        return self.app.snapshot_data()


def check_ready_contract(node_id: str, rd: Ready, storage: MemStorage) -> None:
    """After `rd` was persisted: every message it carries must be backed by durable state (rules 1, 2)."""
    durable = storage.durable
    hard_state = durable.hard_state
    for message in rd.messages:
        assert message.to_id != node_id, "a node sent a message to itself"
        assert message.from_id == node_id
        if isinstance(message, RequestVoteResponse) and message.vote_granted and not message.pre_vote:
            assert (hard_state.current_term, hard_state.voted_for) == (message.term, message.to_id), (
                f"{node_id} granted a vote to {message.to_id} in term {message.term} that is not durable "
                f"(durable: term {hard_state.current_term}, vote {hard_state.voted_for})")
        elif isinstance(message, RequestVote) and not message.pre_vote:
            assert (hard_state.current_term, hard_state.voted_for) == (message.term, node_id), (
                f"{node_id} campaigns in term {message.term} without a durable self-vote")
        elif isinstance(message, (AppendEntries, InstallSnapshot, TimeoutNow)):
            assert hard_state.current_term >= message.term, f"{node_id} leads in a term it has not persisted"
        elif isinstance(message, AppendEntriesResponse) and message.success:
            assert durable.holds(message.match_index) or message.match_index <= durable.snapshot_index, (
                f"{node_id} acknowledged {message.match_index} but durably holds {durable.last_index}")
            assert hard_state.acked_watermark >= message.match_index, (
                f"{node_id} acknowledged {message.match_index} above its durable watermark "
                f"{hard_state.acked_watermark}")
        elif isinstance(message, InstallSnapshotResponse) and message.done and message.match_index:
            assert durable.holds(message.match_index) or durable.snapshot_index >= message.match_index


def node_name(token: str) -> str:
    return token if token.startswith("n") else f"n{token}"


class Cluster:
    """Nodes `n1..nN` connected by an in-memory network, driven step by step."""

    def __init__(self, voters: Iterable[str], *, learners: Iterable[str] = (), seed: int = 0,
                 config: dict[str, object] | None = None, node_class: dict[str, type[RaftNode]] | None = None,
                 ) -> None:
        self.seed = seed
        self.config_overrides = dict(config or {})
        self.node_class = dict(node_class or {})
        conf = ConfState(voters=tuple(sorted(voters)), learners=tuple(sorted(learners)))
        self.nodes: dict[str, RaftNode] = {}
        self.cycles: dict[str, GroupCycle] = {}
        self.storages: dict[str, MemStorage] = {}
        self.apps: dict[str, App] = {}
        self.down: set[str] = set()
        self.queue: collections.deque[Message] = collections.deque()
        self.partition: list[set[str]] | None = None
        self.events: list[str] = []
        self.delivered: list[Message] = []
        self._last_seen: dict[str, tuple[object, ...]] = {}
        self._starts = 0
        self.trace = False  # record every delivered message as an event (scenario output)
        for node_id in conf.voters + conf.learners:
            self.add_node(node_id, conf)

    # --- Membership of the test network ---------------------------------------------------------

    def add_node(self, node_id: str, conf: ConfState | None = None) -> RaftNode:
        """A node with empty storage; without `conf` it is a blank member waiting to be added."""
        self.storages[node_id] = MemStorage(conf)
        self.apps[node_id] = App()
        return self._start(node_id)

    def _start(self, node_id: str) -> RaftNode:
        config = RaftConfig(node_id=node_id, **self.config_overrides)  # type: ignore[arg-type]
        cls = self.node_class.get(node_id, RaftNode)
        restored = self.storages[node_id].restored()
        self.storages[node_id].storage_uuid_changed = False  # the WAL records its new UUID at first start
        self._starts += 1
        node = cls(config, random.Random(f"{self.seed}-{node_id}-{self._starts}"), restored)
        self.nodes[node_id] = node
        app = self.apps[node_id] = App()
        if restored.snapshot is not None:
            app.install(Snapshot(meta=restored.snapshot, data=restored.snapshot_data or b""))
        # The production cycle; the test drives compaction itself (`node.compact`), so none is scheduled.
        self.cycles[node_id] = GroupCycle(
            name="test", node=node, wal=self.storages[node_id], disk=None,  # type: ignore[arg-type]
            state_machine=AppMachine(self, node_id), marker=None, snapshot_every_entries=None)
        self._observe(node_id)
        return node

    def crash(self, node_id: str) -> None:
        self.down.add(node_id)
        self.storages[node_id].crash()
        self.queue = collections.deque(m for m in self.queue if node_id not in (m.to_id, m.from_id))

    def restart(self, node_id: str) -> RaftNode:
        if node_id not in self.down:
            self.crash(node_id)
        self.down.discard(node_id)
        return self._start(node_id)

    # --- Driving --------------------------------------------------------------------------------

    def connected(self, a: str, b: str) -> bool:
        if a in self.down or b in self.down:
            return False
        if self.partition is None:
            return True
        return any(a in group and b in group for group in self.partition)

    def process_ready(self, node_id: str) -> bool:
        node = self.nodes[node_id]
        if node_id in self.down or not node.has_ready():
            return False
        storage = self.storages[node_id]

        def persisted(work: Work) -> None:
            assert work.ready is not None
            check_ready_contract(node_id, work.ready, storage)

        work = self.cycles[node_id].run(self._send, persisted)
        assert work.ready is not None
        app = self.apps[node_id]
        app.read_states.extend((r.index, r.ctx) for r in work.ready.read_states)
        for read in work.ready.read_states:
            self.events.append(f"{node_id}: read-state index={read.index} ctx={read.ctx.decode()}")
        self._observe(node_id)
        return True

    def _send(self, to_id: str, group: str, message: Message) -> bool:
        self.queue.append(message)
        return True

    def deliver_one(self) -> Message | None:
        message = self.queue.popleft()
        if not self.connected(message.from_id, message.to_id):
            if self.trace:
                self.events.append(f"{describe_message(message)} (dropped)")
            return None
        if self.trace:
            self.events.append(describe_message(message))
        self.delivered.append(message)
        self.nodes[message.to_id].step(message)
        self._observe(message.to_id)
        return message

    def stabilize(self, rounds_max: int = 100_000) -> list[Message]:
        """Process readies and deliver messages until nothing is left to do."""
        delivered: list[Message] = []
        for _ in range(rounds_max):
            progressed = False
            for node_id in sorted(self.nodes):
                while self.process_ready(node_id):
                    progressed = True
            while self.queue:
                progressed = True
                message = self.deliver_one()
                if message is not None:
                    delivered.append(message)
                    while self.process_ready(message.to_id):
                        pass
            if not progressed:
                return delivered
        raise AssertionError("the cluster did not stabilize")

    def deliver_until(self, done, messages_max: int = 10_000) -> None:
        """Like `stabilize`, but stop as soon as `done()` holds (checked after every delivery)."""
        for _ in range(messages_max):
            for node_id in sorted(self.nodes):
                while self.process_ready(node_id):
                    pass
            if done():
                return
            assert self.queue, "nothing left to deliver"
            message = self.deliver_one()
            if message is not None and not done():
                while self.process_ready(message.to_id):
                    pass
            if done():
                return
        raise AssertionError("condition not reached")

    def tick(self, node_id: str, times: int = 1) -> None:
        for _ in range(times):
            if node_id not in self.down:
                self.nodes[node_id].tick()
                self._observe(node_id)

    def run(self, ticks: int) -> None:
        """`ticks` rounds of: tick every live node once, then stabilize."""
        for _ in range(ticks):
            for node_id in sorted(self.nodes):
                self.tick(node_id)
            self.stabilize()

    def run_until(self, done, ticks_max: int = 200) -> int:
        """`run(1)` until `done()` holds; the ticks it took. Fails the test past `ticks_max` (a deadline,
        not a hope: the condition is polled after every round)."""
        for ticks in range(ticks_max + 1):
            if done():
                return ticks
            self.run(1)
        raise AssertionError(f"not reached within {ticks_max} ticks: "
                             f"{ {n: node.status() for n, node in sorted(self.nodes.items())} }")

    def leader(self) -> str | None:
        leaders = [n for n, node in self.nodes.items() if n not in self.down and node.role == "leader"]
        return max(leaders, key=lambda n: self.nodes[n].current_term) if leaders else None

    def elect(self, node_id: str) -> None:
        self.nodes[node_id].campaign()
        self.stabilize()
        assert self.nodes[node_id].role == "leader", self.nodes[node_id].status()

    # --- Observing ------------------------------------------------------------------------------

    def _observe(self, node_id: str) -> None:
        """Record role, term, leader, repairing and halt changes as events."""
        status = self.nodes[node_id].status()
        seen = (status.role, status.current_term, status.leader_id, status.repairing, status.halted_reason)
        before = self._last_seen.get(node_id)
        self._last_seen[node_id] = seen
        if before is None or before == seen:
            return
        if before[:3] != seen[:3]:
            leader = f" leader={status.leader_id}" if status.leader_id else ""
            self.events.append(f"{node_id}: {status.role} term={status.current_term}{leader}")
        if before[3] != seen[3]:
            self.events.append(f"{node_id}: repairing ({status.repair_reason})" if status.repairing
                               else f"{node_id}: repaired")
        if before[4] != seen[4]:
            self.events.append(f"{node_id}: {status.halted_reason}" if status.halted_reason
                               else f"{node_id}: no longer halted")

    def take_events(self) -> list[str]:
        events, self.events = self.events, []
        return events


# --- Formatting, shared by tests and scenario output -----------------------------------------------


def describe_entry(entry: Entry) -> str:
    if entry.type is EntryType.NOOP:
        return f"{entry.index}/{entry.term} noop"
    if entry.type is EntryType.CONF_CHANGE:
        change = decode_conf_change(entry.data)
        return f"{entry.index}/{entry.term} conf {change.type.name.lower().replace('_', '-')} {change.node_id}"
    return f"{entry.index}/{entry.term} {entry.data.decode(errors='replace')!r}"


def describe_message(m: Message) -> str:
    head = f"{m.from_id}->{m.to_id}"
    if isinstance(m, AppendEntries):
        kind = "Heartbeat" if m.heartbeat else "AppendEntries"
        entries = "" if m.heartbeat else f" [{', '.join(describe_entry(e) for e in m.entries)}]"
        return f"{head} {kind} term={m.term} prev={m.prev_log_index}/{m.prev_log_term} commit={m.leader_commit}{entries}"
    if isinstance(m, AppendEntriesResponse):
        kind = "HeartbeatResponse" if m.heartbeat else "AppendEntriesResponse"
        flag = " repairing" if m.repairing else ""
        if m.success:
            return f"{head} {kind} term={m.term} ok match={m.match_index}{flag}"
        return (f"{head} {kind} term={m.term} reject rejected={m.rejected_index} "
                f"hint={m.reject_hint_index}/{m.reject_hint_term}{flag}")
    if isinstance(m, RequestVote):
        kind = "PreVote" if m.pre_vote else "RequestVote"
        transfer = " transfer" if m.leadership_transfer else ""
        return f"{head} {kind} term={m.term} last={m.last_log_index}/{m.last_log_term}{transfer}"
    if isinstance(m, RequestVoteResponse):
        kind = "PreVoteResponse" if m.pre_vote else "RequestVoteResponse"
        verdict = "granted" if m.vote_granted else "rejected"
        return f"{head} {kind} term={m.term} {verdict}{' repairing' if m.repairing else ''}"
    if isinstance(m, InstallSnapshot):
        done = " done" if m.done else ""
        return (f"{head} InstallSnapshot term={m.term} snap={m.meta.index}/{m.meta.term} "
                f"offset={m.offset} len={len(m.data)}/{m.total_bytes}{done}")
    if isinstance(m, InstallSnapshotResponse):
        tail = f" done match={m.match_index}" if m.done else f" next={m.next_offset}"
        return f"{head} InstallSnapshotResponse term={m.term} snap={m.snapshot_index} chunk={m.chunk_offset}{tail}"
    if isinstance(m, TimeoutNow):
        return f"{head} TimeoutNow term={m.term}"
    if isinstance(m, StatusProbe):
        return f"{head} StatusProbe term={m.term}{' repairing' if m.repairing else ''}"
    if isinstance(m, StatusProbeResponse):
        return (f"{head} StatusProbeResponse term={m.term} leader={m.leader_id or '-'}"
                f"{' repairing' if m.repairing else ''}")
    if isinstance(m, TermQuery):
        return f"{head} TermQuery term={m.term} query={m.query_id}"
    if isinstance(m, TermQueryResponse):
        return f"{head} TermQueryResponse term={m.term} query={m.query_id}{'' if m.term_known else ' unknown'}"
    raise AssertionError(f"unknown message {m!r}")
