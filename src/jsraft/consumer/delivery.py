"""The consumer leader's delivery decisions: pure, given a store, a clock reading and its bookkeeping (L3).

Owns: `ConsumerLeader`, the leader-only bookkeeping of one consumer (ack deadlines, the redelivery
queue, the next stream seq and consumer seq to hand out) and `next_deliveries`, which chooses what to
deliver now and returns the DELIVERED op to propose with the messages to send. Also the leader's
reactions to acks it receives (`nak`, `progress`), which return DELIVERED records to propose when the
change must survive a failover (a NAK delay, a `+WPI`), as nats-server replicates them.

Rules (nats-server `consumer.go` getNextMsg / checkPending / hasMaxDeliveries):
  1. Redeliveries first, in stream-seq order, once `ack_wait` — or `backoff[min(count - 1, len - 1)]` —
     has passed since the last delivery; a message that already had `max_deliver` deliveries is given up
     (a DELIVERED record with count `max_deliver + 1`, reported for the MAX_DELIVERIES advisory).
  2. New messages after that, matching the filters, from the deliver-policy start (`position`), while
     fewer than `max_ack_pending` are pending (counting deliveries proposed but not yet committed).
  3. `last_per_subject`: up to the stream's last seq at creation only the last message of each subject.
  4. A pending message that is gone from the store is terminated (a TERM op), never delivered.
  5. Nothing is delivered while the consumer is paused (`pause_until` in the future).
  6. Nothing is delivered or terminated from a store that knows of damage (`faults()`), and a read that
     finds damage ends the pass with that message still pending or not yet delivered: such a replica
     cannot tell a message that is gone from one it lost, so it waits for its repair (or hands its
     leadership over) instead of terminating or skipping a message its peers still hold.
  7. The num_pending a pass puts in its reply subjects is `position.num_pending` above the cursor, exactly.
     The leader keeps the count a pass ended with; the next pass, on the same store with the same filters
     and cursor and no store `changes` since (base invariant 7), adds the messages appended since instead
     of counting again (a filtered count walks the shorter side of the cursor: half the stream, per pass).
  8. With `ack_policy: none` a pass's DELIVERED op carries only its last record: such a consumer keeps no
     pending messages, only its cursors, and the last record of a pass (whose records rise in both
     sequences) sets them to where all of them would, releasing the same stream range
     (`ConsumerState.apply_delivered`) — the rest was a record per message to encode, replicate and apply.
After an election `ConsumerLeader.rebuild` starts from the replicated state: every pending message gets
a fresh full deadline (a new leader cannot trust another node's clock), and delivery continues after
`delivered`; deliveries the old leader sent but never committed are simply sent again (at-least-once).

Imports: L0, L1 (`jsapi`), L2 (`store`), this package. Reference: DESIGN.md §7.
"""

from __future__ import annotations

from jsraft.consumer.acks import ack_reply_prefix
from jsraft.consumer.machine import ConsumerEntry
from jsraft.consumer.ops import DeliveredOp, SkipOp, TermOp
from jsraft.consumer.position import is_last_at_start, num_pending
from jsraft.errors import DamagedSequence, NoMessageFound, invariant
from jsraft.jsapi.consumer_config import AckPolicy, ConsumerConfig, DeliverPolicy
from jsraft.store.base import StreamStore, msg_size

_HEADER_LINE = b"NATS/1.0\r\n"


class Delivery:
    """One message to send (plain slotted class: one per delivered message, DESIGN §12)."""

    __slots__ = ("stream_seq", "consumer_seq", "delivery_count", "subject", "headers", "payload",
                 "timestamp_ns", "num_pending", "reply_subject", "size")

    def __init__(self, stream_seq: int, consumer_seq: int, delivery_count: int, subject: str, headers: bytes,
                 payload: bytes, timestamp_ns: int, num_pending: int, reply_subject: str, size: int) -> None:
        self.stream_seq, self.consumer_seq, self.delivery_count = stream_seq, consumer_seq, delivery_count
        self.subject, self.headers, self.payload = subject, headers, payload
        self.timestamp_ns, self.num_pending, self.reply_subject, self.size = timestamp_ns, num_pending, reply_subject, size

    def __repr__(self) -> str:
        return f"Delivery(sseq={self.stream_seq}, cseq={self.consumer_seq}, dc={self.delivery_count})"


class DeliveryPlan:
    """What `next_deliveries` decided: propose `ops`, send `deliveries`, advise `gave_up`."""

    __slots__ = ("deliveries", "ops", "gave_up", "too_large")

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.ops: list[DeliveredOp | TermOp | SkipOp] = []
        self.gave_up: list[tuple[int, int]] = []  # (stream_seq, deliveries) for the MAX_DELIVERIES advisory
        self.too_large = False  # the next message alone exceeds the request's max_bytes (409 for pull)


