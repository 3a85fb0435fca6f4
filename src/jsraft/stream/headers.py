"""NATS message headers the stream leader acts on, and a small strict parser for them (layer L3).

Owns: the header names JetStream reads on publish (spelled exactly as nats-server spells them) and
`parse_headers`, which reads a NATS header block::

    NATS/1.0[ status[ description]]\\r\\n
    Key: value\\r\\n
    ...
    \\r\\n

Invariants:
  1. Names match case-sensitively, as nats-server's `getHeader` does: `nats-msg-id` is not `Nats-Msg-Id`.
  2. The first occurrence of a name wins (nats-server reads the first); values are stripped of spaces.
  3. A block that does not start with `NATS/1.0` or does not end with an empty line is refused
     (`BadHeaders`); a parser that guessed would let two replicas of a client disagree.
  4. Publishes without any `Nats-` header skip parsing entirely (the common case on the hot path).

Imports: L0, stdlib. Reference: ADR-4 (NATS message headers); nats-server `server/stream.go`
(`JSMsgId`, `JSExpectedStream`, `JSExpectedLastSeq`, `JSExpectedLastSubjSeq`, `JSExpectedLastMsgId`,
`JSMsgRollup`, `JSMessageTTL`).
"""

from __future__ import annotations

from jsraft.errors import BadRequest

MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
ROLLUP_SUBJECT = "sub"
ROLLUP_ALL = "all"
TTL = "Nats-TTL"  # ADR-43 per-message TTL (see `stream.ttl`)

_PREFIX = b"NATS/1.0"
_MARKER = b"Nats-"


class BadHeaders(BadRequest):
    """A header block that is not `NATS/1.0` framed (JetStream's generic bad request, 10003)."""

    default_description = "invalid message headers"


def parse_headers(headers: bytes) -> dict[str, str]:
    """The `Nats-*` headers of a header block (first occurrence wins); `{}` when there are none."""
    if not headers or _MARKER not in headers:
        if headers and not headers.startswith(_PREFIX):
            raise BadHeaders("message headers do not start with NATS/1.0")
        return {}
    if not headers.startswith(_PREFIX):
        raise BadHeaders("message headers do not start with NATS/1.0")
    if not headers.endswith(b"\r\n\r\n"):
        raise BadHeaders("message headers do not end with an empty line")
    try:
        text = headers.decode()
    except UnicodeDecodeError:
        raise BadHeaders("message headers are not UTF-8") from None
    found: dict[str, str] = {}
    for line in text[:-4].split("\r\n")[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadHeaders(f"malformed header line {line[:64]!r}")
        if name.startswith("Nats-") and name not in found:
            found[name] = value.strip()
    return found


def set_header(headers: bytes, name: str, value: str) -> bytes:
    """`headers` with `name: value` as its last line, any earlier `name` line dropped (nats-server's
    `setHeader`); a new `NATS/1.0` block when there are no headers. The block must be well framed
    (`parse_headers` has read it)."""
    line = f"{name}: {value}\r\n".encode()
    if not headers:
        return _PREFIX + b"\r\n" + line + b"\r\n"
    first, _, rest = headers[:-2].partition(b"\r\n")
    prefix = name.encode() + b":"
    kept = b"".join(part + b"\r\n" for part in rest.split(b"\r\n") if part and not part.startswith(prefix))
    return first + b"\r\n" + kept + line + b"\r\n"


def parse_sequence(value: str, name: str) -> int:
    """A header value that must be an unsigned 64-bit decimal (as nats-server's `parseInt64` reads it)."""
    if not value.isdigit() or not value.isascii() or len(value) > 20 or int(value) >= 1 << 64:
        raise BadHeaders(f"header {name} must be an unsigned integer, not {value[:32]!r}")
    return int(value)
