"""The buffered reader both protocol sides share: control lines, payloads, bounds (layer L4).

Owns: the receive buffer and the two things it waits for — a control line ending in LF (CR optional,
as nats-server accepts a bare LF from telnet users), and a payload of announced size followed by CRLF —
plus the bounds on both, and the error state. A subclass supplies the operation table (`_ops`: upper-case
operation name -> method turning the argument bytes into an event, or announcing a payload).

Invariants:
  1. Bounded: after `next_event()` returns `NEED_DATA`, the buffer holds at most `buffered_bytes_max`
     bytes (`max_control_line + LINE_SLACK_BYTES`, or `max_payload + 2` while a payload is pending).
     A control line that cannot fit raises `ControlLineTooLong` before it is complete.
  2. Split-invariant: the events (and the error class, if any) do not depend on how the bytes were cut
     into `receive_data` calls. The line-length check therefore looks at the whole line first, before the
     operation name, exactly as it looks at an incomplete one.
  3. After a `RemoteProtocolError` the reader is dead: every later `next_event()` raises the same error
     (h11's rule), and the buffer is released.
  4. Only `RemoteProtocolError` escapes `next_event()`; the fuzz tests feed it arbitrary bytes.

Imports: L0 (`limits`, via `errors`), stdlib. Reference: nats-server `server/parser.go` (`overMaxControlLineLimit`,
`parseSize`, `MSG_END_R`/`MSG_END_N`), h11 `_receivebuffer.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jsraft import limits
from jsraft.protocol.errors import (
    ControlLineTooLong, MalformedArguments, PayloadTooLarge, RemoteProtocolError, UnknownOperation,
)
from jsraft.protocol.events import NEED_DATA
from jsraft.protocol.wire import SIZE_DIGITS_MAX

MAX_CONTROL_LINE_DEFAULT = limits.control_line_bytes_max  # nats-server MAX_CONTROL_LINE_SIZE
MAX_PAYLOAD_DEFAULT = limits.payload_bytes_default  # nats-server MAX_PAYLOAD_SIZE
# Room for the operation name and the separators around the arguments, which nats-server does not count
# against max_control_line ("CONNECT" is the longest name, 7 bytes).
LINE_SLACK_BYTES = 16

# What an operation method returns: the event, or a payload to wait for and how to build the event.
Builder = Callable[[bytes], Any]


class PendingPayload:
    """A control line announced `size` payload bytes; `build(body)` makes the event from them."""

    __slots__ = ("size", "build")

    def __init__(self, size: int, build: Builder) -> None:
        self.size = size
        self.build = build


def parse_size(raw: bytes, what: str, line: bytes) -> int:
    """A non-negative decimal of at most 9 digits (nats-server `parseSize`), else `MalformedArguments`."""
    if not raw.isdigit() or len(raw) > SIZE_DIGITS_MAX:
        raise MalformedArguments(f"bad or missing {what} in {line[:64]!r}")
    return int(raw)


class Reader:
    """Bytes in, events out. Subclasses fill `_ops`; see the module invariants."""

    _ops: dict[bytes, Callable[[bytes, bytes], Any]]

    def __init__(self, *, max_control_line: int = MAX_CONTROL_LINE_DEFAULT,
                 max_payload: int = MAX_PAYLOAD_DEFAULT) -> None:
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self._buffer = bytearray()
        self._position = 0
        self._pending: PendingPayload | None = None
        self._error: RemoteProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._position

    @property
    def buffered_bytes_max(self) -> int:
        """Invariant 1's bound."""
        return max(self.max_control_line + LINE_SLACK_BYTES, self.max_payload + 2)

    def receive_data(self, data: bytes) -> None:
        """Append bytes read from the peer. An empty `data` means nothing (EOF is the caller's business)."""
        if self._error is None:
            self._buffer += data

    def next_event(self) -> Any:
        """The next complete event, or `NEED_DATA`; raises `RemoteProtocolError` (invariants 3, 4)."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except RemoteProtocolError as error:
            self._fail(error)
            raise

    def events(self) -> list[Any]:
        """Every complete event in the buffer (then the buffer is within its bound)."""
        found = []
        while (event := self.next_event()) is not NEED_DATA:
            found.append(event)
        return found

    def _fail(self, error: RemoteProtocolError) -> None:
        self._error = error
        self._buffer = bytearray()
        self._position = 0
        self._pending = None

    def _next(self) -> Any:
        pending = self._pending
        if pending is not None:
            return self._take_payload(pending)
        buffer, start = self._buffer, self._position
        newline = buffer.find(b"\n", start)
        if newline < 0:
            if len(buffer) - start > self.max_control_line + LINE_SLACK_BYTES:
                raise ControlLineTooLong(f"control line longer than {self.max_control_line} bytes")
            return self._need_data()
        end = newline - 1 if newline > start and buffer[newline - 1] == 13 else newline
        if newline + 1 - start > self.max_control_line + LINE_SLACK_BYTES:  # invariant 2
            raise ControlLineTooLong(f"control line longer than {self.max_control_line} bytes")
        line = bytes(buffer[start:end])
        self._position = newline + 1
        parts = line.split(None, 1)
        method = self._ops.get(parts[0].upper()) if parts and line[:1] not in (b" ", b"\t") else None
        if method is None:
            raise UnknownOperation(f"unknown protocol operation {line[:32]!r}")
        arg = parts[1] if len(parts) > 1 else b""
        if len(arg) > self.max_control_line:
            raise ControlLineTooLong(f"control line longer than {self.max_control_line} bytes")
        result = method(arg, line)
        if type(result) is PendingPayload:
            size = result.size
            if size > self.max_payload:
                raise PayloadTooLarge(f"payload of {size} bytes exceeds max_payload {self.max_payload}")
            begin = newline + 1
            stop = begin + size
            if len(buffer) >= stop + 2 and buffer[stop] == 13 and buffer[stop + 1] == 10:
                # The common case, the payload already here: one copy of it, no pending state.
                with memoryview(buffer) as view:
                    body = bytes(view[begin:stop])
                self._position = stop + 2
                return result.build(body)
            self._pending = result
            return self._take_payload(result)
        return result

    def _take_payload(self, pending: PendingPayload) -> Any:
        buffer, start = self._buffer, self._position
        end = start + pending.size
        if len(buffer) < end + 2:
            return self._need_data()
        if buffer[end:end + 2] != b"\r\n":
            raise UnknownOperation("payload not followed by CRLF")
        with memoryview(buffer) as view:  # one copy: a slice of the bytearray would be a second
            body = bytes(view[start:end])
        self._position = end + 2
        self._pending = None
        return pending.build(body)

    def _need_data(self) -> Any:
        if self._position:
            del self._buffer[:self._position]
            self._position = 0
        return NEED_DATA
