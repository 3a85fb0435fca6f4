"""Ack reply subjects and ack bodies: the JetStream wire forms, built and parsed (layer L3).

Owns: `ack_reply_subject` (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream_seq>.<consumer_seq>.
<timestamp_ns>.<pending>`), `parse_ack_subject` (that form, and the 12-token form with domain and
account hash that newer servers and clients also use), `parse_ack_body` (`+ACK`/empty/`+OK`, `-NAK`
with an optional delay as JSON `{"delay": ns}` or a Go duration, `+WPI`, `+NXT` with an optional pull
request, `+TERM` with an optional reason) and `parse_go_duration`.

Invariants:
  1. `parse_ack_subject(ack_reply_subject(...))` returns the same fields.
  2. Parsing never raises on client bytes: an unparsable subject or body gives None (nats-server ignores
     it); a NAK with an unparsable delay is a plain NAK (as nats-server treats it).

Imports: stdlib, attrs. Reference: nats-server `server/consumer.go` (processAck, processNak,
ackReplyInfo), ADR-15 (JetStream subject naming).
"""

from __future__ import annotations

import enum
import json
import re

import attrs

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


def ack_reply_subject(stream: str, consumer: str, delivery_count: int, stream_seq: int, consumer_seq: int,
                      timestamp_ns: int, pending: int) -> str:
    return (f"{ACK_PREFIX}{stream}.{consumer}.{delivery_count}.{stream_seq}.{consumer_seq}."
            f"{timestamp_ns}.{pending}")


def _uint(token: str) -> int | None:
    return int(token) if token.isdigit() and token.isascii() else None


def parse_ack_subject(subject: str) -> AckSubject | None:
    """The fields of an ack reply subject; None when `subject` is not one."""
    if not subject.startswith(ACK_PREFIX):
        return None
    tokens = subject.split(".")
    domain = account_hash = ""
    if len(tokens) == 9:
        rest = tokens[2:]
    elif len(tokens) >= 12:
        # $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>.<token>
        domain = "" if tokens[2] == "_" else tokens[2]
        account_hash, rest = tokens[3], tokens[4:11]
    else:
        return None
    stream, consumer = rest[0], rest[1]
    numbers = [_uint(token) for token in rest[2:7]]
    if not stream or not consumer or any(n is None for n in numbers):
        return None
    delivery_count, stream_seq, consumer_seq, timestamp_ns, pending = numbers
    return AckSubject(stream=stream, consumer=consumer, delivery_count=delivery_count, stream_seq=stream_seq,
                      consumer_seq=consumer_seq, timestamp_ns=timestamp_ns, pending=pending, domain=domain,
                      account_hash=account_hash)


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
    body = bytes(payload)
    if body in (b"", b"+ACK", b"+OK"):
        return AckBody(kind=AckKind.ACK)
    if body.startswith(b"+NXT"):
        return AckBody(kind=AckKind.NEXT, next_request=body[4:].strip())
    if body.startswith(b"-NAK"):
        return AckBody(kind=AckKind.NAK, delay_ns=_nak_delay(body[4:]))
    if body == b"+WPI":
        return AckBody(kind=AckKind.PROGRESS)
    if body.startswith(b"+TERM"):
        return AckBody(kind=AckKind.TERM, reason=body[5:].strip().decode(errors="replace"))
    return None
