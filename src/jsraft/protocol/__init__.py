"""The NATS client protocol, sans-IO (layer L4): bytes in, events out; events in, bytes out.

In the style of h11: no sockets, no trio, no clock, no global random. `ServerConnection` parses what a
client sends and serializes what a server sends; `ClientConnection` does the reverse. Both keep bounded
buffers (`max_control_line`, `max_payload`) and fail with a `RemoteProtocolError` whose `err_text` is the
`-ERR` text nats-server sends for the same input.

Modules: `events` (one class per operation, `NEED_DATA`), `reader` (shared buffering and bounds),
`connection` (the two ends), `wire` (serializers), `headers` (the `NATS/1.0` header block), `errors`.

Imports: L0–L1, attrs, stdlib (DESIGN.md §1; no trio, socket or time: tests/test_architecture.py).
Reference: docs.nats.io "Client Protocol"; nats-server `server/parser.go`, `server/client.go`.
"""

from jsraft.protocol.connection import ClientConnection, ServerConnection
from jsraft.protocol.errors import (
    ControlLineTooLong, HeadersNotSupported, LocalProtocolError, MalformedArguments, MalformedHeaders,
    PayloadTooLarge, ProtocolError, RemoteProtocolError, UnknownOperation,
)
from jsraft.protocol.events import NEED_DATA, AckRun, Connect, Err, Info, Msg, Ok, Ping, Pong, Pub, Sub, Unsub
from jsraft.protocol.headers import NO_RESPONDERS_HEADERS, HeaderBlock, build_headers, parse_headers
from jsraft.protocol.reader import MAX_CONTROL_LINE_DEFAULT, MAX_PAYLOAD_DEFAULT

__all__ = [
    "MAX_CONTROL_LINE_DEFAULT", "MAX_PAYLOAD_DEFAULT", "NEED_DATA", "NO_RESPONDERS_HEADERS", "AckRun",
    "ClientConnection", "Connect", "ControlLineTooLong", "Err", "HeaderBlock", "HeadersNotSupported", "Info",
    "LocalProtocolError", "MalformedArguments", "MalformedHeaders", "Msg", "Ok", "PayloadTooLarge", "Ping", "Pong",
    "ProtocolError", "Pub", "RemoteProtocolError", "ServerConnection", "Sub", "Unsub", "UnknownOperation",
    "build_headers", "parse_headers",
]
