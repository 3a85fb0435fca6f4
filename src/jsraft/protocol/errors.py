"""Errors of the NATS client protocol, and the `-ERR` texts nats-server sends (layer L4).

Owns: `ProtocolError` and its two sides, as h11 separates them — `LocalProtocolError` (we asked the
serializer for something the protocol cannot carry: a bug or bad input on our side) and
`RemoteProtocolError` (the peer sent bytes that break the protocol: its connection must close). Each
remote error carries `err_text`, the text nats-server puts in `-ERR '<text>'` for the same condition, or
None when nats-server closes that connection without a word (it logs "processPub Parse Error" and the
like, and sends nothing). Also the `ERR_*` texts of the non-fatal and connection-level errors, spelled
exactly as nats-server v2.10 spells them (`server/client.go`, `server/errors.go`).

Codes: 20700–20799 belong to the client protocol and client connections (jsraft.errors invariant 1).

Invariants:
  1. An `err_code` here is never reused or renumbered.
  2. Every error the parser raises for any input is a `RemoteProtocolError` (the fuzz tests hold it to
     this): a client can close its own connection, never crash the node.

Imports: L0 only. Reference: nats-server `server/parser.go`, `server/client.go`, `server/errors.go`.
"""

from __future__ import annotations

from jsraft.errors import JsraftError

# Fatal: nats-server sends these, then closes the connection.
ERR_UNKNOWN_OPERATION = "Unknown Protocol Operation"
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"  # ErrMaxControlLine (lower case since v2.2)
ERR_MAX_PAYLOAD = "Maximum Payload Violation"
ERR_STALE_CONNECTION = "Stale Connection"
ERR_SLOW_CONSUMER = "Slow Consumer"
ERR_BAD_CLIENT_PROTOCOL = "invalid client protocol"
ERR_NO_RESPONDERS_REQUIRES_HEADERS = "no responders requires headers support"
ERR_MAX_CONNECTIONS = "maximum connections exceeded"
ERR_AUTHORIZATION = "Authorization Violation"
ERR_AUTH_TIMEOUT = "Authentication Timeout"
# Not fatal: nats-server sends these and keeps the connection.
ERR_INVALID_SUBJECT = "Invalid Subject"
ERR_INVALID_PUBLISH_SUBJECT = "Invalid Publish Subject"
ERR_MAX_SUBSCRIPTIONS = "maximum subscriptions exceeded"


class ProtocolError(JsraftError):
    """Base of the client protocol's errors. `err_text`: what to send as `-ERR`, or None for nothing."""

    err_code = 20700
    http_code = 400
    default_description = "NATS protocol error"
    err_text: str | None = None


class LocalProtocolError(ProtocolError):
    """We tried to serialize something the protocol cannot carry (a subject with a space, a payload over
    the peer's `max_payload`, an event of the other side)."""

    err_code = 20701
    default_description = "cannot serialize this NATS protocol event"


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol; its connection is closed after `err_text` (if any) is sent."""

    err_code = 20702
    default_description = "peer broke the NATS protocol"


class UnknownOperation(RemoteProtocolError):
    """An operation name this side does not accept, or a payload not followed by CRLF (nats-server's
    `parseErr`)."""

    err_code = 20703
    default_description = "unknown protocol operation"
    err_text = ERR_UNKNOWN_OPERATION


class ControlLineTooLong(RemoteProtocolError):
    """A control line (the arguments of one operation) longer than `max_control_line`."""

    err_code = 20704
    default_description = "maximum control line exceeded"
    err_text = ERR_MAX_CONTROL_LINE


class PayloadTooLarge(RemoteProtocolError):
    """A `PUB`/`HPUB`/`MSG`/`HMSG` announcing more than `max_payload` bytes (headers included)."""

    err_code = 20705
    default_description = "maximum payload exceeded"
    err_text = ERR_MAX_PAYLOAD


class MalformedArguments(RemoteProtocolError):
    """A known operation whose arguments do not parse: wrong count, a size that is not a number, a header
    size over the total, a CONNECT that is not a JSON object. nats-server closes without `-ERR`."""

    err_code = 20706
    default_description = "malformed protocol arguments"


class HeadersNotSupported(RemoteProtocolError):
    """`HPUB` on a connection whose CONNECT did not ask for headers (nats-server:
    `ErrMsgHeadersNotSupported`, closed without `-ERR`)."""

    err_code = 20707
    default_description = "message headers not supported"


class MalformedHeaders(RemoteProtocolError):
    """A header block that is not `NATS/1.0[ status[ description]]\\r\\n(name: value\\r\\n)*\\r\\n`."""

    err_code = 20708
    default_description = "malformed message headers"
