"""The acks a stream leader's consumers received, turned into ops and answers in one pass (layer L5).

Owns: `AckQueue`, the acks handed in since the last pass (bounded), and `take_acks`, called by
`ConsumerService` at the start of each pass with the acks and flow-control
answers (`$JS.FC...`) the node's consumer hub handed in since the last one: plain acks and `+NXT` become
one ACK op per consumer, `+TERM` one TERM op, `-NAK` and `+WPI` the DELIVERED op their leader returns;
the answers owed (a `+NXT`'s messages, a NAK's or WPI's empty answer) are added to `sends`, and double
acks to `confirm` (answered once their op committed). Advisories and sampled ack metrics go to the
consumer's `ConsumerEvents`.

Invariants:
  1. What nats-server ignores is ignored: an ack subject that does not parse, names another stream or a
     consumer not led here, or an ack body that does not parse, changes nothing and raises no error.
  2. A plain ack raises no advisory; only a consumer that samples (`sample_freq`) parses the full subject
     for its metric. The common ack costs no parse here at all when the hub parsed its subject
     (`literal_ack_target`), and its body is compared, not parsed.
  3. One ACK op per consumer, its seqs in the order the acks arrived; one TERM op likewise.

Imports: stdlib, L2 (`store`), L3 (`consumer`), L3½ (`replica`). No trio: the service's task calls it.
Reference: nats-server `server/consumer.go` (processAck, processNak, processTerm, processFlowControl).
"""

from __future__ import annotations

import logging

from jsraft.consumer import AckBody, AckKind, AckOp, TermOp, parse_ack_body, parse_ack_subject
from jsraft.consumer.acks import PLAIN_ACK, ack_target
from jsraft.consumer.ops import Op
from jsraft.consumer.push import FC_PREFIX
from jsraft.replica.consumer_events import ConsumerEvents
from jsraft.replica.consumer_pull import Leading, Send
from jsraft.replica.consumer_push import PushLeading
from jsraft.store.base import StreamStore

# (ack subject, reply subject or "", body, (stream, consumer, stream seq) when the hub parsed the subject
# already — `literal_ack_target` — else None: then it is parsed here).
Ack = tuple[str, str, bytes, tuple[str, str, int] | None]
NEEDS_STATE = (b"-NAK", b"+WPI")  # the ack bodies (parse_ack_body) that read the replicated pending state
_PLAIN = (AckKind.ACK, AckKind.NEXT)  # acks that raise no advisory (only a sampled metric, if configured)
_PLAIN_BODIES = (b"+ACK", b"", b"+OK")  # parse_ack_body's PLAIN_ACK (acks invariant 2), the usual first


log = logging.getLogger("jsraft.server.consumers")
ACKS_QUEUED_MAX = 65536


class AckQueue:
    """The acks a stream's consumer service was handed since its last pass: at most `ACKS_QUEUED_MAX`;
    beyond it an ack is dropped and counted (its message is redelivered, as for a lost ack in NATS)."""

    __slots__ = ("stream", "items", "needs_state", "dropped")

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.items: list[Ack] = []
        self.needs_state = False  # an item is a NAK or a progress note: the pass lets proposals settle first
        self.dropped = 0

    def put(self, ack: Ack) -> bool:
        """Queue `ack`; False when it was dropped (the bound)."""
        if len(self.items) >= ACKS_QUEUED_MAX:
            if not self.dropped % 1024:
                log.warning("stream %s: acks dropped: too many waiting (%d so far)", self.stream, self.dropped + 1)
            self.dropped += 1
            return False
        self.items.append(ack)
        if not self.needs_state and ack[2].startswith(NEEDS_STATE):
            self.needs_state = True
        return True

    def put_all(self, acks: list[Ack]) -> bool:
        """`put` of each of `acks`, in order; False when every one was dropped."""
        room = max(ACKS_QUEUED_MAX - len(self.items), 0)
        taken = acks[:room] if len(acks) > room else acks
        self.items.extend(taken)
        for ack in acks[room:]:  # past the bound, the queue full now: `put` drops and counts each
            self.put(ack)
        if not self.needs_state and any(ack[2].startswith(NEEDS_STATE) for ack in taken):
            self.needs_state = True
        return bool(taken)

    def take(self) -> list[Ack]:
        items, self.items, self.needs_state = self.items, [], False
        return items


