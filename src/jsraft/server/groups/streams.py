"""`StreamManager`: which stream groups this node runs, driven only by applied meta entries (layer L5).

Owns: the queue of meta events (`assignment applied`, `delete applied`, `snapshot restored`) and the one
task that turns them, in apply order, into opened replicas, CONFIG proposals and removed directories; the
table of replicas; the node's stream advisory log (`advisories`), which every replica's repairs and
audits write to.

Invariants:
  1. Events are handled one at a time in the order the meta group applied them, so a create, a delete
     and a re-create of one name reach the disk in that order.
  2. A stream directory is removed only while handling an applied `DELETE_STREAM`, or a restored meta
     snapshot that proves one (a group this node knew from its committed meta state, absent from the
     restored state: `meta.reconcile`), or once this node's replica has left the group after an applied
     update took it out of the stream's peers — and only if the directory's `group` file names that
     group (DESIGN §5): never because a stream is absent from possibly partial state. An unknown
     directory is left alone.
  3. An open event whose assignment is no longer the meta state's (deleted or re-created since) is
     skipped: replaying an old create must not resurrect a deleted stream.
  4. A restore event is planned when it is handled, against the meta state of that moment (never older
     than the snapshot): every replica and directory of a group that state lacks is removed, every
     replica it moved off this node leaves, every assignment of this node is opened or updated.
  5. A replica's group and store are closed only after all of its tasks ended: cancelling them is not
     enough, since a task woken in the same scheduling round still runs until its next checkpoint, and
     on a closed store or group it would raise and take the node down.
  6. A stream with no directory here gets it formatted whole before its replica opens
     (`stream_format`): a directory exists under the stream's name only complete and durable.
  7. A tree prepared ahead (`prepare`, on the meta leader while the create's entry is made durable) is
     used by the open of that name only once its preparation ended, succeeded, and was for the same
     config bytes as the applied assignment; otherwise the open formats from scratch. At most one
     preparation per name runs at a time, and the open of a name waits for it before touching the disk.
  8. A replica new to this node (its directory formatted by this open: an empty log, nothing to replay)
     whose group leads as soon as it opened (a single voter, `first_election`) has its
     assignment's CONFIG entry (`stream_replica` invariant 5) submitted right after the open, before
     anything else is proposed to the group (nothing is: its leader is not ready until the entry applied),
     so it is usually made durable by the group's first Ready cycle with the bootstrap and the no-op. The
     replica's run loop would propose it a tick after the create was answered, and its cycles then fell
     on the next create's path. Its outcome is not awaited: if it fails, the run loop proposes it.
  9. The format and the opening of the replica's files, store and WAL run in one worker-thread call
     (`stream_format.format_and_open`: a thread hop costs a wait for the interpreter on a busy node, twice
     per hop); a store or WAL that refuses to open is logged and the replica not started, as when its
     own open refused it.
 10. `prepare` starts the preparation's thread itself (`trio.lowlevel.start_thread_soon`): from a spawned
     task it began, in about half of back-to-back creates, only after the meta entry's fsyncs, run inline
     on the trio thread by the ready loop (woken by the same proposal). A bug there raises in the open.
 11. Running out of file descriptors (or an open that would eat the client reserve: `replica_descriptors` 1,
     2) while a replica is prepared, formatted or opened fails that replica alone: what it opened is closed,
     a half-made tree is left to `stream_format` 2 (a renamed `<name>` is complete), one ERROR is logged,
     and it stays unopened here until the next start (not retried: a limit does not rise by itself).

Imports: stdlib, L0, L1, L3 (`meta`, `stream.entries`), L4 (`runtime`), trio, server siblings.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from jsraft.disk.base import Disk
from jsraft.errors import JsraftError
from jsraft.meta import Applied, EntryKind, MetaStateMachine, StreamAssignment, plan_restore
from jsraft.meta.assignment import parse_config
from jsraft.raft.config import RaftConfig
from jsraft.runtime import NodeRuntime
from jsraft.replica.advisories import AdvisoryLog
from jsraft.server.groups.stream_options import StreamOptions
from jsraft.server.groups.stream_repair import CallPeer
from jsraft.server.groups.replica_descriptors import Headroom, log_not_opened, out_of_descriptors
from jsraft.server.groups.stream_format import (
    format_and_open, open_replica_files, prepare_format, remove_format_leftovers, remove_replica_dir,
)
from jsraft.server.groups.stream_replica import StreamReplica
from jsraft.server.groups.versioning import OfflineWarnings, offline_advisory
from jsraft.runtime import gc_freeze
from jsraft.stream.entries import encode_config

log = logging.getLogger("jsraft.server.groups.streams")

EVENTS_MAX = 65536  # meta entries applied but not yet handled; a bound, not a queue that grows for ever
PREPARED_MAX = 1024  # trees being prepared ahead at once; beyond it a create formats after its apply


class _Prepared:
    """A tree prepared ahead (invariants 7, 10): config bytes, group if known, success, end, bug raised."""

    def __init__(self, raw: bytes, group: str | None) -> None:
        self.raw, self.group, self.ok, self.done = raw, group, False, trio.Event()
        self.error: BaseException | None = None


class StreamManager:
    def __init__(self, *, node_id: str, disk: Disk, runtime: NodeRuntime, meta: MetaStateMachine,
                 raft_config: Callable[[], RaftConfig], tick_s: float, options: StreamOptions | None = None,
                 call_peer: CallPeer | None = None) -> None:
        self.node_id = node_id
        self.options = options or StreamOptions(tick_s=tick_s)
        self.call_peer = call_peer  # `$rpc` to another node: repairs and audits
        self.advisories = AdvisoryLog(node_id)  # every stream advisory this node raised
        self.offline_warnings = OfflineWarnings()  # streams and consumers this node loaded offline
        self.consumer_port: Any = None  # the node's consumer hub, given to each replica's consumers (push)
        self.disk = disk  # <store_dir>/streams
        self.runtime, self.meta = runtime, meta
        self.headroom = Headroom()  # whether one more replica leaves clients their descriptors (invariant 11)
        self.raft_config, self.tick_s = raft_config, tick_s
        self.replicas: dict[str, StreamReplica] = {}
        self._run_done: dict[str, trio.Event] = {}  # group -> set once that replica's tasks all ended
        # ("open" | "leave" | "delete", StreamAssignment) or ("restored", the replaced (stream, group) pairs)
        self._events: deque[tuple[str, Any]] = deque()
        self._wakeup = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._prepared: dict[str, _Prepared] = {}  # stream name -> its tree prepared ahead (invariant 7)
        self.handled = 0  # events handled, for tests that wait for the disk to follow the log

    # --- Inputs (synchronous, from the meta adapter) -------------------------------------------------

    def on_applied(self, applied: Applied) -> None:
        if not applied.ok:
            return
        if applied.kind is EntryKind.PEER_REMOVE:
            # A server left: every stream it re-placed is followed as an update of its peer set.
            for name in applied.changed:
                self._follow(self.meta.stream(name))
            return
        if applied.stream is None:
            return
        if applied.kind in (EntryKind.CREATE_STREAM, EntryKind.UPDATE_STREAM):
            self._note_offline(applied.stream.name, applied.stream.offline_reason)
            self._follow(applied.stream)
        elif applied.kind is EntryKind.DELETE_STREAM:
            self._note_offline(applied.stream.name, None)
            self._push("delete", applied.stream)

    def _note_offline(self, name: str, reason: str | None) -> None:
        """Every node warns about a stream it loaded offline (versioning invariant 1) and raises the
        asset-offline advisory, whether or not it holds a replica."""
        if self.offline_warnings.stream(name, reason):
            self.advisories.queue(*offline_advisory(self.node_id, name, None, str(reason)))

    def _follow(self, assignment: StreamAssignment) -> None:
        """Open (or reconfigure) a replica this node is a peer of; leave one it no longer is."""
        if self.node_id in assignment.peers:
            self._push("open", assignment)
        elif assignment.name in self.replicas:
            self._push("leave", assignment)

    def on_restored(self, replaced: list[tuple[str, str]]) -> None:
        """The meta state machine restored a snapshot; `replaced`: the `(stream, group)` pairs of the state
        it replaced (invariant 4)."""
        for assignment in self.meta.streams():
            self._note_offline(assignment.name, assignment.offline_reason)
        self._push("restored", replaced)

    def _push(self, kind: str, payload: Any) -> None:
        # Dropping an event would leave the disk out of step with the log: crash instead (a bug or a
        # pathological backlog), and a restart replays the log.
        if len(self._events) >= EVENTS_MAX:
            raise RuntimeError(f"stream manager: {EVENTS_MAX} meta events not handled")
        self._events.append((kind, payload))
        self._wakeup.set()

    def prepare(self, name: str, raw: bytes, group: str | None = None) -> None:
        """The meta leader (this node) proposed creating stream `name` whose only replica is this node:
        build its directory's tree now, while the entry is made durable (invariant 7, `stream_format` 5),
        with its `group` file when the entry's index is known (`group`, `stream_format` 7). Best effort:
        skipped before `run` started, for a name being prepared or open here, past the bound."""
        if (self._nursery is None or name in self._prepared or name in self.replicas
                or len(self._prepared) >= PREPARED_MAX):
            return
        try:
            config = parse_config(name, raw)
        except JsraftError as error:  # the open formats from scratch, and says so if it fails too
            log.info("stream %s: directory not prepared ahead: %s", name, error)
            return
        prepared = self._prepared[name] = _Prepared(raw, group)
        token = trio.lowlevel.current_trio_token()

        def deliver(result: Any) -> None:  # an `outcome.Outcome` (trio's), on the thread: must not raise
            with contextlib.suppress(trio.RunFinishedError):  # if stopped: a leftover (stream_format 2)
                token.run_sync_soon(self._prepared_done, name, prepared, result)
        trio.lowlevel.start_thread_soon(  # invariant 10
            lambda: prepare_format(self.disk, name=name, config=config, raw=raw, group=group), deliver, name=f"jsraft-prepare {name}")

    def _prepared_done(self, name: str, prepared: _Prepared, result: Any) -> None:
        """On the trio thread: the preparation of `name` ended (invariant 7)."""
        try:
            prepared.ok = result.unwrap()
        except (JsraftError, OSError) as error:  # the open formats from scratch, and says so if it fails too
            log.info("stream %s: directory not prepared ahead: %s", name, error)
        except BaseException as error:  # a bug: raised by the open that takes it, in the manager's task
            prepared.error = error
        prepared.done.set()
        if self._prepared.get(name) is prepared and not prepared.ok and prepared.error is None:
            del self._prepared[name]

    async def _take_prepared(self, assignment: StreamAssignment) -> bool:
        """Invariant 7: whether the open of `assignment` may use a tree prepared ahead."""
        prepared = self._prepared.get(assignment.name)
        if prepared is None:
            return False
        await prepared.done.wait()
        if self._prepared.get(assignment.name) is prepared:
            del self._prepared[assignment.name]
        if prepared.error is not None:
            raise prepared.error
        return prepared.ok and prepared.raw == assignment.config_raw

    @property
    def pending(self) -> int:
        return len(self._events)

    def caught_up(self) -> bool:
        """Every applied meta entry was acted on: the meta log may be compacted (meta_adapter invariant 5)."""
        return not self._events

    # --- The handler task ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        for entry in await trio.to_thread.run_sync(remove_format_leftovers, self.disk):
            log.info("streams: removed %s, a stream directory whose formatting a crash interrupted", entry)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                self._wakeup = trio.Event()
                while self._events:
                    kind, payload = self._events[0]
                    handler = {"open": self._open, "leave": self._leave, "delete": self._delete,
                               "restored": self._restored}[kind]
                    await handler(payload)
                    self._events.popleft()
                    self.handled += 1
                self.advisories.flush()  # what the meta apply raised (advisories invariant 3)
                await self._wakeup.wait()

    def _current(self, assignment: StreamAssignment) -> bool:
        try:
            return self.meta.stream(assignment.name).group == assignment.group
        except JsraftError:
            return False

    async def _open(self, assignment: StreamAssignment) -> None:
        if not self._current(assignment):
            return  # invariant 3
        if assignment.config is None:  # offline (DESIGN §9): not started, and stopped if an update made it so
            replica = self.replicas.pop(assignment.name, None)
            if replica is not None:
                log.warning("stream %s: stopped on this node, which cannot run its new config (files kept)",
                            assignment.name)
                await self._stop(replica)
            return
        replica = self.replicas.get(assignment.name)
        if replica is not None and replica.group == assignment.group:
            await self._update(replica, assignment)
            return
        # A stream new to this node gets its directory formatted whole, with one fsync per file and per
        # directory (`stream_format`); the replica's open then finds every name it needs in place.
        try:
            prepared = await self._take_prepared(assignment)
            formatted, files = await trio.to_thread.run_sync(self._format_and_open, assignment, prepared)
        except OSError as error:
            if not out_of_descriptors(error):
                raise
            log_not_opened(assignment.name, error)  # invariant 11
            return
        if isinstance(files, JsraftError):
            log_not_opened(assignment.name, files)
            return
        replica = StreamReplica(node_id=self.node_id, name=assignment.name, group=assignment.group,
                                config=assignment.config, raw=assignment.config_raw, peers=assignment.peers,
                                disk=self.disk.sub(assignment.name), runtime=self.runtime,
                                raft_config=self.raft_config(), config_index=assignment.config_index,
                                bootstrap=assignment.peers_unchanged, options=self.options,
                                call_peer=self.call_peer, advisories=self.advisories, offline_warnings=self.offline_warnings)
        replica.consumers.port = self.consumer_port
        try:
            await replica.open(assigned_index=assignment.created_index, files=files)
        except (JsraftError, OSError) as error:
            files.store.close()  # its open closed the WAL (invariant 11: the replica keeps nothing open)
            if isinstance(error, OSError) and not out_of_descriptors(error):
                raise
            log_not_opened(assignment.name, error)
            return
        self.replicas[assignment.name] = replica
        assert self._nursery is not None
        # Registered before the task starts, so a stop issued before it runs still waits for it (invariant 5).
        done = self._run_done[replica.group] = trio.Event()
        self._nursery.start_soon(self._run_replica, replica, done)
        if formatted:
            await self._config_first(replica)

    def _format_and_open(self, assignment: StreamAssignment, prepared: bool) -> tuple[bool, Any]:
        """Run in a worker thread (invariant 9): `stream_format.format_and_open`, if there is room (11)."""
        name, group, config, raw = assignment.name, assignment.group, assignment.config, assignment.config_raw
        assert config is not None
        self.headroom.check_open_room()
        return format_and_open(self.disk, name=name, group=group, config=config, raw=raw, prepared=prepared, runtime=self.runtime, assigned_index=assignment.created_index,
                               # After the format: `sub` makes the directory, which would pass for an existing one.
                               open_store_fn=lambda: open_replica_files(self.disk.sub(name), group, config, raw,
                                                                        self.options))

    async def _config_first(self, replica: StreamReplica) -> None:
        """Invariant 8: a new group that leads from its open gets its CONFIG entry into the log at once."""
        machine = replica.machine
        if (machine is None or replica.config_index <= machine.config_meta_index
                or not self.runtime.is_leader(replica.group)):
            return
        try:
            await self.runtime.submit(replica.group, encode_config(replica.raw, replica.config_index))
        except JsraftError as error:  # the replica's run loop proposes it once its leader is ready
            log.info("stream %s: config not proposed at open: %s", replica.name, error)

    async def _run_replica(self, replica: StreamReplica, done: trio.Event) -> None:
        try:
            await replica.run()
        finally:
            done.set()
            if self._run_done.get(replica.group) is done:
                del self._run_done[replica.group]

    async def _stop(self, replica: StreamReplica) -> None:
        """Invariant 5: cancel the replica's tasks, wait until they ended, then close its group and store."""
        replica.scope.cancel()
        done = self._run_done.get(replica.group)
        if done is not None:
            await done.wait()
        await replica.close()
        gc_freeze.released()  # its objects' cycles are garbage now (gc_freeze rule 2)

    async def _update(self, replica: StreamReplica, assignment: StreamAssignment) -> None:
        replica.peers, replica.leaving = assignment.peers, False
        self.runtime.ticker.wake_by_name(replica.group)  # a quiesced group's replica acts on it now
        if assignment.config_index <= replica.config_index:
            return
        replica.raw, replica.config_index = assignment.config_raw, assignment.config_index
        if replica.leader is not None:
            # Whoever leads the group when (or after) this applies proposes it: the replica's run loop
            # retries until the group's config index reaches the assignment's (stream_replica invariant 5).
            try:
                await replica.reconcile_config_now()
            except JsraftError as error:
                log.warning("stream %s: config update not proposed yet: %s", assignment.name, error)

    async def _leave(self, assignment: StreamAssignment) -> None:
        """This node is no longer one of the stream's peers: its replica keeps serving the group (whose
        leader may still need its vote to commit the change) until the group applied its removal; then the
        replica is closed and its directory removed (invariant 2's group check applies)."""
        replica = self.replicas.get(assignment.name)
        if replica is None or replica.group != assignment.group:
            return
        already_leaving = replica.leaving  # a restore may repeat a leave: one waiter is enough
        replica.peers, replica.leaving = assignment.peers, True
        if already_leaving:
            return
        assert self._nursery is not None
        self._nursery.start_soon(self._drop_when_left, replica, assignment)

    async def _drop_when_left(self, replica: StreamReplica, assignment: StreamAssignment) -> None:
        await replica.left.wait()
        if self.replicas.get(assignment.name) is not replica or not replica.leaving:
            return  # re-added (or replaced) meanwhile
        del self.replicas[assignment.name]
        await self._stop(replica)
        await trio.to_thread.run_sync(remove_replica_dir, self.disk, assignment.name, assignment.group, self.runtime.group_record)
        log.info("stream %s: replica left the group and was removed from this node", assignment.name)

    async def _delete(self, assignment: StreamAssignment) -> None:
        await self._drop(assignment.name, assignment.group)

    async def _drop(self, name: str, group: str) -> None:
        """Stop group `group` of stream `name` here and remove its directory (a committed delete)."""
        replica = self.replicas.get(name)
        if replica is not None and replica.group == group:
            del self.replicas[name]
            await self._stop(replica)
        await trio.to_thread.run_sync(remove_replica_dir, self.disk, name, group, self.runtime.group_record)

    async def _restored(self, replaced: list[tuple[str, str]]) -> None:
        """Invariant 4: bring the replicas and directories in line with a restored meta snapshot."""
        plan = plan_restore(self.meta, self.node_id, known=replaced,
                            running={name: replica.group for name, replica in self.replicas.items()})
        for name, group in plan.remove:
            log.info("stream %s: group %s is not in the restored meta state (deleted by a committed entry): "
                     "removing it from this node", name, group)
            await self._drop(name, group)
        for assignment in plan.leave:
            await self._leave(assignment)
        for assignment in plan.open:
            await self._open(assignment)

    async def close_all(self, *, clean: bool) -> None:
        """At node shutdown, after the runtime stopped (it closed every group itself)."""
        for replica in list(self.replicas.values()):
            with trio.CancelScope(shield=True):
                await replica.close(close_group=False, close_store=clean)
        self.replicas.clear()
