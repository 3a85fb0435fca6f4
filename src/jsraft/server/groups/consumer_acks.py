"""The acks a stream leader's consumers received, turned into ops and answers in one pass (layer L5).

Owns: `take_acks`, called by `ConsumerService` at the start of each pass with the acks and flow-control
answers (`$JS.FC...`) the node's consumer hub handed in since the last one: plain acks and `+NXT` become
one ACK op per consumer, `+TERM` one TERM op, `-NAK` and `+WPI` the DELIVERED op their leader returns;
the answers owed (a `+NXT`'s messages, a NAK's or WPI's empty answer) are added to `sends`, and double
acks to `confirm` (answered once their op committed). Advisories and sampled ack metrics go to the
consumer's `ConsumerEvents`.

Invariants:
  1. What nats-server ignores is ignored: an ack subject that does not parse, names another stream or a
     consumer not led here, or an ack body that does not parse, changes nothing and raises no error.
  2. A plain ack raises no advisory; only a consumer that samples (`sample_freq`) parses the full subject
     for its metric (the common ack costs one split).

Imports: stdlib, L2 (`store`), L3 (`consumer`), L3½ (`replica`). No trio: the service's task calls it.
Reference: nats-server `server/consumer.go` (processAck, processNak, processTerm, processFlowControl).
"""

from __future__ import annotations

from jsraft.consumer import AckBody, AckKind, AckOp, TermOp, parse_ack_body, parse_ack_subject
from jsraft.consumer.acks import ack_target
from jsraft.consumer.ops import Op
from jsraft.consumer.push import FC_PREFIX
from jsraft.replica.consumer_events import ConsumerEvents
from jsraft.replica.consumer_pull import Leading, Send
from jsraft.replica.consumer_push import PushLeading
from jsraft.store.base import StreamStore

Ack = tuple[str, str, bytes]  # (ack subject, reply subject or "", body)
NEEDS_STATE = (b"-NAK", b"+WPI")  # the ack bodies (parse_ack_body) that read the replicated pending state
_PLAIN = (AckKind.ACK, AckKind.NEXT)  # acks that raise no advisory (only a sampled metric, if configured)


def take_acks(acks: list[Ack], stream: str, leading_by_name: dict[str, Leading], store: StreamStore,
              events: ConsumerEvents, now_ns: int, ops: list[Op], sends: list[Send], confirm: list[str]) -> None:
    """`acks` as ops (one ACK / TERM op per consumer), answers and double acks to confirm (module docstring)."""
    acked: dict[str, list[int]] = {}
    termed: dict[str, list[int]] = {}
    for subject, reply, body in acks:
        if subject.startswith(FC_PREFIX):
            _flow_control(stream, leading_by_name, subject, now_ns)
            continue
        target, what = ack_target(subject), parse_ack_body(body)
        if target is None or what is None or target[0] != stream:
            continue  # nats-server ignores what it cannot parse (invariant 1)
        leading = leading_by_name.get(target[1])
        if leading is None:
            continue
        leading.active_ns = now_ns
        seq, kind = target[2], what.kind
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
            continue
        op = leading.leader.nak(seq, what.delay_ns, now_ns) if kind is AckKind.NAK else leading.leader.progress(seq, now_ns)
        if op is not None:
            ops.append(op)
        if reply:
            sends.append(Send(reply, b""))  # nats-server answers NAK and WPI at once
    ops.extend(AckOp(name=name, seqs=tuple(seqs)) for name, seqs in acked.items())
    ops.extend(TermOp(name=name, seqs=tuple(seqs)) for name, seqs in termed.items())


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
