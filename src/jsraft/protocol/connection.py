"""The two ends of a NATS client connection, sans-IO: `ServerConnection` and `ClientConnection` (L4).

Owns: which operations each side accepts and how their arguments parse. `ServerConnection` is the
server's end: it parses what a client sends (CONNECT, PUB, HPUB, SUB, UNSUB, PING, PONG) and serializes
what a server sends. `ClientConnection` is the mirror image (INFO, MSG, HMSG, PING, PONG, +OK, -ERR in;
client operations out), for a future `jsraft.client` and for tests. Neither opens a socket, reads a clock
or draws a random number: bytes in, events out; events in, bytes out (h11's design).

Invariants:
  1. A `ServerConnection` accepts HPUB only after a CONNECT with `"headers": true` (nats-server closes a
     connection that sends HPUB without it, `ErrMsgHeadersNotSupported`).
  2. A `ClientConnection` adopts the `max_payload` of each INFO it parses (bounded by
     `limits.payload_bytes_max`): its reader accepts MSGs up to it and `send` refuses PUBs over it.
  3. Argument counts are exact: PUB 2–3, HPUB 3–4, SUB 2–3, UNSUB 1–2, MSG 3–4, HMSG 4–5; an HPUB/HMSG
     whose header size exceeds its total size is malformed. Anything else is `MalformedArguments`.
  4. A `ServerConnection` made with `ack_runs` reads consecutive `PUB $JS.ACK.<...> 0` with no reply
     subject and an empty payload (JetStream acks as nats-py writes them, hundreds in one write) as one
     `AckRun` of at most `ACK_RUN_MAX`: its subjects, each as a `Pub(subject, None, b"")`, are exactly
     the events read without `ack_runs`, in order. Where a run ends depends on what was buffered (a run
     never waits for more bytes); the flattened events do not (the reader's invariant 2).

Imports: L0 (`limits`), stdlib, protocol siblings. Reference: nats-server `server/client.go`
(`processPub`, `processHeaderPub`, `parseSub`, `processUnsub`, `processConnect`), nats-py `protocol/parser.py`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsraft import limits
from jsraft.protocol.errors import HeadersNotSupported, MalformedArguments
from jsraft.protocol.events import AckRun, Connect, Err, Info, Msg, Ok, Ping, Pong, Pub, Sub, Unsub
from jsraft.protocol.reader import PendingPayload, Reader, parse_size
from jsraft.protocol.wire import SIZE_DIGITS_MAX, encode_client_event, encode_server_event, text_from_wire

_PING, _PONG, _OK = Ping(), Pong(), Ok()
ACK_RUN_MAX = 4096  # acks in one `AckRun` (invariant 4): a bound on the work one event hands on
# The form of an ack a run takes after its first (invariant 4): spaces or tabs between the parts (nats-py
# writes its empty reply as a second space), CRLF line and payload ends, the subject a token
# `bytes.split()` keeps whole. Any other form ends the run and is parsed the general way (same events).
_ACK_LINE = re.compile(rb"PUB[ \t]+(\$JS\.ACK\.[^ \t\n\r\x0b\x0c]+)[ \t]+0\r\n\r\n")


def _json_object(arg: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(arg)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise MalformedArguments(f"{what} is not JSON: {str(error)[:80]}") from None
    if not isinstance(value, dict):
        raise MalformedArguments(f"{what} is not a JSON object")
    return value


def _split(arg: bytes, line: bytes, counts: tuple[int, ...]) -> list[bytes]:
    args = arg.split()
    if len(args) not in counts:
        raise MalformedArguments(f"wrong number of arguments in {line[:64]!r}")
    return args


def _sizes(header_raw: bytes, total_raw: bytes, line: bytes) -> tuple[int, int]:
    header_size = parse_size(header_raw, "header size", line)
    total_size = parse_size(total_raw, "total size", line)
    if header_size > total_size:
        raise MalformedArguments(f"header size larger than total size in {line[:64]!r}")
    return header_size, total_size


class ServerConnection(Reader):
    """The server's end of one client connection (module invariants 1 and 3)."""

    def __init__(self, *, ack_runs: bool = False, **bounds: int) -> None:
        super().__init__(**bounds)
        self.headers_enabled = False
        self.ack_runs = ack_runs  # invariant 4
        self._ops = {b"PUB": self._pub, b"HPUB": self._hpub, b"SUB": self._sub, b"UNSUB": self._unsub,
                     b"PING": self._ping, b"PONG": self._pong, b"CONNECT": self._connect}

    def _next(self) -> Any:
        # The hot path (every publish, every JetStream ack): a `PUB` whose control line and payload are both
        # buffered is parsed in one pass, without the generic path's line copy, operation lookup and
        # payload closure. Anything else — another operation, a payload still to come, any argument the
        # generic path would refuse — falls through untouched to `Reader._next`, which parses the same bytes
        # from the start: the events and errors are the generic path's (tests/protocol/test_pub_fast_path.py).
        buffer, start = self._buffer, self._position
        if self._pending is None and buffer.startswith(b"PUB ", start):
            newline = buffer.find(b"\n", start)
            if newline >= 0:
                end = newline - 1 if buffer[newline - 1] == 13 else newline
                if end - start - 4 <= self.max_control_line:  # the generic path's two length checks pass
                    args = buffer[start + 4:end].split()
                    count = len(args)
                    raw = args[-1] if count == 2 or count == 3 else b""
                    if raw.isdigit() and len(raw) <= SIZE_DIGITS_MAX:
                        size = int(raw)
                        stop = newline + 1 + size
                        if size <= self.max_payload and len(buffer) >= stop + 2 \
                                and buffer[stop] == 13 and buffer[stop + 1] == 10:
                            if size:
                                with memoryview(buffer) as view:
                                    body = bytes(view[newline + 1:stop])
                            else:
                                body = b""  # a JetStream ack: no view to make and release
                            self._position = stop + 2
                            subject = args[0].decode("utf-8", "surrogateescape")
                            if not size and count == 2 and self.ack_runs and subject.startswith("$JS.ACK."):
                                return self._ack_run(subject)
                            return Pub(subject, args[1].decode("utf-8", "surrogateescape") if count == 3 else None,
                                       body)
        return Reader._next(self)

    def _ack_run(self, first: str) -> Any:
        """Invariant 4: `first` (an ack just parsed) and the acks buffered right behind it, as one `AckRun`;
        a lone `Pub` when none is. The run takes only acks of `_ACK_LINE`'s form within `max_control_line`
        (one match each), which the one-pass parse above would take as such an ack, and ends at anything
        else, which the next call parses as usual."""
        subjects = [first]
        buffer, position = self._buffer, self._position
        line_max = self.max_control_line + 8  # "PUB " and the three CRLF-ended parts around the arguments
        match = _ACK_LINE.match
        while len(subjects) < ACK_RUN_MAX:
            found = match(buffer, position)
            if found is None:
                break
            end = found.end()
            if end - position > line_max:
                break
            subjects.append(found.group(1).decode("utf-8", "surrogateescape"))
            position = end
        if len(subjects) == 1:
            return Pub(first, None, b"")
        self._position = position
        return AckRun(subjects)

    def send(self, event: Any) -> bytes:
        """Bytes for a server event (INFO, MSG/HMSG, PING, PONG, +OK, -ERR); `LocalProtocolError` otherwise."""
        return encode_server_event(event)

    def _connect(self, arg: bytes, line: bytes) -> Connect:
        options = _json_object(arg, "CONNECT")
        self.headers_enabled = options.get("headers") is True
        return Connect(options)

    def _pub(self, arg: bytes, line: bytes) -> PendingPayload:
        args = arg.split()  # the hot path: `_split` and `text_from_wire` inlined
        count = len(args)
        if count != 2 and count != 3:
            raise MalformedArguments(f"wrong number of arguments in {line[:64]!r}")
        size = parse_size(args[-1], "size", line)
        subject = args[0].decode("utf-8", "surrogateescape")
        reply = args[1].decode("utf-8", "surrogateescape") if count == 3 else None
        return PendingPayload(size, lambda body: Pub(subject, reply, body))

    def _hpub(self, arg: bytes, line: bytes) -> PendingPayload:
        if not self.headers_enabled:
            raise HeadersNotSupported("HPUB on a connection that did not CONNECT with headers")
        args = _split(arg, line, (3, 4))
        header_size, total_size = _sizes(args[-2], args[-1], line)
        subject = text_from_wire(args[0])
        reply = text_from_wire(args[1]) if len(args) == 4 else None
        return PendingPayload(total_size, lambda body: Pub(subject, reply, body[header_size:], body[:header_size]))

    def _sub(self, arg: bytes, line: bytes) -> Sub:
        args = _split(arg, line, (2, 3))
        queue = text_from_wire(args[1]) if len(args) == 3 else None
        return Sub(text_from_wire(args[0]), text_from_wire(args[-1]), queue)

    def _unsub(self, arg: bytes, line: bytes) -> Unsub:
        args = _split(arg, line, (1, 2))
        max_msgs = parse_size(args[1], "max_msgs", line) if len(args) == 2 else None
        return Unsub(text_from_wire(args[0]), max_msgs)

    def _ping(self, arg: bytes, line: bytes) -> Ping:
        return _PING

    def _pong(self, arg: bytes, line: bytes) -> Pong:
        return _PONG