def take_acks(acks: list[Ack], stream: str, leading_by_name: dict[str, Leading], store: StreamStore,
              events: ConsumerEvents, now_ns: int, ops: list[Op], sends: list[Send], confirm: list[str]) -> None:
    """`acks` as ops (one ACK / TERM op per consumer), answers and double acks to confirm (module docstring)."""
    acked: dict[str, list[int]] = {}
    termed: dict[str, list[int]] = {}
    name, leading, seqs = "", None, []  # the consumer of the last ack taken, and its ACK op's seqs so far
    for subject, reply, body, target in acks:
        if target is None:
            if subject.startswith(FC_PREFIX):
                _flow_control(stream, leading_by_name, subject, now_ns)
                continue
            target = ack_target(subject)
            if target is None:
                continue  # nats-server ignores what it cannot parse (invariant 1)
        if target[0] != stream:
            continue
        if target[1] != name or leading is None:
            leading = leading_by_name.get(target[1])
            if leading is None:
                name = ""
                continue
            name, seqs = target[1], acked.setdefault(target[1], [])
        seq = target[2]
        if body in _PLAIN_BODIES:
            # The common case, a plain ack: what `_take_one` does with PLAIN_ACK, without its calls.
            leading.active_ns = leading.acked_ns = now_ns
            config = leading.entry.config
            if config is not None and config.sample_freq and seq in leading.leader.deadlines:
                _ack_event(events, leading, subject, PLAIN_ACK, now_ns)  # invariant 2: a sampled metric
            seqs.append(seq)
            leading.leader.on_ack(seq)
            if reply:
                confirm.append(reply)  # a double ack: answered once the op committed
            continue
        _take_one(leading, subject, reply, body, seq, events, store, now_ns, ops, sends, confirm, acked, termed)
    ops.extend(AckOp(name=name, seqs=tuple(seqs)) for name, seqs in acked.items() if seqs)
    ops.extend(TermOp(name=name, seqs=tuple(seqs)) for name, seqs in termed.items())


def _take_one(leading: Leading, subject: str, reply: str, body: bytes, seq: int, events: ConsumerEvents,
              store: StreamStore, now_ns: int, ops: list[Op], sends: list[Send], confirm: list[str],
              acked: dict[str, list[int]], termed: dict[str, list[int]]) -> None:
    """Any other ack of `leading`'s message `seq` (`+NXT`, `-NAK`, `+WPI`, `+TERM`, or a body to ignore)."""
    what = parse_ack_body(body)
    if what is None:
        return  # nats-server ignores what it cannot parse (invariant 1)
    leading.active_ns = now_ns
    kind = what.kind
    if seq in leading.leader.deadlines:
        _ack_event(events, leading, subject, what, now_ns)
    if kind in (AckKind.ACK, AckKind.NEXT, AckKind.TERM):
        (termed if kind is AckKind.TERM else acked).setdefault(leading.name, []).append(seq)
        if kind is AckKind.TERM:
            leading.leader.forget([seq])
        else:  # ack_policy all: every pending seq below it too (ConsumerLeader.on_ack)
            leading.leader.on_ack(seq)
        leading.acked_ns = now_ns
        if kind is AckKind.NEXT:
            if reply:
                answer = leading.pull(reply, what.next_request, store, now_ns)
                if answer is not None:
                    sends.append(answer)
        elif reply:
            confirm.append(reply)  # a double ack: answered once the op committed
        return
    op = leading.leader.nak(seq, what.delay_ns, now_ns) if kind is AckKind.NAK else leading.leader.progress(seq, now_ns)
    if op is not None:
        ops.append(op)
    if reply:
        sends.append(Send(reply, b""))  # nats-server answers NAK and WPI at once


def _ack_event(events: ConsumerEvents, leading: Leading, subject: str, what: AckBody, now_ns: int) -> None:
    """An ack of a pending message: a NAK / TERM advisory or a sampled ack metric (events.on_ack); invariant 2."""
    config = leading.entry.config
    if what.kind not in _PLAIN or (config is not None and config.sample_freq):
        where = parse_ack_subject(subject)
        if where is not None:
            events.on_ack(leading, where, what, True, now_ns)


def _flow_control(stream: str, leading_by_name: dict[str, Leading], subject: str, now_ns: int) -> None:
    """A client answered a flow-control request (`$JS.FC.<stream>.<consumer>.<id>`)."""
    tokens = subject.split(".")
    leading = leading_by_name.get(tokens[3]) if len(tokens) == 5 and tokens[2] == stream else None
    if type(leading) is PushLeading and leading.on_flow_control(subject):
        leading.active_ns = now_ns