def headers_only(headers: bytes, payload_len: int) -> bytes:
    """The headers of a `headers_only` delivery: the message's, plus `Nats-Msg-Size`."""
    line = f"Nats-Msg-Size: {payload_len}\r\n".encode()
    if not headers:
        return _HEADER_LINE + line + b"\r\n"
    body = headers[:-2] if headers.endswith(b"\r\n\r\n") else headers + b"\r\n"
    return body + line + b"\r\n"


class ConsumerLeader:
    """Leader-only bookkeeping of one consumer. Rebuilt from replicated state on every election."""

    def __init__(self, stream: str, entry: ConsumerEntry, now_ns: int) -> None:
        invariant(entry.config is not None, "an offline consumer has no leader")
        self.stream = stream
        self.entry = entry
        self.ack_prefix = ack_reply_prefix(stream, entry.name)  # each delivery's reply subject starts so
        self.deadlines: dict[int, int] = {}  # stream_seq -> when to redeliver (ns); pending on this leader
        self.redeliver: dict[int, None] = {}  # ordered set: stream seqs due for redelivery
        self.rebuild(now_ns)

    @property
    def config(self) -> ConsumerConfig:
        return self.entry.config  # type: ignore[return-value]

    def rebuild(self, now_ns: int) -> None:
        state = self.entry.state
        self.next_seq = state.delivered_stream_seq + 1
        self.next_consumer_seq = state.delivered_consumer_seq + 1
        self.deadlines = {seq: now_ns + self.wait_ns(self.delivery_count(seq)) for seq in state.pending}
        self.redeliver = {}
        self._skipped_to = 0
        self._pending_at: tuple | None = None  # rule 7: (store, changes, last_seq, cursor, filters, count)
        self._pending_key: tuple = ()
        self._pending_left = 0

    def delivery_count(self, seq: int) -> int:
        return self.entry.state.redelivered.get(seq, 0) + 1

    def wait_ns(self, delivery_count: int) -> int:
        backoff = self.config.backoff
        if backoff:
            return backoff[min(max(delivery_count - 1, 0), len(backoff) - 1)]
        return self.config.ack_wait

    # --- reactions to acks (the ack itself is proposed by the caller as an ACK/TERM op) ----------

    def forget(self, seqs: list[int]) -> None:
        """Acked or terminated: no deadline, no redelivery."""
        for seq in seqs:
            self.deadlines.pop(seq, None)
            self.redeliver.pop(seq, None)

    def on_ack(self, seq: int) -> None:
        """`+ACK` / `+NXT` received for `seq` (its ACK op is proposed by the caller): no redelivery of it and,
        for `ack_policy: all`, of any pending message below it either (nats-server `processAckMsg`: an
        AckAll clears the leader's pending up to it at once, not when the ack commits)."""
        deadlines = self.deadlines
        if seq in deadlines and self.entry.config.ack_policy is AckPolicy.all:  # type: ignore[union-attr]
            self.forget([s for s in deadlines if s <= seq])
        deadlines.pop(seq, None)  # forget([seq]), without a list per ack
        self.redeliver.pop(seq, None)

    def nak(self, seq: int, delay_ns: int | None, now_ns: int) -> DeliveredOp | None:
        """`-NAK`: redeliver now, or after `delay_ns` (then a record to propose, so a new leader waits too)."""
        pending = self.entry.state.pending.get(seq)
        if seq not in self.deadlines:
            return None
        if not delay_ns or delay_ns <= 0 or pending is None:
            self.redeliver[seq] = None
            return None
        self.redeliver.pop(seq, None)
        self.deadlines[seq] = now_ns + delay_ns
        ts = now_ns - self.config.ack_wait + delay_ns  # nats-server: "now - ackWait is expired now"
        return DeliveredOp(name=self.entry.name, records=((seq, pending[0], self.delivery_count(seq), ts),))

    def progress(self, seq: int, now_ns: int) -> DeliveredOp | None:
        """`+WPI`: the client is still working; the deadline starts again."""
        pending = self.entry.state.pending.get(seq)
        if seq not in self.deadlines or pending is None:
            return None
        self.redeliver.pop(seq, None)
        self.deadlines[seq] = now_ns + self.wait_ns(self.delivery_count(seq))
        return DeliveredOp(name=self.entry.name, records=((seq, pending[0], self.delivery_count(seq), now_ns),))

    # --- choosing deliveries ---------------------------------------------------------------------

    def _tidy(self, now_ns: int) -> None:
        """Drop what committed acks removed; queue what is due (rule 1)."""
        state = self.entry.state
        for seq in [s for s in self.deadlines if s <= state.delivered_stream_seq and s not in state.pending]:
            self.forget([seq])
        for seq in sorted(s for s, due in self.deadlines.items() if due <= now_ns and s not in self.redeliver):
            self.redeliver[seq] = None

    def next_deadline_ns(self) -> int | None:
        """When the runtime should call `next_deliveries` again for redeliveries (None: nothing pending)."""
        return min(self.deadlines.values(), default=None)

    def next_deliveries(self, store: StreamStore, now_ns: int, max_msgs: int, max_bytes: int = 0) -> DeliveryPlan:
        """Up to `max_msgs` messages (and `max_bytes` bytes, 0: unbounded) to deliver now."""
        plan = DeliveryPlan()
        self._skipped_to = 0
        if self.entry.paused_until_ns > now_ns or max_msgs <= 0 or store.faults():  # rules 5, 6
            return plan
        self._tidy(now_ns)
        records: list[tuple[int, int, int, int]] = []
        gone: list[int] = []
        # [messages, bytes] left; bytes None when unbounded (a budget spent to exactly 0 is not unbounded).
        budget: list = [max_msgs, max_bytes if max_bytes > 0 else None]
        remaining = self._num_pending(store)
        self._redeliveries(store, now_ns, plan, records, gone, budget, remaining)
        self._pending_left = remaining
        self._new_messages(store, now_ns, plan, records, budget, remaining)
        store_, changes, last, _, filters = self._pending_key
        self._pending_at = (store_, changes, last, self.next_seq - 1, filters, self._pending_left)
        if records:
            kept = records[-1:] if self.config.ack_policy is AckPolicy.none else records  # rule 8
            plan.ops.append(DeliveredOp(name=self.entry.name, records=tuple(kept)))
        if gone:
            plan.ops.append(TermOp(name=self.entry.name, seqs=tuple(gone)))
        if self._skipped_to > max((r[0] for r in records), default=0):
            # Messages passed over (rule 3) move the replicated cursor too, so retention can drop them.
            plan.ops.append(SkipOp(name=self.entry.name, stream_seq=self._skipped_to))
        return plan

    def num_pending(self, store: StreamStore) -> int:
        """The messages matching the filters above the cursor, as a pass would count them (rule 7): for
        consumer info, which reports the leader's live cursor."""
        return self._num_pending(store)

    def _num_pending(self, store: StreamStore) -> int:
        """Rule 7: the messages matching the filters above the cursor."""
        filters, after = self.config.filters, self.next_seq - 1
        last, changes, kept = store.state().last_seq, getattr(store, "changes", None), self._pending_at
        self._pending_key = (store, changes, last, after, filters)
        if (kept is not None and changes is not None and kept[0] is store and kept[1] == changes
                and kept[2] <= last and kept[3] == after and kept[4] == filters):
            return kept[5] + (num_pending(store, filters, kept[2]) if last > kept[2] else 0)
        return num_pending(store, filters, after)

    def _fits(self, size: int, plan: DeliveryPlan, budget: list) -> bool:
        if budget[1] is not None and size > budget[1]:
            plan.too_large = not plan.deliveries
            return False
        return True

    def _emit(self, plan: DeliveryPlan, records: list, budget: list, msg, count: int, cseq: int,
              now_ns: int, remaining: int, size: int) -> None:
        headers, payload, seq, ts = msg.headers, msg.payload, msg.seq, msg.timestamp_ns
        if self.entry.config.headers_only:  # type: ignore[union-attr]
            headers, payload = headers_only(headers, len(payload)), b""
        # acks.ack_reply_subject, with its constant part made once.
        reply = f"{self.ack_prefix}{count}.{seq}.{cseq}.{ts}.{remaining}"
        plan.deliveries.append(Delivery(seq, cseq, count, msg.subject, headers, payload, ts, remaining, reply, size))
        records.append((seq, cseq, count, now_ns))
        budget[0] -= 1
        if budget[1] is not None:
            budget[1] -= size

    def _redeliveries(self, store: StreamStore, now_ns: int, plan: DeliveryPlan, records: list, gone: list,
                      budget: list, remaining: int) -> None:
        max_deliver = self.config.max_deliver
        for seq in list(self.redeliver):
            if budget[0] <= 0:
                return
            count = self.delivery_count(seq)
            if max_deliver > 0 and count >= max_deliver:
                cseq = self.entry.state.pending.get(seq, (self.next_consumer_seq, 0))[0]
                records.append((seq, cseq, max_deliver + 1, now_ns))
                plan.gave_up.append((seq, count))
                self.forget([seq])
                continue
            try:
                msg = store.load(seq)
            except NoMessageFound:
                gone.append(seq)
                self.forget([seq])
                continue
            except DamagedSequence:
                return  # rule 6: it stays pending until the store is repaired
            size = msg_size(len(msg.subject), len(msg.headers), len(msg.payload))
            if not self._fits(size, plan, budget):
                return
            self.redeliver.pop(seq)
            self._emit(plan, records, budget, msg, count + 1, self.next_consumer_seq, now_ns, remaining, size)
            self.next_consumer_seq += 1
            self.deadlines[seq] = now_ns + self.wait_ns(count + 1)

    def _new_messages(self, store: StreamStore, now_ns: int, plan: DeliveryPlan, records: list,
                      budget: list, remaining: int) -> None:
        config, entry = self.config, self.entry
        tracks_acks = config.ack_policy is not AckPolicy.none
        filters = list(config.filters) or None
        last_per_subject = config.deliver_policy is DeliverPolicy.last_per_subject
        deadline_ns = now_ns + self.wait_ns(1)
        run: list = []  # read ahead by `_next_run`, last first: each is what `_next_message` would return
        ack_pending_max = config.max_ack_pending if tracks_acks and config.max_ack_pending > 0 else 0
        deadlines, deliveries, prefix = self.deadlines, plan.deliveries, self.ack_prefix
        count, bytes_left = budget  # `_emit`'s work, inline for each new message (the hot loop of a fetch)
        cseq = self.next_consumer_seq
        try:
            while count > 0:
                if ack_pending_max and ack_pending_max <= len(deadlines):
                    return
                if not run:
                    room = ack_pending_max - len(deadlines) if ack_pending_max else count
                    run = _next_run(store, filters, self.next_seq, min(count, room))
                msg = run.pop() if run else _next_message(store, filters, self.next_seq)
                if msg is None:
                    return
                seq = msg.seq
                if last_per_subject and seq <= entry.start_last_seq and \
                        not is_last_at_start(store, seq, msg.subject, entry.start_last_seq):
                    self.next_seq = seq + 1
                    self._skipped_to = seq
                    remaining -= 1
                    continue
                headers, payload, ts = msg.headers, msg.payload, msg.timestamp_ns
                size = msg_size(len(msg.subject), len(headers), len(payload))
                if bytes_left is not None:
                    if size > bytes_left:  # `_fits`
                        plan.too_large = not deliveries
                        return
                    bytes_left -= size
                if config.headers_only:
                    headers, payload = headers_only(headers, len(payload)), b""
                remaining -= 1
                # acks.ack_reply_subject, with its constant part made once.
                reply = f"{prefix}1.{seq}.{cseq}.{ts}.{remaining}"
                deliveries.append(Delivery(seq, cseq, 1, msg.subject, headers, payload, ts, remaining, reply, size))
                records.append((seq, cseq, 1, now_ns))
                count -= 1
                cseq += 1
                self.next_seq, self.next_consumer_seq = seq + 1, cseq
                if tracks_acks:
                    deadlines[seq] = deadline_ns
        finally:
            budget[0], budget[1] = count, bytes_left
            self._pending_left = remaining


