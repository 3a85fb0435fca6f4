"""`PushLeading`: one push consumer as its leader runs it, and `serve_push`, the pass that sends its
messages to the deliver subject (layer L3½, synchronous).

Owns: per push consumer on the stream leader, the `ConsumerLeader` (inherited from `Leading`: the same
delivery bookkeeping as pull) and the `PushPacer` (consumer/push.py: flow control, idle heartbeats,
rate limit, replay original); the pass that turns what they allow into messages to the consumer's
`deliver_subject` — each seen by its subscriber on the stream message's subject, with the `$JS.ACK...`
reply — plus flow-control requests and idle heartbeats; and the ops to propose. `make_leading` picks
`Leading` or `PushLeading` for a consumer. No trio, no I/O: time and subject interest are arguments.

Invariants:
  1. Nothing is delivered (and no heartbeat sent) while no subscription anywhere in the cluster matches
     the deliver subject (nats-server delivers to a push consumer only while it has interest); the
     leader looks again every `INTEREST_POLL_NS` meanwhile. Interest keeps the consumer active (an
     ephemeral's `inactive_threshold` counts from when interest was last seen).
  2. A message is published once, to the deliver subject: with a `deliver_group` the subscription is a
     queue group and core NATS routing gives it to one member in the cluster.
  3. Bounded: `PUSH_ROUNDS_MAX` allowances per pass; when the pass stopped with more to give, `more`
     asks the service for another pass at once (other consumers' passes and acks come in between).
  4. Pull requests to a push consumer are answered `409 Consumer is push based` (its `WaitingQueue`).
  5. `sends_before_proposal`: a consumer with `ack_policy: none` or flow control has its messages sent
     as soon as they are decided, before their DELIVERED op is proposed (nats-server's
     `replicateDeliveries`: such deliveries are never held for the log). Nothing is lost by it: no ack
     can refer to them (ack none), or an ack reaches a later pass, whose ops follow this pass's in the log
     (one task, one proposal chain); a leader that fails before the op commits leaves the new leader
     to deliver them again (at-least-once, DESIGN §7). Holding them would put every delivery behind the
     proposal slots the publishes fill, so the deliveries trail the publish acks under load (issue #15).
  6. `keeps_up`: such a consumer with at most `APPLY_BACKLOG_MAX` messages left to deliver is served by
     the service as each MSGS entry applies on the leader — before the entry's publishes are answered —
     so a consumer that keeps up has each message on its way no later than its publish ack (nats-py's
     `test_ordered_consumer` counts the deliveries the moment the last ack is in). The bound keeps that
     work, which runs in the Ready cycle, in proportion to the messages just applied; a consumer further
     behind is served by the service's task.
  7. `watch`, when set, is called after every change of `interest` (a property: no write bypasses it),
     so whoever keeps the set of push consumers waiting for a subscriber (server `InterestWaits`) sees
     each one start and stop waiting.

Imports: stdlib, L0, L1 (`jsapi`), L2 (`store`), L3 (`consumer`), replica siblings (`consumer_pull`).
Reference: nats-server `server/consumer.go` (deliverMsg, sendIdleHeartbeat, sendFlowControl,
processFlowControl, loopAndGatherMsgs), ADR-15.
"""

from __future__ import annotations

from collections.abc import Callable

from jsraft.consumer import ConsumerEntry
from jsraft.consumer.ops import Op
from jsraft.consumer.push import FLOW_CONTROL_REQUEST, PushPacer
from jsraft.jsapi.consumer_config import AckPolicy
from jsraft.replica.consumer_pull import Leading, Send, _advisory
from jsraft.store.base import StreamStore

PUSH_ROUNDS_MAX = 64
APPLY_BACKLOG_MAX = 4096  # invariant 6: served as messages apply only when this close to the stream's end
INTEREST_POLL_NS = 100_000_000  # without interest, look again this often (invariant 1)


