"""Ack reply subjects and ack bodies: the JetStream wire forms, built and parsed (layer L3).

Owns: `ack_reply_subject` (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream_seq>.<consumer_seq>.
<timestamp_ns>.<pending>`; `ack_reply_prefix`, its part that is the same for one consumer),
`parse_ack_subject` (that form, and the 12-token form with domain and account hash that newer servers
and clients also use; `ack_target`, its three fields the leader's ack path
needs, without building an `AckSubject`; `literal_ack_target`, the same for the form this leader hands
out when its tokens also make a valid literal subject), `parse_ack_body` (`+ACK`/empty/`+OK`, `-NAK`
with an optional delay as JSON `{"delay": ns}` or a Go duration, `+WPI`, `+NXT` with an optional pull
request, `+TERM` with an optional reason) and `parse_go_duration`.

Invariants:
  1. `parse_ack_subject(ack_reply_subject(...))` returns the same fields.
  2. `ack_target(s)` is None exactly when `parse_ack_subject(s)` is, else its (stream, consumer,
     stream_seq); `parse_ack_body` of a plain ack (`+ACK`, `+OK`, empty) is the one value `PLAIN_ACK`.
  3. `literal_ack_target(s)` is None or `ack_target(s)`; when it is not None, `s` is a valid literal
     subject (`subjects.validate_literal` accepts it): the client port's ack shortcut takes such a
     subject with no other check (server/nats `ClientServer` invariant 6).
  4. Parsing never raises on client bytes: an unparsable subject or body gives None (nats-server ignores
     it); a NAK with an unparsable delay is a plain NAK (as nats-server treats it).

Imports: stdlib, attrs, L0 (`limits`). Reference: nats-server `server/consumer.go` (processAck, processNak,
ackReplyInfo), ADR-15 (JetStream subject naming).
"""

from __future__ import annotations

import enum
import json
import re

import attrs

from jsraft import limits

ACK_PREFIX = "$JS.ACK."


class AckKind(enum.Enum):
    ACK = "+ACK"
    NAK = "-NAK"
    PROGRESS = "+WPI"
    NEXT = "+NXT"
    TERM = "+TERM"


@attrs.frozen(kw_only=True)
class AckBody:
    kind: AckKind
    delay_ns: int | None = None  # NAK: redeliver after this long (None: as soon as possible)
    next_request: bytes = b""  # NXT: the pull request that follows the ack (number or JSON; may be empty)
    reason: str = ""  # TERM


@attrs.frozen(kw_only=True)
class AckSubject:
    stream: str
    consumer: str
    delivery_count: int
    stream_seq: int
    consumer_seq: int
    timestamp_ns: int
    pending: int
    domain: str = ""
    account_hash: str = ""


PLAIN_ACK = AckBody(kind=AckKind.ACK)  # `+ACK`, `+OK` or an empty body
_PLAIN_ACKS = (b"", b"+ACK", b"+OK")


def ack_reply_subject(stream: str, consumer: str, delivery_count: int, stream_seq: int, consumer_seq: int,
                      timestamp_ns: int, pending: int) -> str:
    return f"{ack_reply_prefix(stream, consumer)}{delivery_count}.{stream_seq}.{consumer_seq}.{timestamp_ns}.{pending}"


def ack_reply_prefix(stream: str, consumer: str) -> str:
    """The part of `ack_reply_subject` that is the same for every delivery of one consumer."""
    return f"{ACK_PREFIX}{stream}.{consumer}."


# The 9-token form: stream, consumer, then delivered / stream seq / consumer seq / timestamp / pending, each
# of ASCII digits only (`_ack_tokens` accepts exactly those: `str.isdigit` and `str.isascii`).
_V1_ACK = re.compile(r"\$JS\.ACK\.([^.]+)\.([^.]+)\.[0-9]+\.([0-9]+)\.[0-9]+\.[0-9]+\.[0-9]+\Z")
# The same, with stream and consumer tokens free of ASCII whitespace, `*` and `>` (re.ASCII): on an ASCII
# subject within the length bound, every token is then non-empty, without whitespace and no wildcard —
# a valid literal subject (invariant 3).
_V1_ACK_LITERAL = re.compile(r"\$JS\.ACK\.([^.\s*>]+)\.([^.\s*>]+)\.[0-9]+\.([0-9]+)\.[0-9]+\.[0-9]+\.[0-9]+\Z",
                             re.ASCII)