def _next_run(store: StreamStore, filters: list[str] | None, seq: int, count: int) -> list:
    """The next messages from `seq` in one store read (`load_run`), last first; [] when the store has no
    batched read (a test double) or the run stops at once — then `_next_message` takes the general way.
    A filtered consumer reads a run only where its filters match at least half of what is stored there
    (`store.run_pays`: nats-py's `pull_subscribe("orders.new", ...)` on a stream of that one subject, a
    wildcard over all of a stream's, one of two interleaved subjects): elsewhere it goes message by message,
    since a run over a sparse filter would read spans of messages it does not deliver, and `load_next` skips
    whole blocks."""
    load_run = getattr(store, "load_run", None)
    if load_run is None or count <= 0:
        return []
    if filters is not None:
        run_pays = getattr(store, "run_pays", None)
        if run_pays is None or not run_pays(filters, seq):
            return []
    run = load_run(seq, count, filters)
    run.reverse()
    return run


def _next_message(store: StreamStore, filters: list[str] | None, seq: int):
    """The first message at or after `seq` matching `filters`, or None. Unfiltered, `seq` itself is tried
    first (one lookup: a consumer reading in order finds it there, without a scan for the next live seq);
    anything else — gone, damaged — takes the general way, `load_next`, so the outcome is the same."""
    if filters is None:
        try:
            return store.load(seq)
        except (NoMessageFound, DamagedSequence):
            pass
    try:
        return store.load_next(filters, seq)
    except (NoMessageFound, DamagedSequence):
        return None  # nothing more now; damage (rule 6) is not skipped, only waited for
