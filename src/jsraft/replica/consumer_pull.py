"""`Leading`: one pull consumer as its leader runs it — the delivery bookkeeping and the waiting pull
requests — and `serve`, which matches waiting requests with messages (layer L3½, synchronous).

Owns: per consumer, the `ConsumerLeader` (consumer/delivery.py) and the `WaitingQueue` (consumer/pull.py)
of this leader, when the consumer was last active (ephemeral `inactive_threshold`) and last delivered and
acked to (consumer info's `last_active`); and the pass that turns waiting requests into what to send —
messages to each request's reply subject with their `$JS.ACK...` reply subject, then `404`/`408`/`409`
statuses — and the ops to propose (DELIVERED, TERM, SKIP). The service (`consumer_service`) proposes a
pass's ops before the pass ends and takes acks only at the start of a pass, so an ack of a delivered
message always follows its DELIVERED op in the log. No trio, no I/O: time is an argument; what to send
is returned.

Invariants:
  1. Requests are served in arrival order (FIFO); a request is answered once with a terminal status, or
     fulfilled, or expired (pull.py invariant 1). A `no_wait` request that found the stream at its end
     is answered `404 No Messages` in the same pass.
  2. A message goes to at most one request per pass, and `serve` delivers nothing while the consumer's
     leader is paused (delivery.py rule 5).
  3. A request replaces a queued one with the same reply subject (see `Leading.pull`).
  4. `MAX_DELIVERIES` advisories are returned for every message given up (nats-server
     `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`).
  5. A message is never delivered to a request whose reply subject nobody listens on any more (its
     client unsubscribed): when there is something to deliver, such a request is dropped unanswered and
     the message stays pending (`num_pending` counts it), as nats-server's `getNextWaiting` does.
  6. `serve_run` hands over at most `budget` messages and says whether requests were left waiting for
     more: the service sends each run before it reads the next, so a large fetch's first messages
     reach the client while the rest are read (as nats-server's per-message delivery loop), and the
     client parses them meanwhile. Only a pass's last run ends requests for want of messages (no_wait
     `404`): a run that stopped on its budget does not.

Imports: stdlib, L0, L2 (`store`), L3 (`consumer`), L1 (`jsapi`: `rfc3339`). Reference: nats-server
`server/consumer.go` (processNextMsgRequest, processWaiting, getNextMsg, notifyDeliveryExceeded).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from jsraft.consumer import ConsumerEntry, ConsumerLeader, Status, WaitingQueue
from jsraft.consumer.ops import Op
from jsraft.consumer.pull import PullRequest
from jsraft.errors import NoMessageFound
from jsraft.jsapi.consumer_config import rfc3339
from jsraft.store.base import StreamStore

MAX_DELIVERIES_TYPE = "io.nats.jetstream.advisory.v1.max_deliver"
ADVISORY_PREFIX = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
SERVE_ROUNDS_MAX = 256  # plans made in one pass of one consumer: bounds the work of a pass
DELIVER_BATCH_MAX = 256  # messages per plan (a DELIVERED op stays far below RECORDS_PER_OP_MAX)
# Messages in a pass's first run (invariant 6): ~0.8 ms here, ~5 ms of nats-py's parse. A fetch of up to
# this many leaves in one write, as the burst nats-server's loop sends: clients' pending limits count on
# it (nats-py's test_pull_subscribe_limits: a 50-message limit must drop part of a fetch of 100).
RUN_FIRST = 128
RUN_GROWTH = 4  # each next run is this many times the last: this loop reads a message in ~5-7 us, nats-py
# parses one in ~40, so the next run is ready before the last is parsed, with few runs (each costs a
# write and a call: 128 + 372 for a fetch of 500)


class Send(NamedTuple):
    """One message to publish from the node: `payload` to `subject`, with `reply` and a header block;
    a delivery is seen by its subscriber on `shown`, the stream message's subject (as from nats-server)."""

    subject: str
    payload: bytes
    reply: str | None = None
    headers: bytes | None = None
    shown: str | None = None


def status_send(reply: str, status: Status) -> Send:
    return Send(reply, b"", None, status.encode())


