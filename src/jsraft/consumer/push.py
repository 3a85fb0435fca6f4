"""Push consumers: the leader's pacing decisions — flow control, idle heartbeats, rate limit, replay
original (layer L3, pure).

Owns: `PushPacer`, the leader-only pacing state of one push consumer (rebuilt empty on every election,
like `ConsumerLeader`): how many messages may go out now (`allowance`), what a sent message changes
(`on_sent`, which may ask for a flow-control request), a client's flow-control answer
(`on_flow_control`), the idle heartbeat that is due (`heartbeat`) and when to look again
(`next_due_ns`). The server (L5, `consumer_push`) sends what these return. Time is an argument; no
clock is read here, and the flow-control subjects are built from a `nonce` the caller chose.

Rules (nats-server `server/consumer.go`):
  1. Flow control (`deliverMsg`, `needFlowControl`, `processFlowControl`): bytes sent count as pending;
     once they exceed half the window and no request is out, a request goes out to the deliver subject
     (`NATS/1.0 100 FlowControl Request`, reply `$JS.FC.<stream>.<consumer>.<id>`); delivery stalls
     while pending bytes exceed the window. The answer to the latest request (only that one) releases
     the bytes counted when it was sent and doubles the window, from `FC_WINDOW_MIN_BYTES` up to
     `FC_WINDOW_MAX_BYTES` (slow start).
  2. Idle heartbeat (`sendIdleHeartbeat`): when nothing went to the deliver subject for
     `idle_heartbeat`, a `NATS/1.0 100 Idle Heartbeat` with `Nats-Last-Consumer` / `Nats-Last-Stream`
     (the leader's last consumer and stream seq handed out) and, while stalled on flow control,
     `Nats-Consumer-Stalled: <the request's reply subject>` so the client can answer it again.
  3. Rate limit (`setRateLimit`, `rate.Limiter`): `rate_limit_bps` is in bits per second; a token
     bucket of bytes refills at `rate_limit_bps / 8` per second up to a burst of the stream's
     `max_msg_size` (else `RATE_BURST_DEFAULT_BYTES`); a message may go while the bucket is positive
     and takes its size (the bucket may go into debt by one message, as `ReserveN` does).
  4. Replay original (`loopAndGatherMsgs`): a new message goes no sooner than the previous new message
     was sent plus the difference of their stream timestamps (gaps under 1 ms are not waited for).
Invariants: `pending_bytes >= 0`; `FC_WINDOW_MIN_BYTES <= window_bytes <= FC_WINDOW_MAX_BYTES`; at most
one flow-control request is outstanding.

Imports: L0, L1 (`jsapi`), L2 (`store`), this package. Reference: DESIGN.md §7.
"""

from __future__ import annotations

from jsraft.consumer.delivery import ConsumerLeader
from jsraft.errors import NoMessageFound, invariant
from jsraft.jsapi.consumer_config import ConsumerConfig, ReplayPolicy
from jsraft.store.base import StreamStore

# nats-server's `JsFlowControlMaxPending` (32 MiB since v2.8.0) and its `setMaxPendingBytes` start at a
# sixteenth of it: the first request goes out after 1 MiB and delivery stalls only past 2 MiB. A smaller
# window makes delivery wait for the client's answer where nats-server does not: nats-py answers a request
# only once its callbacks have taken every message before it (or at its 0.25 s poll), so under load a
# small window let deliveries fall hundreds of messages behind the publish acks (issue #15).
FC_WINDOW_MAX_BYTES = 32 << 20
FC_WINDOW_MIN_BYTES = FC_WINDOW_MAX_BYTES // 16  # where the window starts (slow start)
RATE_BURST_DEFAULT_BYTES = 1 << 20  # the default max payload, nats-server's burst without max_msg_size
REPLAY_GAP_MIN_NS = 1_000_000  # shorter gaps are not waited for
ROUND_MSGS_MAX = 64  # messages per allowance: bounds the overshoot of the flow-control window
FLOW_CONTROL_REQUEST = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
FC_PREFIX = "$JS.FC."


