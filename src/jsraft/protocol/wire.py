"""Serializing NATS protocol events to bytes (layer L4).

Owns: the byte layout of every operation, both directions, and the checks that keep an event from
producing bytes the other side would misread (`LocalProtocolError`): a token (subject, reply, queue,
sid) is non-empty and has no ASCII whitespace; `-ERR` text has no line break; a payload (headers
included) fits the peer's `max_payload`; CONNECT/INFO options are a JSON object.

`msg_head` is the server's hot path: the control line of MSG/HMSG for one subscriber, from tokens the
server already validated when they came in, so it checks nothing.

Invariants:
  1. For every event `e` a serializer accepts, parsing its bytes gives back an event equal to `e`
     (tests/protocol round-trips every event type).
  2. A serializer either returns the complete bytes of one operation or raises; it never returns part.

Imports: L0 (via `errors`), stdlib. Reference: docs.nats.io "Client Protocol".
"""

from __future__ import annotations

import json
from typing import Any

from jsraft.protocol.errors import LocalProtocolError
from jsraft.protocol.events import Connect, Err, Info, Msg, Ok, Ping, Pong, Pub, Sub, Unsub

CRLF = b"\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"
# bytes.split() splits on exactly these: a token must contain none of them or it would parse as two.
_WHITESPACE = frozenset(b" \t\n\r\x0b\x0c")
# nats-server's parseSize reads at most 9 digits (999,999,999); a longer number is "bad or missing size".
SIZE_DIGITS_MAX = 9
SIZE_MAX = 10**SIZE_DIGITS_MAX - 1


def wire_text(value: str) -> bytes:
    """A protocol string as wire bytes (events invariant 1)."""
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that did not come from the wire
        raise LocalProtocolError(f"{value[:64]!r} cannot be encoded as UTF-8") from None


def text_from_wire(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def encode_token(value: str, what: str) -> bytes:
    """`value` as one protocol token, or `LocalProtocolError` naming `what`."""
    if not isinstance(value, str) or not value:
        raise LocalProtocolError(f"{what} must be a non-empty string")
    raw = wire_text(value)
    if not _WHITESPACE.isdisjoint(raw):
        raise LocalProtocolError(f"{what} {value[:64]!r} contains whitespace")
    return raw


def _check_body(headers: bytes | None, payload: bytes, max_payload: int | None) -> int:
    size = len(payload) + (len(headers) if headers is not None else 0)
    if max_payload is not None and size > max_payload:
        raise LocalProtocolError(f"message of {size} bytes exceeds max_payload {max_payload}")
    return size


def _encode_json(options: dict[str, Any], what: str) -> bytes:
    if not isinstance(options, dict):
        raise LocalProtocolError(f"{what} options must be a dict")
    try:
        return json.dumps(options, separators=(",", ":")).encode()
    except (TypeError, ValueError) as error:
        raise LocalProtocolError(f"{what} options are not JSON: {error}") from None


def msg_head(subject: bytes, sid: bytes, reply: bytes | None, headers: bytes | None, payload_bytes: int) -> bytes:
    """The control line of a MSG (or HMSG when `headers` is not None); the caller sends headers, payload
    and CRLF after it. No checks: the server validated the tokens when they arrived."""
    if headers is None:
        if reply:
            return b"MSG %s %s %s %d\r\n" % (subject, sid, reply, payload_bytes)
        return b"MSG %s %s %d\r\n" % (subject, sid, payload_bytes)
    total = len(headers) + payload_bytes
    if reply:
        return b"HMSG %s %s %s %d %d\r\n" % (subject, sid, reply, len(headers), total)
    return b"HMSG %s %s %d %d\r\n" % (subject, sid, len(headers), total)


def encode_msg(event: Msg, max_payload: int | None = None) -> bytes:
    _check_body(event.headers, event.payload, max_payload)
    subject = encode_token(event.subject, "subject")
    sid = encode_token(event.sid, "sid")
    reply = encode_token(event.reply, "reply subject") if event.reply is not None else None
    head = msg_head(subject, sid, reply, event.headers, len(event.payload))
    return b"".join((head, event.headers or b"", event.payload, CRLF))


def encode_pub(event: Pub, max_payload: int | None = None) -> bytes:
    size = _check_body(event.headers, event.payload, max_payload)
    subject = encode_token(event.subject, "subject")
    args = [subject, encode_token(event.reply, "reply subject")] if event.reply is not None else [subject]
    if event.headers is None:
        head = b"PUB %s %d\r\n" % (b" ".join(args), size)
    else:
        head = b"HPUB %s %d %d\r\n" % (b" ".join(args), len(event.headers), size)
    return b"".join((head, event.headers or b"", event.payload, CRLF))


def encode_sub(event: Sub) -> bytes:
    args = [encode_token(event.subject, "subject")]
    if event.queue is not None:
        args.append(encode_token(event.queue, "queue group"))
    args.append(encode_token(event.sid, "sid"))
    return b"SUB %s\r\n" % b" ".join(args)


def encode_unsub(event: Unsub) -> bytes:
    sid = encode_token(event.sid, "sid")
    if event.max_msgs is None:
        return b"UNSUB %s\r\n" % sid
    if not isinstance(event.max_msgs, int) or not 0 <= event.max_msgs <= SIZE_MAX:
        raise LocalProtocolError(f"max_msgs must be 0..{SIZE_MAX}")
    return b"UNSUB %s %d\r\n" % (sid, event.max_msgs)


def encode_err(event: Err) -> bytes:
    raw = wire_text(event.message)
    if b"\r" in raw or b"\n" in raw:
        raise LocalProtocolError("-ERR text must be one line")
    return b"-ERR '%s'\r\n" % raw



def encode_client_event(event: Any, max_payload: int | None = None) -> bytes:
    """Bytes a client sends for `event` (CONNECT, PUB/HPUB, SUB, UNSUB, PING, PONG)."""
    kind = type(event)
    if kind is Pub:
        return encode_pub(event, max_payload)
    if kind is Sub:
        return encode_sub(event)
    if kind is Unsub:
        return encode_unsub(event)
    if kind is Ping:
        return PING
    if kind is Pong:
        return PONG
    if kind is Connect:
        return b"CONNECT %s\r\n" % _encode_json(event.options, "CONNECT")
    raise LocalProtocolError(f"a client does not send {kind.__name__}")


def encode_server_event(event: Any, max_payload: int | None = None) -> bytes:
    """Bytes a server sends for `event` (INFO, MSG/HMSG, PING, PONG, +OK, -ERR)."""
    kind = type(event)
    if kind is Msg:
        return encode_msg(event, max_payload)
    if kind is Ping:
        return PING
    if kind is Pong:
        return PONG
    if kind is Ok:
        return OK
    if kind is Err:
        return encode_err(event)
    if kind is Info:
        return b"INFO %s\r\n" % _encode_json(event.options, "INFO")
    raise LocalProtocolError(f"a server does not send {kind.__name__}")
