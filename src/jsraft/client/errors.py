"""Errors of `jsraft.client`, and JetStream API errors turned back into jsraft's error classes (layer L4).

Owns: the client's own operating errors (codes 20800–20899: connection failed or closed, no responders,
request timeout, slow consumer, an answer that does not parse) and `error_from_api`, which turns the
`{"code", "err_code", "description"}` object of a JetStream API answer into an exception. Where the
condition has a class at a layer the client may import (`jsraft.errors`, L0), that class is raised, so
`except StreamNotFound` works the same against the embedded context and over the wire. Conditions whose
classes live above the client (meta, server) come back as `ApiError`, which carries the remote
`err_code`, `http_code` and description unchanged.

Invariants:
  1. An `err_code` here is never reused or renumbered (jsraft.errors invariant 1); 20800–20899 belong
     to the client.
  2. `error_from_api` never loses the server's numbers: the exception's `err_code` and `http_code` are
     the answer's, whatever class is chosen.

Imports: L0 (`errors`), stdlib. Reference: nats-server `server/errors.json`; nats-py `nats.errors`.
"""

from __future__ import annotations

from typing import Any

from jsraft.errors import (
    BadFileFormat, BadRequest, CorruptRecord, InvalidConfig, InvalidJSON, InvalidSubject, JsraftError,
    MessageTooLarge, MsgDeleteFailed, NoMessageFound, StoreFailed, StreamNotFound,
)


class ClientError(JsraftError):
    """Base of the client's own errors."""

    err_code = 20800
    http_code = 500
    default_description = "NATS client error"


class ConnectionClosed(ClientError):
    """The connection is closed: by `close()`, by the server, or because the socket broke. Every pending
    and later operation on the client raises it."""

    err_code = 20801
    http_code = 503
    default_description = "connection closed"


class ConnectFailed(ClientError):
    """The TCP connection or the INFO/CONNECT/PING handshake did not succeed."""

    err_code = 20802
    http_code = 503
    default_description = "could not connect"


class NoResponders(ClientError):
    """A request reached no subscriber (the server's `NATS/1.0 503` status reply)."""

    err_code = 20803
    http_code = 503
    default_description = "no responders"


class RequestTimeout(ClientError):
    """No reply (or no PONG, for `flush`) within the timeout."""

    err_code = 20804
    http_code = 503
    default_description = "request timed out"


class SlowConsumer(ClientError):
    """A subscription's buffer was full and messages for it were dropped; `dropped` says how many."""

    err_code = 20805
    http_code = 503
    default_description = "slow consumer: messages dropped"

    def __init__(self, dropped: int, subject: str) -> None:
        self.dropped = dropped
        self.subject = subject
        super().__init__(f"slow consumer on {subject!r}: {dropped} message(s) dropped")


class BadResponse(ClientError):
    """A JetStream API answer that is not the JSON object the request expects."""

    err_code = 20806
    http_code = 500
    default_description = "malformed JetStream API response"


class ApiError(JsraftError):
    """A JetStream API error whose class the client cannot import (invariant 2): `err_code`, `http_code`
    and `description` are the server's (e.g. 10058 stream name in use, 10008 no leader)."""

    err_code = 20807  # only when the answer carried no err_code at all
    http_code = 500
    default_description = "JetStream API error"

    def __init__(self, http_code: int, err_code: int, description: str) -> None:
        self.http_code = http_code
        self.err_code = err_code
        super().__init__(description)


# err_code -> the L0 class for it. Only classes built from a description alone (SequenceOutOfOrder,
# DamagedSequence and UnknownConfigField take structured arguments and come back as their parents' codes).
_BY_CODE: dict[int, type[JsraftError]] = {
    cls.err_code: cls for cls in (
        BadRequest, InvalidJSON, InvalidConfig, InvalidSubject, MessageTooLarge, StreamNotFound, NoMessageFound,
        StoreFailed, MsgDeleteFailed, CorruptRecord, BadFileFormat,
    )
}


def error_from_api(error: Any) -> JsraftError:
    """The exception for an API error object (invariant 2); `BadResponse` if it is not one."""
    if not isinstance(error, dict) or type(error.get("err_code", 0)) is not int:
        return BadResponse(f"malformed error object in a JetStream API answer: {str(error)[:200]}")
    err_code = error.get("err_code") or ApiError.err_code
    http_code = error.get("code") if type(error.get("code")) is int else 500
    description = str(error.get("description", ""))
    cls = _BY_CODE.get(err_code)
    if cls is None:
        return ApiError(http_code, err_code, description)
    found = cls(description)
    found.http_code = http_code  # the server's, should it ever differ from the class's
    return found
