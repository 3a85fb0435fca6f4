"""`StreamPublishes`: a client's publish on a stream's subjects is stored in that stream (layer L5).

Owns: one internal subscription per (stream, subject filter) of every stream in this node's meta state,
kept in step with it before each route; carrying each publish (with the client's header block as it came)
to the stream's leader; and answering the PubAck JSON on the reply subject — `{"stream": ..., "seq": ...}`,
plus `"duplicate": true` for a duplicate `Nats-Msg-Id` — or `{"error": {"code", "err_code", "description"},
"stream": ..., "seq": 0}` (nats-server's `JSPubAckResponse`: its embedded `PubAck` always serializes `seq`).
That is what nats-py's `js.publish` and `js.publish_async` read. Also `client_service(config, ...)`, which builds
the node's `ClientServer` with this hook attached.

The path of a publish, per message only what must be (DESIGN §12): the subscription is a `sync` one, so
no task is started for it. When this node leads the stream, the publish goes straight into the replica's
queue with a callback that answers it (`StreamReplica.enqueue`). Otherwise it joins the stream's *lane*:
one task per stream with publishes waiting, which carries them to the leader in batches
(`publish_batch`) and answers each from the batch's reply. To a leader this node knows of, a batch is sent
at once and its reply awaited by a task of its own, up to `LANE_BATCHES_MAX` batches out (the leader
queues each as its frame is read: `publish_batch.start_publish_batch`, rpc invariant 5); with no leader
known, or after a refusal, through `Node.call_stream`, which finds the leader and paces its retries.

Invariants:
  1. Before a publish is routed, the internal subscriptions match the streams of the meta state applied
     at that moment (`meta.applied_index` is compared on each route, rebuilt when it moved), so a
     publish right after `add_stream` returned on this node is stored, not answered "no responders".
  2. A publish without a reply subject, or to a `no_ack` stream, is stored all the same and answered to
     nobody, not even with an error (nats-server).
  3. Publishes of one stream from this node reach its leader in the order they arrived while the leader
     does not change: a publish goes straight to a local leader only when the stream's lane is empty
     (nothing older is still being carried), and a lane's batches are queued at the leader in the order
     it sent them (one task sends them, without a checkpoint in between; the leader queues each on
     arrival, and one TCP link keeps the order). A publish
     answered `NotLeader` or `ProposalDropped` (not stored: it never entered the log, or its entry was
     replaced) is carried again, paced by the router's tick, ahead of later ones, until the router's deadline
     (`Router.deadline_s`) from its arrival. The PubAck's `seq` is the leader's answer, never guessed.
  4. Each publish is answered once, and only then released from its connection's in-flight bound
     (`InternalMsg.done`, ClientConn invariant 6): a client that publishes faster than the stream
     stores is paused, not queued without bound.

Imports: stdlib, L0, L1 (`raft` errors), trio, server siblings.
Reference: nats-server `server/stream.go` (`processInboundJetStreamMsg`, `JSPubAckResponse`).
"""

from __future__ import annotations

import collections
import functools
import heapq
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import BadRequest, InvalidSubject, JsraftError
from jsraft.meta import StreamOffline
from jsraft.raft.errors import NotLeader, ProposalDropped
from jsraft.server.groups import publish_batch
from jsraft.server.nats.auth import Authenticator
from jsraft.server.nats.client_server import ClientOptions, ClientServer, InternalMsg, InternalSubscription
from jsraft.server.nats.tls import TlsContexts
from jsraft.server.errors import NoLeader, RpcRefused
from jsraft.server.groups.stream_replica import api_error
from jsraft.stream import PubOutcome

if TYPE_CHECKING:
    from jsraft.meta.machine import StreamCursor
    from jsraft.server.groups.router import Router
    from jsraft.server.groups.rpc import Rpc
    from jsraft.server.groups.stream_lookup import CallStream, LocalStreams
    from jsraft.server.settings.config import NodeConfig

log = logging.getLogger("jsraft.server.clients")


def server_id(storage_uuid: str) -> str:
    """A stable NATS server id for the node: 'N' and its storage UUID, upper-case (nats-server ids are
    upper-case and start with 'N')."""
    return "N" + uuid.UUID(storage_uuid).hex.upper()


def client_service(config: NodeConfig, storage_uuid: str | None, *, local: LocalStreams, router: Router, rpc: Rpc,
                   call_stream: CallStream) -> ClientServer:
    """The node's client port, with stream-subject publishes routed to the streams."""
    storage_uuid = storage_uuid if storage_uuid is not None else str(uuid.UUID(int=0))
    clients = ClientServer(ClientOptions.of(config), server_id=server_id(storage_uuid), server_name=local.name,
                           authenticator=Authenticator(config.client_auth) if config.client_auth else None,
                           tls=TlsContexts(config.client_tls, "client_tls") if config.client_tls else None)
    StreamPublishes(clients, local=local, router=router, rpc=rpc, call_stream=call_stream)
    return clients


