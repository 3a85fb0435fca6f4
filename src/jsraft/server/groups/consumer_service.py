"""`ConsumerService`: the consumers of one stream, led by this node while it leads the stream (layer L5).

Owns: following the stream's leadership (a `Leading` per pull consumer and a `PushLeading` per push
consumer — `consumer_push` — built from the replicated state when the replica builds its `StreamLeader`,
dropped — waiting requests answered `409 Leadership Change` — when it drops it), the task that serves
waiting pull requests, push deliveries and their pacing, redeliveries, request expiry, idle heartbeats
and ephemeral inactivity (a trio timer on the earliest of them), the acks and push flow-control answers
(`$JS.FC...`) handed in by the node's consumer hub (batched into ACK / TERM / DELIVERED ops by
`consumer_acks`; a double ack is answered only once its op committed), and the leader's side of
consumer create / delete / info (`consumer_admin`). Its `ConsumerEvents` (consumer_events) queues the consumer advisories and ack metrics
the leader raises; the task publishes them, and its timer also wakes when a pause in force runs out.

Proposals share the replica's proposal chain (its `_propose_lock` and `_submit`, stream_replica
invariant 2), so CONSUMER entries enter the stream log in the order they were decided, between the
publishes. A pass proposes its ops *before* it sends what they decided — but a push consumer with ack
none or flow control sends as the pass decides (consumer_push invariant 5), and a pull pass sends its
runs as it reads them (invariant 7). Either way an ack can only follow its message's DELIVERED op in the
log (DESIGN §7): acks become ops only at the start of a pass (`take_acks`), and a pass proposes its ops
before it ends.

Invariants:
  1. `leading` is non-empty only while `built_for` is the replica's current `StreamLeader`; every
     `Leading` was built when every entry of the log had applied (stream_replica invariant 1), so it
     starts from the complete replicated state (consumer/delivery.py: rebuild after an election).
  2. A failed proposal drops the replica's `StreamLeader` (its in-flight view is wrong) and with it this
     service's leading state; what was sent but never committed is delivered again (at-least-once).
  3. Nothing the client port sends is sent from inside the Raft apply path (the listener records and
     wakes the task, which sends) but by a push consumer that keeps up (consumer_push invariant 6): as
     a MSGS entry applies here, its messages go out before the entry's publishes are answered; the
     ops wait in `_applied_ops` for the task, which proposes them ahead of its own pass's.
  4. Bounded: `consumer_acks.ACKS_QUEUED_MAX` acks wait for a pass (beyond it one is dropped and counted: the
     message is redelivered, as for a lost ack in NATS), `OPS_PER_ENTRY` ops per entry.
  5. A reader that waits for `settled()` (consumer info) sees no cursor ahead of the messages sent and
     no ack handed in before it left out: a pass decides its deliveries (moving the cursors) before its
     proposal's checkpoints and publishes them after, so `settled()` waits for the pass running now to
     end — and for the next one when acks or hand-outs made as messages applied (invariant 3) wait for
     it — before the proposal barrier. Else an info could say 0 pending while those messages were
     unsent, and reach the client before them.
  6. A consumer created here delivers nothing before its create is answered (`hold` .. `release`): a
     client that subscribed first (nats-py's ordered consumer after a reset) learns the new name before
     its messages, so its next consumer info does not ask for the old consumer.
  7. A pull consumer's pass goes in runs (consumer_pull invariant 6): each run's messages go to the
     client's socket at once, before the next run is read, and their ops join the pass's one proposal at
     its end (one CONSUMER entry a pass, as without runs). An ack of them is taken by a later pass, after
     that proposal; if it fails, they are delivered again (invariant 2: at-least-once). `RUNS_PER_PASS`
     runs are sent so; the pass's last goes with its other sends.

  8. The DELIVERED ops of a consumer with `ack_policy: none` (its messages went out as decided: consumer_push
     invariant 5) may wait up to `DEFER_DELIVERED_NS` for the next proposal instead of making a CONSUMER
     entry of their own after every pass (`ConsumerProposals._defer`): with a KV watcher or an ordered
     consumer on a stream each publish was followed by such an entry, a Ready cycle and its fsyncs of
     its own, which the next publish waited behind (nats-py's put + watch: 1.7 ms a put against 1.0
     without the watcher; 3.4 fsyncs a put against 2). One op per consumer is held, its latest record
     (which sets its cursors: consumer `delivery` rule 8). They go into the log first with whatever is
     proposed next (any op: `propose` takes them first, so the log keeps their order and a consumer's
     DELETE or a later pass's ops never overtake them), when a reader waits (`settled`: consumer info
     sees them), or when the oldest is due (the service's timer). No ack can refer to them, so nothing
     waits on them; a leader that fails first leaves the new one to deliver those messages again (the
     at-least-once of invariant 2; nats-server keeps an ordered consumer in memory on one server only).
  9. The node's `InterestWaits` (the hub's `waits`) holds this service's push consumers without
     interest, and only while the replica is open: each leader `_leading_for` makes is noted and
     watched (its every change of interest is noted), each change of `leading`'s membership resyncs the
     service's entries (`_note_waits()`), and the task's end (the replica closed) forgets them.

Imports: stdlib, L0, L1 (`raft` errors), L3 (`consumer`, `stream`), trio, server siblings.
Reference: DESIGN.md §7; nats-server `server/consumer.go` (processAck, processNak, processTerm).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from jsraft.consumer import CONSUMER_DELETED, LEADERSHIP_CHANGE, ApplyResult, DeleteOp
from jsraft.consumer.ops import Op
from jsraft.errors import JsraftError
from jsraft.raft.errors import NotLeader
from jsraft.runtime.proposals import Proposal
from jsraft.server.groups.consumer_acks import Ack, AckQueue, take_acks
from jsraft.server.groups.consumer_errors import ConsumerNotFound
from jsraft.server.groups.consumer_proposals import ConsumerProposals
from jsraft.replica.consumer_events import ConsumerEvents
from jsraft.replica.consumer_pull import RUN_FIRST, RUN_GROWTH, Leading, Send, serve_run, status_send
from jsraft.replica.consumer_push import PushLeading, keeps_up, make_leading, sends_before_proposal, serve_push
from jsraft.stream import StreamLeader

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.consumers")
RUNS_PER_PASS = 4  # runs sent at once in a pass (invariant 7: 128, 512, 2,048, 8,192), then its last and the next pass
Publish = Callable[[Send], Any]


def _drop(send: Send) -> None:
    log.debug("consumer message to %s not sent: no client port attached", send.subject)


class ConsumerService(ConsumerProposals):
    def __init__(self, replica: "StreamReplica") -> None:
        self.replica = replica
        self.stream = replica.name
        self.leading: dict[str, Leading] = {}
        self.built_for: StreamLeader | None = None
        self.publish: Publish = _drop  # the node's client port, attached by the hub with each request
        # The node's consumer hub (set by the stream manager): push consumers publish through it without
        # any request, and ask it whether a deliver subject has a subscriber (consumer_push invariant 1).
        self.port: Any = None
        self.acks = AckQueue(self.stream)  # handed in by the hub, taken by the next pass
        self._outbox: list[Send] = []  # invariant 3: sent by the task
        self._applied_ops: list[Op] = []  # invariant 3: decided as messages applied, proposed by the task
        self._deferred: list[Op] = []  # invariant 8
        self._deferred_since_ns, self._flush_deferred = 0, False
        self._unanswered: set[str] = set()  # consumers whose create answer is not out yet (invariant 6)
        self._last: Proposal | None = None  # the last consumer proposal (the info barrier waits for it)
        self._passes_started = 0  # passes of the task begun, and ended (invariant 5)
        self._passes_ended = 0
        self._pass_ended = trio.Event()  # set (and replaced) as each pass ends
        self._wake = trio.Event()
        self.events = ConsumerEvents(self.stream, replica.repair.advisories, leader=replica.node_id,
                                     peers=lambda: replica.peers)  # advisories and ack metrics

    def now_ns(self) -> int:
        """Wall time for deliveries, ack deadlines and pauses: the node's steady wall clock (the one its
        messages are stamped with, runtime/clock.py invariant 3), so a stepped clock does not make every
        pending delivery due at once or never."""
        return self.replica.runtime.clock.wall_ns()

    # --- Leadership (invariant 1) ----------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.built_for is not None and self.built_for is self.replica.leader

    def follow(self, leader: StreamLeader | None) -> None:
        """Called by the replica whenever it may have built or dropped its `StreamLeader`; O(1) if not."""
        if leader is self.built_for:
            return
        if leader is None:
            self._step_down()
            return
        # A new StreamLeader while this node still leads (the last one was dropped after a failed
        # proposal): the bookkeeping restarts from the replicated state, the waiting requests stay.
        queues = {name: leading.queue for name, leading in self.leading.items()}
        self._build(leader)
        for name, queue in queues.items():
            if name in self.leading:
                self.leading[name].queue = queue
                self.leading[name].refresh_config()

    def _build(self, leader: StreamLeader) -> None:
        adapter = self.replica.adapter
        assert adapter is not None
        adapter.consumers.listener = self._on_applied
        now_ns = self.now_ns()
        self.leading = {name: self._leading_for(entry, now_ns)
                        for name, entry in adapter.consumers.entries.items() if entry.config is not None}
        self._applied_ops.clear()  # decided by the dropped StreamLeader's bookkeeping: delivered again
        self._deferred.clear()
        self.built_for = leader
        self._note_waits()  # invariant 9: the dropped table's consumers no longer wait here
        self.events.on_elected(self.leading, now_ns)
        self.wake()

    def _step_down(self) -> None:
        for leading in self.leading.values():
            self._outbox.extend(status_send(reply, status) for reply, status in leading.queue.drain(LEADERSHIP_CHANGE))
        self.leading = {}
        self._note_waits()  # invariant 9
        self.built_for = None
        self.acks.take()  # not proposed: the new leader redelivers those messages (at-least-once)
        self._applied_ops.clear()
        self._deferred.clear()
        self.wake()

    def _on_applied(self, index: int, applied: ApplyResult | None) -> None:
        """consumer_replica's listener (invariant 3: record and wake only)."""
        if self.built_for is None:
            return
        if applied is not None:
            consumers = self.replica.adapter.consumers.entries  # type: ignore[union-attr]
            for name in applied.created + applied.updated:
                entry = consumers.get(name)
                leading = self.leading.get(name)
                if leading is not None and leading.entry is entry:
                    leading.refresh_config()
                elif entry is not None and entry.config is not None:
                    self.leading[name] = self._leading_for(entry, self.now_ns())
            for name in applied.deleted:
                gone = self.leading.pop(name, None)
                if gone is not None:
                    self._outbox.extend(status_send(r, s) for r, s in gone.queue.drain(CONSUMER_DELETED))
            if applied.created or applied.updated or applied.deleted:
                self._note_waits()  # invariant 9: consumers created, replaced or deleted
            self.events.on_applied(applied, consumers, self.now_ns())
            self.wake()
        elif any(len(leading.queue) or type(leading) is PushLeading for leading in self.leading.values()):
            self._serve_applied()
            self.wake()  # new messages: a waiting pull request or a push consumer takes them (off the publish path)

    def _serve_applied(self) -> None:
        """Invariant 3's exception: the push consumers that keep up take the messages just applied."""
        port, adapter = self.port, self.replica.adapter
        if port is None or adapter is None or not self.active or self.replica.stopped_reason is not None:
            return
        last_seq, now_ns = adapter.consumers.machine.last_seq, self.now_ns()
        for leading in self.leading.values():
            if type(leading) is not PushLeading or not keeps_up(leading, last_seq) or leading.name in self._unanswered:
                continue
            try:
                ops, sends = serve_push(leading, self.replica.store, now_ns, self._interest(leading.deliver_subject))
            except JsraftError:  # a damaged record: left to the task's pass, which meets it and says so
                continue
            self._applied_ops.extend(ops)
            self._publish_many(sends, port.publish)

    def _leading_for(self, entry: Any, now_ns: int) -> Leading:
        """The one factory of this service's leaders: a push one is noted waiting and watched (invariant 9)."""
        leading = make_leading(self.stream, entry, now_ns, burst_bytes=max(self.replica.config.max_msg_size, 0),
                               nonce=lambda: os.urandom(6).hex())
        if type(leading) is PushLeading:
            leading.watch = self._note_waits
            self._note_waits(leading)
        return leading

    def _note_waits(self, leading: PushLeading | None = None) -> None:
        """Invariant 9: `leading` was made or its interest changed; without it, `leading`'s membership changed."""
        waits = getattr(self.port, "waits", None)  # the node's registry (the hub's); none once the replica closed
        if waits is None or self.replica.closed:
            return
        if leading is None:
            waits.sync(self)
        else:
            waits.note(self, leading)

    def _interest(self, subject: str) -> bool:
        return self.port is not None and self.port.has_interest(subject)

    def wake(self) -> None:
        self._wake.set()

    def hold(self, name: str) -> None:
        self._unanswered.add(name)  # consumer `name`, created now, delivers nothing before its answer (invariant 6)

    def release(self, name: str) -> None:
        self._unanswered.discard(name)  # its create answer is going out: it may deliver (invariant 6)
        self.wake()

    def restart_from_state(self, name: str) -> None:
        """Rebuild consumer `name`'s leading bookkeeping from its replicated state (after a SKIP this node
        proposed for a restore moved it); its waiting requests stay."""
        leading, entry = self.leading.get(name), self.replica.adapter.consumers.entries.get(name)  # type: ignore[union-attr]
        if leading is not None and entry is not None and entry.config is not None:
            self.leading[name] = self._leading_for(entry, self.now_ns())
            self.leading[name].queue = leading.queue
            self._note_waits()  # invariant 9: the replaced leader no longer waits
        self.wake()

    def require(self, name: str | None = None) -> Leading | None:
        """`NotLeader` unless leading; with `name`, its `Leading` or `ConsumerNotFound`."""
        if not self.active:
            raise NotLeader(self.replica.leader_id())
        if name is None:
            return None
        leading = self.leading.get(name)
        if leading is None:
            raise ConsumerNotFound()
        return leading

    # --- Inputs from the hub (synchronous) ---------------------------------------------------------------

    def pull(self, name: str, reply: str, payload: bytes, publish: Publish) -> None:
        """A pull request for consumer `name`, answered on `reply` (by this call or by the task)."""
        self.publish = publish
        leading = self.require(name)
        assert leading is not None
        now_ns = self.now_ns()
        answer = leading.pull(reply, payload, self.replica.store, now_ns)
        if answer is not None:
            publish(answer)
        else:
            self.wake()

    def on_acks(self, acks: list[Ack], publish: Publish) -> None:
        """`on_ack` of each of `acks`, in order, with one wake."""
        self.publish = publish
        if self.acks.put_all(acks):
            self.wake()

    def on_ack(self, ack: Ack, publish: Publish) -> None:
        """One ack from the hub, for the next pass (invariant 4: beyond the bound it is dropped and counted)."""
        self.publish = publish
        if self.acks.put(ack):
            self.wake()

    # --- The task ----------------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while True:
                event = self._wake
                due_ns = self._next_due_ns()
                if due_ns is None:
                    await event.wait()
                else:
                    with trio.move_on_after(max(due_ns - self.now_ns(), 0) / 1e9):
                        await event.wait()
                self._wake = trio.Event()
                self._passes_started += 1
                await self._turn()
                self._passes_ended += 1
                self._pass_ended.set()
                self._pass_ended = trio.Event()
        finally:
            if (waits := getattr(self.port, "waits", None)) is not None:
                waits.forget(self)  # invariant 9: the replica closed (its tasks end only then)

    def _next_due_ns(self) -> int | None:
        dues = [due for leading in self.leading.values() if (due := leading.next_due_ns()) is not None]
        dues += [due] if (due := self.deferred_due_ns()) is not None else []  # invariant 8
        pause_end_ns = self.events.pause_due_ns(self.leading.values(), self.now_ns())  # delivery resumes then
        return min(dues + ([pause_end_ns] if pause_end_ns is not None else []), default=None)

    async def _turn(self) -> None:
        if self.acks.needs_state:
            # A NAK delay or a progress note applies to a delivery the replicated state holds: let the
            # deliveries proposed so far commit first (the client may ack faster than the log commits).
            # Plain acks and terms need no wait: their ops follow the DELIVERED ops in the log anyway.
            await self._proposals_settled()
        self.replica._follow_leadership()  # builds a new StreamLeader at once if one is due; calls follow
        if self.port is not None:
            self.publish = self.port.publish
        self._flush_outbox()
        self.events.flush()
        if not self.active or self.replica.stopped_reason is not None:  # stream_replica invariant 6
            return
        now_ns = self.now_ns()
        self.events.expire_pauses(self.leading, now_ns)
        ops, self._applied_ops = self._applied_ops, []  # before this pass's: decided (and sent) earlier
        sends: list[Send] = []
        confirm: list[str] = []
        acks = self.acks.take()
        take_acks(acks, self.stream, self.leading, self.replica.store, self.events, now_ns, ops, sends, confirm)
        store = self.replica.store
        for leading in list(self.leading.values()):
            if leading.name in self._unanswered:
                continue  # invariant 6
            try:
                if type(leading) is PushLeading:
                    served_ops, served = serve_push(leading, store, now_ns, self._interest(leading.deliver_subject))
                    if sends_before_proposal(leading):  # consumer_push invariant 5
                        self._publish_many(served)
                        served = []
                else:
                    interest = getattr(self.port, "has_reply_interest", None)
                    run = RUN_FIRST
                    served_ops, served, more = serve_run(leading, store, now_ns, interest, run)
                    for _ in range(RUNS_PER_PASS):  # invariant 7
                        if not more:
                            break
                        ops += served_ops
                        self._publish_many(served, now=True)
                        run *= RUN_GROWTH
                        served_ops, served, more = serve_run(leading, store, now_ns, interest, run)
                    if more:
                        self.wake()
            except JsraftError as error:  # a damaged record met on the way: the repair worker sees it too
                log.warning("stream %s: consumer %s not served: %s", self.stream, leading.name, error)
                continue
            ops.extend(served_ops)
            sends.extend(served)
            due = leading.inactive_due_ns()
            if due is not None and due <= now_ns:
                log.info("stream %s: consumer %s inactive: deleting it", self.stream, leading.name)
                leading.deleting = True
                ops.append(DeleteOp(name=leading.name))
        await self._propose_and_send(self._defer(ops, now_ns), sends, confirm)
        self.events.flush()

    def _publish_many(self, sends: list[Send], publish: Callable[[Send], None] | None = None, now: bool = False) -> None:
        """`sends` in order via `publish` (default: the service's); as runs when it is the port's (hub
        invariant 6), and then at once with `now` (ClientConn invariant 10)."""
        publish = publish or self.publish
        if getattr(self.port, "publish_all", None) is not None and publish == self.port.publish:
            return self.port.publish_all(sends, now=now)
        for send in sends:
            publish(send)

    def _flush_outbox(self) -> None:
        outbox, self._outbox = self._outbox, []
        self._publish_many(outbox)
