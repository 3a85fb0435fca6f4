"""A blocking NATS connection for bulk reads in Spark's Python workers (layer L6).

Owns: `BulkConnection` — a plain socket driven by `jsraft.protocol.ClientConnection` (the sans-IO core
`jsraft.client` is built on): handshake, one inbox subscription, publishing requests, and iterating
over the messages that arrive. A Spark task is synchronous and reads one reply stream at a time, so no
event loop sits between the socket and the parser: a receive of up to 1 MiB is parsed into every
message it holds in one pass, with no scheduling per message (what made the trio client read a
batch at ~10,000 messages/s).

Invariants:
  1. Every wait has a deadline (`timeout_s` per receive): a silent server raises `ReadFailed`, never hangs
     a task.
  2. Server PINGs are answered at once, so a long read is never dropped as a stale client.
  3. Messages for other subscriptions never exist (there is one); `-ERR` and a closed socket raise
     `ReadFailed` with the server's words.

Imports: stdlib, L4 `protocol`, L6 siblings.
Reference: the NATS client protocol (nats-server `server/client.go`).
"""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from jsraft.protocol import NEED_DATA, ClientConnection, Connect, Err, Info, Msg, Ping, Pong, Pub, Sub
from jsraft.spark.errors import ReadFailed

RECEIVE_BYTES = 1 << 20
_PING, _PONG = Ping(), Pong()


class BulkConnection:
    def __init__(self, url: str, *, timeout_s: float = 30.0) -> None:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        self.url = url
        self.timeout_s = timeout_s
        self.protocol = ClientConnection()
        try:
            self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout_s)
        except OSError as error:
            raise ReadFailed(f"cannot connect to {url}: {error}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.inbox = f"_INBOX.jsraft_spark.{secrets.token_hex(8)}"
        self._handshake()

    def _events(self) -> Iterator[Any]:
        """Every event as it is parsed; receives more when the buffer has no complete one (invariant 1)."""
        protocol = self.protocol
        while True:
            event = protocol.next_event()
            if event is NEED_DATA:
                try:
                    data = self.sock.recv(RECEIVE_BYTES)
                except OSError as error:  # socket.timeout included
                    raise ReadFailed(f"{self.url}: no answer within {self.timeout_s}s ({error})") from None
                if not data:
                    raise ReadFailed(f"{self.url} closed the connection")
                protocol.receive_data(data)
                continue
            yield event

    def _handshake(self) -> None:
        events = self._events()
        info = next(events)
        if not isinstance(info, Info):
            raise ReadFailed(f"{self.url} did not start with INFO")
        self.server_name = str(info.options.get("server_name", ""))
        options = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1,
                   "echo": False, "lang": "python-jsraft-spark", "name": "jsraft-spark"}
        self.sock.sendall(self.protocol.send(Connect(options)) + self.protocol.send(Sub(self.inbox, "1"))
                          + self.protocol.send(_PING))
        for event in events:
            if isinstance(event, Pong):
                return
            self._control(event)

    def _control(self, event: Any) -> None:
        if isinstance(event, Ping):
            self.sock.sendall(self.protocol.send(_PONG))  # invariant 2
        elif isinstance(event, Err):
            raise ReadFailed(f"{self.url}: -ERR {event.message}")

    def request(self, subject: str, body: dict[str, Any]) -> None:
        """Publish `body` (JSON) to `subject` with the inbox as its reply subject."""
        self.sock.sendall(self.protocol.send(Pub(subject, self.inbox, json.dumps(body).encode())))

    def replies(self) -> Iterator[Msg]:
        """The messages arriving on the inbox, in order, until the caller stops iterating."""
        for event in self._events():
            if type(event) is Msg:
                yield event
            else:
                self._control(event)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "BulkConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