LANE_BATCHES_MAX = 8  # batches of one stream sent to a remote leader and not answered yet
# Answers that prove a publish was not stored (never in the log, or its entry replaced): carried again.
_NOT_STORED = (NotLeader, ProposalDropped)

Item = tuple[int, InternalMsg, float]  # (arrival number, the publish, deadline to be carried by)


class _Lane:
    """Publishes of one stream being carried to its leader by the lane's task (module docstring)."""

    __slots__ = ("items", "out", "changed", "leader", "slow")

    def __init__(self) -> None:
        self.items: collections.deque[Item] = collections.deque()  # in arrival order
        self.out = 0  # batches sent to a remote leader, not answered yet
        self.changed = trio.Event()  # set when items arrive or a batch is answered
        self.leader: str | None = None  # who served the last batch (for a node outside the group)
        # A batch was refused whole: send the next through the router, which finds the leader and
        # paces its retries, instead of straight to the node we believed led.
        self.slow = False


class StreamPublishes:
    def __init__(self, clients: ClientServer, *, local: LocalStreams, router: Router, rpc: Rpc,
                 call_stream: CallStream) -> None:
        """`local`: this node's replicas and meta state; `router` paces retries (`Node.call_stream`'s),
        `rpc` sends a batch straight to a known leader, `call_stream` finds one."""
        self._local, self._router, self._rpc, self._call_stream = local, router, rpc, call_stream
        self._clients = clients
        self._seen_index: int | None = None
        self._subs: dict[str, dict[str, InternalSubscription]] = {}  # stream -> subject -> subscription
        self._cursor: StreamCursor | None = None  # where `refresh` is in the meta state's stream changes
        # A stream's lane exists while its task runs; while it does, every publish on the stream joins it.
        self._lanes: dict[str, _Lane] = {}
        self._arrivals = 0  # numbers the publishes that join a lane, so a retried one keeps its place
        clients.before_route.append(self.refresh)

    def refresh(self) -> None:
        """Invariant 1: the subscriptions of each stream assigned, replaced or deleted since the last
        refresh brought in line with its subjects (every stream's, the first time or after a restore)."""
        meta = self._local.meta
        index = meta.applied_index
        if index == self._seen_index:
            return
        self._seen_index = index
        names, self._cursor = meta.stream_changes(self._cursor)
        if names is None:
            names = set(meta.names()) | self._subs.keys()
        for name in sorted(names):
            held = self._subs.pop(name, {})
            subjects = set(meta.stream(name).subjects) if meta.has_stream(name) else set()
            for subject in held.keys() - subjects:
                self._clients.unsubscribe_internal(held.pop(subject))
            for subject in sorted(subjects - held.keys()):
                try:
                    held[subject] = self._clients.subscribe_internal(
                        subject, functools.partial(self._ingest, name), sync=True)
                except InvalidSubject as error:  # meta accepted it, so this is not expected; do not route it
                    log.warning("stream %s subject %r not served to clients: %s", name, subject, error)
            if held:
                self._subs[name] = held

    # --- One publish, from the client port (a sync handler: no task, no checkpoint) ----------------------

    def _ingest(self, stream: str, msg: InternalMsg) -> None:
        """Invariant 3: straight into the local leader's queue when nothing of this stream waits in its
        lane, else behind what does."""
        if stream not in self._lanes:
            replica = self._local.replicas.get(stream)
            if replica is not None and replica.can_enqueue():
                self._enqueue_local(stream, replica, msg, 0.0)
                return
        offline = self._offline_reason(stream)
        if offline is not None:  # loaded offline here (DESIGN §9): no replica runs it, none will answer
            self._answer_error(stream, msg, StreamOffline(offline))
            return
        self._to_lane(stream, msg, trio.current_time() + self._router.deadline_s)

    def _offline_reason(self, stream: str) -> str | None:
        try:
            return self._local.meta.stream(stream).offline_reason
        except JsraftError:
            return None

    def _local_done(self, stream: str, msg: InternalMsg, answer: Any, deadline: float) -> None:
        """A local leader's answer. `deadline`: the carrying deadline of a publish from the lane (0: it
        came straight in, and its deadline starts now)."""
        if isinstance(answer, _NOT_STORED):
            # Not stored (never proposed, or its entry was replaced): carry it to the new leader.
            if not deadline:
                deadline = trio.current_time() + self._router.deadline_s
            if deadline > trio.current_time():
                self._to_lane(stream, msg, deadline, retry=True)
            else:
                self._answer_error(stream, msg, NoLeader("no stream leader took the publish in time"))
        elif isinstance(answer, JsraftError):
            self._answer_error(stream, msg, answer)
        elif answer.error is not None:
            self._answer_error(stream, msg, api_error(answer.error))
        else:
            self._answer_outcome(stream, msg, answer)

    def _acks(self, stream: str, msg: InternalMsg) -> bool:
        """Whether `msg` is answered: it asked (a reply subject) and the stream is not `no_ack`, which
        answers nothing, not even an error (nats-server `processInboundJetStreamMsg`)."""
        if not msg.reply:
            return False
        try:
            config = self._local.meta.stream(stream).config
        except JsraftError:
            return True
        return config is None or not config.no_ack

    def _answer(self, stream: str, msg: InternalMsg, seq: int, duplicate: bool) -> None:
        if self._acks(stream, msg):
            msg.respond(b'{"stream":%s,"seq":%d%s}' % (_json_name(stream), seq, _DUPLICATE if duplicate else b""))
        msg.done()

    def _answer_outcome(self, stream: str, msg: InternalMsg, answer: PubOutcome) -> None:
        """A stored (or staged) publish's answer: the PubAck, with a counter's `val` (ADR-49) or an atomic
        batch's `batch` and `count` (ADR-50); an empty message for a batch message staged (ADR-50)."""
        if answer.value is None and answer.batch is None and not answer.staged:
            self._answer(stream, msg, answer.seq, answer.duplicate)
            return
        if self._acks(stream, msg):
            msg.respond(b"" if answer.staged else json.dumps(answer.to_api(stream), separators=(",", ":")).encode())
        msg.done()

    def _answer_error(self, stream: str, msg: InternalMsg, error: JsraftError) -> None:
        log.debug("publish on %s to stream %s failed: %s", msg.subject, stream, error)
        answer = {"error": error.to_api(), "stream": stream, "seq": 0}
        if self._acks(stream, msg):
            msg.respond(json.dumps(answer, separators=(",", ":")).encode())
        msg.done()

    # --- A stream's lane: batches to wherever its leader is --------------------------------------------

    def _to_lane(self, stream: str, msg: InternalMsg, deadline: float, *, retry: bool = False) -> None:
        lane = self._lanes.get(stream)
        if lane is None:
            lane = self._lanes[stream] = _Lane()
            if not self._clients.start_soon(self._run_lane, stream, lane):
                del self._lanes[stream]
                self._answer_error(stream, msg, NoLeader("the client port is not running"))
                return
        self._arrivals += 1
        lane.items.append((self._arrivals, msg, deadline))
        lane.slow = lane.slow or retry
        lane.changed.set()

    async def _run_lane(self, stream: str, lane: _Lane) -> None:
        """Until nothing is waiting or out: send each batch where the leader is — queued at once with a
        local one, sent without waiting for the reply to a remote one (at most `LANE_BATCHES_MAX` out),
        or, with no leader known, through `Node.call_stream` (which finds one) and waited for."""
        try:
            while lane.items or lane.out:
                if not lane.items or lane.out >= LANE_BATCHES_MAX:
                    lane.changed = trio.Event()
                    await lane.changed.wait()
                    continue
                if lane.slow:
                    # Something was refused or not stored: give leadership a tick to settle, then let the
                    # router find the leader (and pace its own retries).
                    lane.slow = False
                    await trio.sleep(self._router.tick_s)
                    await self._carry(stream, lane, _take_batch(lane))
                    continue
                replica = self._local.replicas.get(stream)
                if replica is not None and replica.can_enqueue():
                    for _, msg, deadline in _take_batch(lane):
                        self._enqueue_local(stream, replica, msg, deadline)
                    continue
                leader = replica.leader_id() if replica is not None else lane.leader
                batch = _take_batch(lane)
                if leader is None or leader == self._local.name or not self._send_remote(stream, lane, leader, batch):
                    await self._carry(stream, lane, batch)
        finally:
            if self._lanes.get(stream) is lane:
                del self._lanes[stream]

    def _enqueue_local(self, stream: str, replica: Any, msg: InternalMsg, deadline: float) -> None:
        try:
            replica.enqueue(msg.subject, msg.headers or b"", msg.payload,
                            lambda answer: self._local_done(stream, msg, answer, deadline))
        except JsraftError as error:  # the replica's queue is full
            self._answer_error(stream, msg, error)

    def _send_remote(self, stream: str, lane: _Lane, leader: str, batch: list[Item]) -> bool:
        """Send `batch` to `leader` now, its reply awaited by a task of its own; False if it could not."""
        args, blobs = _request(stream, batch)
        # `meta_index`, as `Node.call_stream` sends it: a peer whose meta state is behind ours (a restarted
        # or removed server our stale leader hint names) answers "not leader", not "no such stream".
        args["meta_index"] = self._local.meta.applied_index
        try:
            request_id = self._rpc.send_request(leader, publish_batch.METHOD, args, blobs)
        except JsraftError:  # no link, or its queue is full: the router will find a way, or say why not
            return False
        lane.out += 1
        self._clients.start_soon(self._await_reply, stream, lane, batch, request_id)
        return True

    async def _await_reply(self, stream: str, lane: _Lane, batch: list[Item], request_id: int) -> None:
        try:
            result, _ = await self._rpc.reply(request_id, timeout_s=self._router.attempt_timeout_s)
        except (NotLeader, RpcRefused, NoLeader):  # refused whole, nothing queued: carry it again
            lane.slow = True
            self._requeue(stream, lane, batch)
        except JsraftError as error:
            for _, msg, _ in batch:
                self._answer_error(stream, msg, error)
        else:
            self._answer_batch(stream, lane, batch, result)
        finally:
            lane.out -= 1
            lane.changed.set()

    async def _carry(self, stream: str, lane: _Lane, batch: list[Item]) -> None:
        """One `msg.publish_batch` through `Node.call_stream` (which finds the leader and retries a batch
        refused whole), waited for."""
        args, blobs = _request(stream, batch)
        try:
            result, _ = await self._call_stream(stream, publish_batch.METHOD, args, blobs)
        except JsraftError as error:
            for _, msg, _ in batch:
                self._answer_error(stream, msg, error)
            return
        self._answer_batch(stream, lane, batch, result)

    def _answer_batch(self, stream: str, lane: _Lane, batch: list[Item], result: Any) -> None:
        """Answer each publish of `batch` from the leader's reply; those answered `_NOT_STORED` (not
        stored) go back to the lane, ahead of later ones, until their deadline."""
        outcomes = result.get("outcomes") if isinstance(result, dict) else None
        if not isinstance(outcomes, list) or len(outcomes) != len(batch):
            error = BadRequest(f"{publish_batch.METHOD}: {len(batch)} publishes, a malformed answer")
            for _, msg, _ in batch:
                self._answer_error(stream, msg, error)
            return
        leader = result.get("leader")
        lane.leader = leader if isinstance(leader, str) else None
        again: list[Item] = []
        for item, outcome in zip(batch, outcomes):
            decoded = publish_batch.decode_outcome(outcome)
            if isinstance(decoded, _NOT_STORED):
                again.append(item)
            elif isinstance(decoded, JsraftError):
                self._answer_error(stream, item[1], decoded)
            else:
                self._answer_outcome(stream, item[1], decoded)
        if again:
            lane.slow = True  # the leader we sent to no longer leads: let the router find the next
            self._requeue(stream, lane, again)

    def _requeue(self, stream: str, lane: _Lane, items: list[Item]) -> None:
        """Put `items` back into the lane in arrival order; past its deadline, a publish is answered."""
        now, keep = trio.current_time(), []
        for item in items:
            if item[2] > now:
                keep.append(item)
            else:
                self._answer_error(stream, item[1], NoLeader("no stream leader took the publish in time"))
        if keep:
            lane.items = collections.deque(heapq.merge(keep, lane.items, key=lambda item: item[0]))
            lane.changed.set()


_DUPLICATE = b',"duplicate":true'


@functools.lru_cache(maxsize=1024)
def _json_name(stream: str) -> bytes:
    return json.dumps(stream).encode()


def _request(stream: str, batch: list[Item]) -> tuple[dict[str, Any], list[bytes]]:
    blobs: list[bytes] = []
    for _, msg, _ in batch:
        blobs += (msg.headers or b"", msg.payload)
    return {"stream": stream, "subjects": [msg.subject for _, msg, _ in batch]}, blobs


def _take_batch(lane: _Lane) -> list[Item]:
    """The oldest publishes of `lane`, within `publish_batch`'s bounds (its invariant 3)."""
    items = lane.items
    batch = [items.popleft()]
    size = len(batch[0][1].payload)
    while items and len(batch) < publish_batch.PUBLISHES_MAX:
        msg = items[0][1]
        size += len(msg.payload) + len(msg.headers or b"")
        if size > publish_batch.BYTES_MAX:
            break
        batch.append(items.popleft())
    return batch