def _ack_tokens(subject: str) -> tuple[list[str], str, str] | None:
    """The 7 tokens stream..pending of an ack reply subject (numbers checked), its domain and account
    hash; None when `subject` is not one."""
    if not subject.startswith(ACK_PREFIX):
        return None
    tokens = subject.split(".")
    if len(tokens) == 9:
        rest, domain, account_hash = tokens[2:], "", ""
    elif len(tokens) >= 12:
        # $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>.<token>
        rest, domain, account_hash = tokens[4:11], ("" if tokens[2] == "_" else tokens[2]), tokens[3]
    else:
        return None
    if not rest[0] or not rest[1]:
        return None
    for token in rest[2:7]:
        if not (token.isdigit() and token.isascii()):
            return None
    return rest, domain, account_hash


def parse_ack_subject(subject: str) -> AckSubject | None:
    """The fields of an ack reply subject; None when `subject` is not one."""
    parsed = _ack_tokens(subject)
    if parsed is None:
        return None
    rest, domain, account_hash = parsed
    return AckSubject(stream=rest[0], consumer=rest[1], delivery_count=int(rest[2]), stream_seq=int(rest[3]),
                      consumer_seq=int(rest[4]), timestamp_ns=int(rest[5]), pending=int(rest[6]), domain=domain,
                      account_hash=account_hash)


def ack_target(subject: str) -> tuple[str, str, int] | None:
    """`(stream, consumer, stream_seq)` of an ack reply subject, None exactly when `parse_ack_subject` gives
    None: the leader's ack path needs only these, once per acked message, without an `AckSubject`."""
    match = _V1_ACK.match(subject)  # the form this leader hands out: one C-level match, no token list
    if match is not None:
        return match.group(1), match.group(2), int(match.group(3))
    parsed = _ack_tokens(subject)
    if parsed is None:
        return None
    rest = parsed[0]
    return rest[0], rest[1], int(rest[3])


def literal_ack_target(subject: str) -> tuple[str, str, int] | None:
    """`ack_target(subject)` when `subject` is a 9-token ack subject that is also a valid literal subject
    (invariant 3): one match stands for the subject check and the parse of each ack; None otherwise
    (then the caller takes the general way)."""
    if len(subject) > limits.subject_bytes_max or not subject.isascii():
        return None
    match = _V1_ACK_LITERAL.match(subject)
    if match is None:
        return None
    stream, consumer, seq = match.groups()
    return stream, consumer, int(seq)


_DURATION = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
            "m": 60_000_000_000, "h": 3_600_000_000_000}


def parse_go_duration(text: str) -> int:
    """Go's `time.ParseDuration` (e.g. "1.5s", "2m30s", "-100ms", "0") in nanoseconds; ValueError if bad."""
    sign, body = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    if body == "0":
        return 0
    if not body:
        raise ValueError(f"time: invalid duration {text!r}")
    total, position = 0, 0
    while position < len(body):
        match = _DURATION.match(body, position)
        if match is None or match.group(1) in ("", "."):
            raise ValueError(f"time: invalid duration {text!r}")
        whole, _, fraction = match.group(1).partition(".")
        unit = _UNIT_NS[match.group(2)]
        total += int(whole or "0") * unit + (int(fraction) * unit // 10 ** len(fraction) if fraction else 0)
        position = match.end()
    return sign * total


def _nak_delay(arg: bytes) -> int | None:
    text = arg.strip()
    if not text:
        return None
    try:
        if text[:1] == b"{":
            value = json.loads(text).get("delay", 0)
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            return value
        return parse_go_duration(text.decode())
    except (ValueError, UnicodeDecodeError, AttributeError, RecursionError):
        return None  # nats-server: "bad NAK delay value", treated as a normal NAK


def parse_ack_body(payload: bytes) -> AckBody | None:
    """What an ack message asks for; None for a body nats-server ignores."""
    if payload in _PLAIN_ACKS:  # the common case: one shared value (frozen), no copy
        return PLAIN_ACK
    body = bytes(payload)
    if body.startswith(b"+NXT"):
        return AckBody(kind=AckKind.NEXT, next_request=body[4:].strip())
    if body.startswith(b"-NAK"):
        return AckBody(kind=AckKind.NAK, delay_ns=_nak_delay(body[4:]))
    if body == b"+WPI":
        return AckBody(kind=AckKind.PROGRESS)
    if body.startswith(b"+TERM"):
        return AckBody(kind=AckKind.TERM, reason=body[5:].strip().decode(errors="replace"))
    return None
