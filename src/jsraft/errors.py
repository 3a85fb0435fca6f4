"""Error classes with stable numeric codes (layer L0).

Owns: the exception tree every other module raises. Operating errors — bad input, damaged files, a
peer that misbehaves — are subclasses of `JsraftError` and carry a stable `err_code`. Where JetStream
defines a code for the same condition (nats-server `server/errors.json`), that number is used, so a
client sees the same `err_code` from jsraft as from nats-server. Codes jsraft adds start at 20000.

Programmer errors are not in this tree: they raise `InvariantViolation` through `invariant()`, which
is never caught, because a broken invariant means the process state can no longer be trusted.

Invariants:
  1. An `err_code` is never reused for a different condition and never changes once released.
  2. `http_code` follows JetStream's `code` field for the same condition (400, 404, 500, 503).

Imports: stdlib only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class InvariantViolation(AssertionError):
    """A bug: an internal invariant did not hold. Never caught by jsraft code."""


def invariant(condition: object, why: str) -> None:
    """Crash with `why` when `condition` is false. Unlike `assert`, survives `python -O`."""
    if not condition:
        raise InvariantViolation(why)


class JsraftError(Exception):
    """Base of every operating error. `err_code` is stable; `description` is for humans."""

    err_code: int = 20000
    http_code: int = 500
    default_description: str = "jsraft error"

    def __init__(self, description: str | None = None) -> None:
        self.description = description if description is not None else self.default_description
        super().__init__(self.description)

    def to_api(self) -> dict[str, object]:
        """The JetStream API error object: `{"code", "err_code", "description"}`."""
        return {"code": self.http_code, "err_code": self.err_code, "description": self.description}


# --- Bad input (the caller's request is wrong; nothing changed) -----------------------------------


class BadRequest(JsraftError):
    err_code = 10003
    http_code = 400
    default_description = "bad request"


class InvalidJSON(BadRequest):
    err_code = 10025
    default_description = "invalid JSON"


class InvalidConfig(BadRequest):
    """A config (stream, consumer, node) failed strict decoding or cross-field validation."""

    err_code = 10052
    # nats-server's JSStreamInvalidConfigF answers with code 500, not its parent's 400 (invariant 2).
    http_code = 500
    default_description = "invalid stream configuration"


class InvalidSubject(BadRequest):
    err_code = 20001
    default_description = "invalid subject"


class MessageTooLarge(BadRequest):
    err_code = 10054
    default_description = "message size exceeds maximum allowed"


class SequenceOutOfOrder(BadRequest):
    """An append whose sequence is not `last_seq + 1`: the replica and its log disagree."""

    err_code = 20002
    default_description = "sequence out of order"

    def __init__(self, expected: int, got: int) -> None:
        self.expected = expected
        self.got = got
        super().__init__(f"sequence out of order: expected {expected}, got {got}")


# --- Store outcomes ------------------------------------------------------------------------------


class StreamNotFound(JsraftError):
    err_code = 10059
    http_code = 404
    default_description = "stream not found"


class NoMessageFound(JsraftError):
    err_code = 10037
    http_code = 404
    default_description = "no message found"


class StoreFailed(JsraftError):
    """JetStream's generic store failure (`JSStreamStoreFailedF`); the description names the cause."""

    err_code = 10077
    http_code = 503
    default_description = "store failed"


class MaxMsgsExceeded(StoreFailed):
    """`discard: new` and the stream is at `max_msgs` (nats-server: `ErrMaxMsgs`)."""

    default_description = "maximum messages exceeded"


class MaxBytesExceeded(StoreFailed):
    default_description = "maximum bytes exceeded"


class MaxMsgsPerSubjectExceeded(StoreFailed):
    default_description = "maximum messages per subject exceeded"


class StoreClosed(StoreFailed):
    default_description = "store is closed"


class MsgDeleteFailed(JsraftError):
    err_code = 10057
    http_code = 500
    default_description = "message delete failed"


# --- Damaged data ------------------------------------------------------------------------------


class CorruptRecord(JsraftError):
    """A stored record failed its CRC or framing; the bytes are not served."""

    err_code = 20010
    http_code = 500
    default_description = "corrupt record"


class DamagedSequence(CorruptRecord):
    """Reading a sequence whose record is damaged or missing: the replica must fetch it from a peer."""

    err_code = 20011
    default_description = "damaged sequence"

    def __init__(self, seq: int, kind: str) -> None:
        self.seq = seq
        self.kind = kind
        super().__init__(f"sequence {seq} is damaged ({kind}); it must be repaired from a peer")


class BadFileFormat(CorruptRecord):
    """A file's magic or version byte is not one this build understands."""

    err_code = 20012
    default_description = "bad file format"


class StoreLocked(JsraftError):
    """Another live process holds the store directory (`disk.lock`): refuse to open it rather than let
    two processes append to the same files."""

    err_code = 20020
    default_description = "store directory is in use by another process"


class UnknownConfigField(InvalidConfig):
    """Strict decoding met a field this version does not know."""

    def __init__(self, fields: list[str], where: str) -> None:
        self.fields = fields
        self.where = where
        names = ", ".join(sorted(fields))
        super().__init__(f"unknown field(s) in {where}: {names}")



@contextlib.contextmanager
def naming_port(role: str, host: str, port: int) -> Iterator[None]:
    """Re-raise an `OSError` from opening a listener saying which one: "[Errno 98] Address already in use
    (client port 4222 on 127.0.0.1)". Still an `OSError` with the same errno, so callers handle it as before."""
    try:
        yield
    except OSError as error:
        raise OSError(error.errno, f"{error.strerror} ({role} port {port} on {host})") from None