class PushPacer:
    """Pacing of one push consumer on its leader (module rules 1-4)."""

    def __init__(self, stream: str, name: str, config: ConsumerConfig, now_ns: int, *, nonce: str,
                 burst_bytes: int = 0) -> None:
        invariant(config.deliver_subject is not None, "a push consumer has a deliver subject")
        self.stream, self.name, self.config = stream, name, config
        self.nonce = nonce
        self.window_bytes = FC_WINDOW_MIN_BYTES
        self.pending_bytes = 0
        self.fc_reply: str | None = None  # the outstanding flow-control request's reply subject
        self.fc_bytes = 0  # pending bytes its answer releases
        self.fc_count = 0
        self.last_sent_ns = now_ns  # a message or a heartbeat to the deliver subject (rule 2)
        self.burst_bytes = burst_bytes if burst_bytes > 0 else RATE_BURST_DEFAULT_BYTES
        self.tokens = float(self.burst_bytes)
        self.tokens_ns = now_ns
        self.replay_ts_ns = 0  # the stream timestamp of the last new message sent (rule 4)
        self.replay_sent_ns = 0
        self.due_ns: int | None = None  # when `allowance` said to come back

    # --- Rule 1: flow control --------------------------------------------------------------------------

    @property
    def stalled(self) -> bool:
        return self.config.flow_control and self.pending_bytes > self.window_bytes

    def on_sent(self, size: int, stream_ts_ns: int, first_delivery: bool, now_ns: int) -> str | None:
        """A message of `size` bytes went out; the reply subject of a flow-control request to send now."""
        self.last_sent_ns = now_ns
        if self.config.rate_limit_bps > 0:
            self.tokens -= size
        if first_delivery:
            self.replay_ts_ns, self.replay_sent_ns = stream_ts_ns, now_ns
        if not self.config.flow_control:
            return None
        self.pending_bytes += size
        if self.fc_reply is None and self.pending_bytes > self.window_bytes // 2:
            self.fc_count += 1
            self.fc_reply = f"{FC_PREFIX}{self.stream}.{self.name}.{self.nonce}{self.fc_count}"
            self.fc_bytes = self.pending_bytes
            return self.fc_reply
        if self.fc_reply is not None and self.pending_bytes - self.fc_bytes >= self.window_bytes:
            self.fc_bytes += size
        return None

    def on_flow_control(self, subject: str) -> bool:
        """A client answered `subject`; True when it was the outstanding request (delivery may resume)."""
        if self.fc_reply is None or subject != self.fc_reply:
            return False  # an old or repeated answer (nats-server ignores it)
        self.window_bytes = min(self.window_bytes * 2, FC_WINDOW_MAX_BYTES)
        self.pending_bytes = max(self.pending_bytes - self.fc_bytes, 0)
        self.fc_reply, self.fc_bytes = None, 0
        return True

    # --- Rules 3 and 4: how much may go now -----------------------------------------------------------

    def _refill(self, now_ns: int) -> None:
        rate = self.config.rate_limit_bps / 8  # bytes per second
        elapsed = max(now_ns - self.tokens_ns, 0)
        self.tokens = min(self.tokens + elapsed * rate / 1e9, float(self.burst_bytes))
        self.tokens_ns = now_ns

    def allowance(self, leader: ConsumerLeader, store: StreamStore, now_ns: int) -> int:
        """How many messages `leader.next_deliveries` may hand out now (0: wait; see `due_ns`)."""
        self.due_ns = None
        if self.stalled:
            return 0  # the flow-control answer wakes the leader
        budget = ROUND_MSGS_MAX
        if self.config.rate_limit_bps > 0:
            self._refill(now_ns)
            if self.tokens <= 0:
                rate = self.config.rate_limit_bps / 8
                self.due_ns = now_ns + int(-self.tokens * 1e9 / rate) + 1
                return 0
            budget = 1  # one message per look: each takes its size from the bucket
        if self.config.replay_policy is ReplayPolicy.original:
            wait_ns = self._replay_wait_ns(leader, store, now_ns) if self.replay_sent_ns and not leader.redeliver else 0
            if wait_ns > 0:
                self.due_ns = now_ns + wait_ns
                return 0
            budget = 1  # each new message has its own time
        return budget

    def _replay_wait_ns(self, leader: ConsumerLeader, store: StreamStore, now_ns: int) -> int:
        try:
            msg = store.load_next(list(self.config.filters) or None, leader.next_seq)
        except NoMessageFound:
            return 0
        gap_ns = msg.timestamp_ns - self.replay_ts_ns
        if gap_ns < REPLAY_GAP_MIN_NS:
            return 0
        return max(self.replay_sent_ns + gap_ns - now_ns, 0)

    # --- Rule 2: idle heartbeats --------------------------------------------------------------------

    def heartbeat(self, now_ns: int, last_consumer_seq: int, last_stream_seq: int) -> bytes | None:
        """The idle heartbeat's header block when one is due (and counts as sent), else None."""
        idle_ns = self.config.idle_heartbeat
        if idle_ns <= 0 or now_ns - self.last_sent_ns < idle_ns:
            return None
        self.last_sent_ns = now_ns
        lines = ["NATS/1.0 100 Idle Heartbeat", f"Nats-Last-Consumer: {last_consumer_seq}",
                 f"Nats-Last-Stream: {last_stream_seq}"]
        if self.stalled and self.fc_reply is not None:
            lines.append(f"Nats-Consumer-Stalled: {self.fc_reply}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def next_due_ns(self) -> int | None:
        """The earliest time the leader must look again without a new input (None: only on input)."""
        times = [self.due_ns] if self.due_ns is not None else []
        if self.config.idle_heartbeat > 0:
            times.append(self.last_sent_ns + self.config.idle_heartbeat)
        return min(times, default=None)