class Leading:
    """One consumer while this node leads its stream."""

    def __init__(self, stream: str, entry: ConsumerEntry, now_ns: int) -> None:
        self.stream = stream
        self.entry = entry
        self.leader = ConsumerLeader(stream, entry, now_ns)
        self.queue = WaitingQueue(entry.config)  # type: ignore[arg-type]
        self.active_ns = now_ns  # the last pull request or ack (inactive_threshold counts from here)
        self.delivered_ns = 0  # the last delivery (consumer info `delivered.last_active`)
        self.acked_ns = 0  # the last ack (consumer info `ack_floor.last_active`)
        self.deleting = False  # an inactivity DELETE was proposed

    @property
    def name(self) -> str:
        return self.entry.name

    def refresh_config(self) -> None:
        """The consumer was updated (a CREATE with another config applied): its queue follows the config."""
        if self.entry.config is not None:
            self.queue.config = self.entry.config

    def available(self, store: StreamStore, now_ns: int) -> bool:
        """Whether it could deliver something now: a due redelivery, or a new message after its cursor
        (one lookup, not a count: this runs for every pull request)."""
        leader = self.leader
        if leader.redeliver or any(deadline <= now_ns for deadline in leader.deadlines.values()):
            return True
        try:
            store.load_next(list(leader.config.filters) or None, leader.next_seq)
        except NoMessageFound:
            return False
        return True

    def pull(self, reply: str, payload: bytes, store: StreamStore, now_ns: int) -> Send | None:
        """Queue one pull request; a status to send at once instead when nats-server answers at once."""
        self.active_ns = now_ns
        # nats-py sends every fetch of a subscription with one reply subject: the queue keeps each request,
        # as nats-server's waitQueue does (consumer/pull.py invariant 3).
        status = self.queue.submit(reply, payload, now_ns, int(self.available(store, now_ns)))
        return status_send(reply, status) if status is not None else None

    def inactive_due_ns(self) -> int | None:
        """When an inactive consumer is to be deleted (None: never, or requests are waiting)."""
        config = self.entry.config
        if config is None or config.inactive_threshold <= 0 or len(self.queue) or self.deleting:
            return None
        return self.active_ns + config.inactive_threshold

    def next_due_ns(self) -> int | None:
        """The earliest time `serve` has something to do without a new input (None: nothing)."""
        times = [r.expires_ns for r in self.queue if r.expires_ns]
        times += [r.next_heartbeat_ns for r in self.queue if r.idle_heartbeat_ns]
        if len(self.queue):
            redelivery = self.leader.next_deadline_ns()
            if redelivery is not None:
                times.append(redelivery)
        inactive = self.inactive_due_ns()
        if inactive is not None:
            times.append(inactive)
        return min(times, default=None)


def serve(leading: Leading, store: StreamStore, now_ns: int,
          interested: Callable[[str], bool] | None = None) -> tuple[list[Op], list[Send]]:
    """One pass over `leading`'s waiting requests (module invariants): the ops to propose, then what to
    send. `interested(reply)`: whether a subscription still listens on a request's reply subject (None:
    every one is taken to; invariant 5)."""
    ops, sends, _ = serve_run(leading, store, now_ns, interested)
    return ops, sends


def serve_run(leading: Leading, store: StreamStore, now_ns: int, interested: Callable[[str], bool] | None = None,
              budget: int | None = None) -> tuple[list[Op], list[Send], bool]:
    """`serve`, handing over at most `budget` messages (None: no bound); also whether it stopped on the
    budget with requests still waiting, to be served by the next call (invariant 6)."""
    ops: list[Op] = []
    sends: list[Send] = []
    queue, leader = leading.queue, leading.leader
    more = False
    for _ in range(SERVE_ROUNDS_MAX):
        request = queue.head()
        if request is None:
            break
        if budget is not None and budget <= 0:
            more = True
            break
        if interested is not None and not interested(request.reply) and leading.available(store, now_ns):
            queue.drop(request)  # invariant 5: what it would take stays pending for the next request
            continue
        # A batch of 0 (nats-server takes it as sent) still gets one message, which ends the request.
        limit = min(max(request.batch, 1), DELIVER_BATCH_MAX)
        plan = leader.next_deliveries(store, now_ns, limit if budget is None else min(limit, budget),
                                      request.max_bytes)
        ops.extend(plan.ops)
        sends.extend(_advisory(leading, seq, count, now_ns) for seq, count in plan.gave_up)
        if plan.too_large:
            sends.append(status_send(request.reply, queue.too_large(request)))
            continue
        if not plan.deliveries:
            break
        _deliver(leading, request, plan.deliveries, sends, now_ns)
        if budget is not None:
            budget -= len(plan.deliveries)
    # Stopped with a request left and not on the budget: nothing more to give now.
    at_end = not more and queue.head() is not None
    sends.extend(status_send(reply, status) for reply, status in queue.expire(now_ns, end_of_stream=at_end))
    state = leading.entry.state
    sends.extend(status_send(reply, status) for reply, status in
                 queue.heartbeats(now_ns, state.delivered_consumer_seq, state.delivered_stream_seq))
    return ops, sends, more


def _deliver(leading: Leading, request: PullRequest, deliveries: list[Any], sends: list[Send], now_ns: int) -> None:
    reply = request.reply
    sends.extend([Send(reply, d.payload, d.reply_subject, d.headers or None, d.subject) for d in deliveries])
    # One plan fits the request's batch and bytes (delivery.py `_fits`): only its last message can end it.
    status = leading.queue.delivered(request, sum(d.size for d in deliveries), len(deliveries))
    if status is not None:
        sends.append(status_send(reply, status))
    leading.delivered_ns = now_ns


def _advisory(leading: Leading, seq: int, deliveries: int, now_ns: int) -> Send:
    """nats-server `JSConsumerDeliveryExceededAdvisory`."""
    body = {"type": MAX_DELIVERIES_TYPE, "id": uuid.uuid4().hex, "timestamp": rfc3339(now_ns),
            "stream": leading.stream, "consumer": leading.name, "stream_seq": seq, "deliveries": deliveries}
    subject = f"{ADVISORY_PREFIX}.{leading.stream}.{leading.name}"
    return Send(subject, json.dumps(body, separators=(",", ":")).encode())