class ClientConnection(Reader):
    """The client's end of one connection (module invariants 2 and 3)."""

    def __init__(self, **bounds: int) -> None:
        super().__init__(**bounds)
        self._ops = {b"MSG": self._msg, b"HMSG": self._hmsg, b"PING": self._ping, b"PONG": self._pong,
                     b"INFO": self._info, b"+OK": self._ok, b"-ERR": self._err}

    def send(self, event: Any) -> bytes:
        """Bytes for a client event (CONNECT, PUB/HPUB, SUB, UNSUB, PING, PONG); a PUB over the server's
        `max_payload` raises `LocalProtocolError`."""
        return encode_client_event(event, self.max_payload)

    def _info(self, arg: bytes, line: bytes) -> Info:
        options = _json_object(arg, "INFO")
        max_payload = options.get("max_payload")
        if type(max_payload) is int and max_payload > 0:
            self.max_payload = min(max_payload, limits.payload_bytes_max)  # invariant 2
        return Info(options)

    def _msg(self, arg: bytes, line: bytes) -> PendingPayload:
        args = _split(arg, line, (3, 4))
        size = parse_size(args[-1], "size", line)
        subject, sid = text_from_wire(args[0]), text_from_wire(args[1])
        reply = text_from_wire(args[2]) if len(args) == 4 else None
        return PendingPayload(size, lambda body: Msg(subject, sid, reply, body))

    def _hmsg(self, arg: bytes, line: bytes) -> PendingPayload:
        args = _split(arg, line, (4, 5))
        header_size, total_size = _sizes(args[-2], args[-1], line)
        subject, sid = text_from_wire(args[0]), text_from_wire(args[1])
        reply = text_from_wire(args[2]) if len(args) == 5 else None
        return PendingPayload(total_size,
                              lambda body: Msg(subject, sid, reply, body[header_size:], body[:header_size]))

    def _err(self, arg: bytes, line: bytes) -> Err:
        text = text_from_wire(arg)
        if len(text) >= 2 and text[0] == text[-1] == "'":
            text = text[1:-1]
        return Err(text)

    def _ping(self, arg: bytes, line: bytes) -> Ping:
        return _PING

    def _pong(self, arg: bytes, line: bytes) -> Pong:
        return _PONG

    def _ok(self, arg: bytes, line: bytes) -> Ok:
        return _OK