class PushLeading(Leading):
    """One push consumer while this node leads its stream."""

    def __init__(self, stream: str, entry: ConsumerEntry, now_ns: int, burst_bytes: int = 0, *, nonce: str) -> None:
        super().__init__(stream, entry, now_ns)
        config = entry.config
        assert config is not None and config.deliver_subject is not None
        self.deliver_subject = config.deliver_subject
        self.pacer = PushPacer(stream, entry.name, config, now_ns, nonce=nonce,
                               burst_bytes=burst_bytes)
        self._interest = False  # seen at the last pass (`interest`)
        # Called with this consumer whenever `interest` changes (invariant 7): the node's registry of push
        # consumers waiting for a subscriber follows every change, whichever code made it.
        self.watch: Callable[[PushLeading], None] | None = None
        self.looked_ns = now_ns  # when the last pass looked for interest
        self.more = False  # the last pass stopped with more to give (invariant 3)

    @property
    def interest(self) -> bool:
        """Whether the last pass saw a subscriber to `deliver_subject` (False until the first pass)."""
        return self._interest

    @interest.setter
    def interest(self, interest: bool) -> None:
        if interest != self._interest:
            self._interest = interest
            if self.watch is not None:
                self.watch(self)

    def refresh_config(self) -> None:
        super().refresh_config()
        config = self.entry.config
        if config is not None and config.deliver_subject is not None:
            self.deliver_subject = config.deliver_subject
            self.pacer.config = config

    def on_flow_control(self, subject: str) -> bool:
        return self.pacer.on_flow_control(subject)

    def inactive_due_ns(self) -> int | None:
        config = self.entry.config
        if config is None or config.inactive_threshold <= 0 or self.deleting or self.interest:
            return None
        return self.active_ns + config.inactive_threshold

    def next_due_ns(self) -> int | None:
        """The earliest time `serve_push` has something to do without a new input."""
        if not self.interest:
            times = [self.looked_ns + INTEREST_POLL_NS]  # invariant 1: look for a subscriber again
        elif self.more:
            return 0
        else:
            times = [t for t in (self.pacer.next_due_ns(), self.leader.next_deadline_ns()) if t is not None]
            if self.entry.paused_until_ns > self.looked_ns:
                times.append(self.entry.paused_until_ns)  # delivery resumes by itself when the pause ends
        inactive = self.inactive_due_ns()
        if inactive is not None:
            times.append(inactive)
        return min(times, default=None)


def sends_before_proposal(leading: Leading) -> bool:
    """Whether `leading`'s messages go out before their DELIVERED op is proposed (invariant 5)."""
    config = leading.entry.config
    return (type(leading) is PushLeading and config is not None
            and (config.flow_control or config.ack_policy is AckPolicy.none))


def keeps_up(leading: Leading, last_seq: int) -> bool:
    """Whether `leading` is served as messages apply (invariant 6): it sends before proposing, and at most
    `APPLY_BACKLOG_MAX` stream sequences up to `last_seq` are left to hand out."""
    return sends_before_proposal(leading) and last_seq - leading.leader.next_seq < APPLY_BACKLOG_MAX


def make_leading(stream: str, entry: ConsumerEntry, now_ns: int, burst_bytes: int = 0, *,
                 nonce: Callable[[], str]) -> Leading:
    """The leader-side runner for `entry`: push when it has a deliver subject (its pacer's flow-control
    subjects get a fresh `nonce()`), else pull."""
    config = entry.config
    if config is not None and config.deliver_subject is not None:
        return PushLeading(stream, entry, now_ns, burst_bytes, nonce=nonce())
    return Leading(stream, entry, now_ns)


def serve_push(leading: PushLeading, store: StreamStore, now_ns: int, interest: bool) -> tuple[list[Op], list[Send]]:
    """One pass of a push consumer (module invariants): the ops to propose, then what to send."""
    ops: list[Op] = []
    sends: list[Send] = []
    was_interested, leading.interest, leading.more = leading.interest, interest, False
    leading.looked_ns = now_ns
    if not interest:
        return ops, sends
    if not was_interested:
        # A subscriber (back) after a while without one: the idle clock starts now, not at the last send.
        leading.pacer.last_sent_ns = max(leading.pacer.last_sent_ns, now_ns - 1)
    leading.active_ns = now_ns
    pacer, leader, deliver = leading.pacer, leading.leader, leading.deliver_subject
    for _ in range(PUSH_ROUNDS_MAX):
        allowed = pacer.allowance(leader, store, now_ns)
        if allowed <= 0:
            break
        plan = leader.next_deliveries(store, now_ns, allowed)
        ops.extend(plan.ops)
        sends.extend(_advisory(leading, seq, count, now_ns) for seq, count in plan.gave_up)
        if not plan.deliveries:
            break
        for delivery in plan.deliveries:
            sends.append(Send(deliver, delivery.payload, delivery.reply_subject, delivery.headers or None,
                              delivery.subject))
            fc_reply = pacer.on_sent(delivery.size, delivery.timestamp_ns, delivery.delivery_count == 1, now_ns)
            if fc_reply is not None:
                sends.append(Send(deliver, b"", fc_reply, FLOW_CONTROL_REQUEST))
        leading.delivered_ns = now_ns
    else:
        leading.more = True
    heartbeat = pacer.heartbeat(now_ns, leader.next_consumer_seq - 1, leader.next_seq - 1)
    if heartbeat is not None:
        sends.append(Send(deliver, b"", None, heartbeat))
    return ops, sends
