"""The events of the NATS client protocol: one class per operation (layer L4).

Owns: the values the parsers return and the serializers take. Client to server: `Connect`, `Pub` (PUB,
or HPUB when `headers` is not None), `AckRun` (consecutive JetStream acks, only from a `ServerConnection`
that asked for them), `Sub`, `Unsub`, `Ping`, `Pong`. Server to client: `Info`, `Msg` (MSG,
or HMSG when `headers` is not None), `Ping`, `Pong`, `Ok`, `Err`. `NEED_DATA` is what `next_event()`
returns when the buffer holds no complete event.

Invariants:
  1. Subjects, reply subjects, queue names and sids are `str`, decoded from the wire as UTF-8 with
     `surrogateescape`, so any bytes a client sends come back out unchanged when re-encoded.
  2. `headers` is the raw header block (`NATS/1.0 ...\\r\\n\\r\\n`) exactly as on the wire, or None for
     PUB/MSG; `b""` is an HPUB/HMSG with an empty header block, which nats-server accepts. Parse it
     with `jsraft.protocol.headers` when needed: the server forwards it without looking inside.
  3. Events are mutable slotted classes, not frozen ones: one is built per message on the hot path
     (STYLE.md, attrs). Nothing in jsraft mutates an event after building it.

Imports: attrs, stdlib.
"""

from __future__ import annotations

from typing import Any

import attrs


class _NeedData:
    """The sentinel `next_event()` returns when more bytes are needed."""

    _instance: "_NeedData | None" = None

    def __new__(cls) -> "_NeedData":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


@attrs.define
class Connect:
    """`CONNECT {json}`: the client's options (`verbose`, `pedantic`, `headers`, `no_responders`, ...)."""

    options: dict[str, Any]


@attrs.define
class Info:
    """`INFO {json}`: the server's description of itself and of this connection."""

    options: dict[str, Any]


@attrs.define
class Pub:
    """`PUB <subject> [reply] <size>` or, with headers, `HPUB <subject> [reply] <hdr_size> <total_size>`."""

    subject: str
    reply: str | None
    payload: bytes
    headers: bytes | None = None


class AckRun:
    """Consecutive `PUB $JS.ACK.<...> 0` (no reply subject, empty payload): the JetStream acks a client
    such as nats-py writes in one go, read as one event by a `ServerConnection` with `ack_runs`. The same
    as `Pub(subject, None, b"")` for each of `subjects`, in order (two at least)."""

    __slots__ = ("subjects",)

    def __init__(self, subjects: list[str]) -> None:
        self.subjects = subjects

    def __repr__(self) -> str:
        return f"AckRun({self.subjects!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is AckRun and other.subjects == self.subjects

    __hash__ = None  # type: ignore[assignment]  # mutable, like the attrs events


@attrs.define
class Sub:
    """`SUB <subject> [queue] <sid>`."""

    subject: str
    sid: str
    queue: str | None = None


@attrs.define
class Unsub:
    """`UNSUB <sid> [max_msgs]`: remove now, or after `max_msgs` messages in all were delivered."""

    sid: str
    max_msgs: int | None = None


@attrs.define
class Msg:
    """`MSG <subject> <sid> [reply] <size>` or `HMSG <subject> <sid> [reply] <hdr_size> <total_size>`."""

    subject: str
    sid: str
    reply: str | None
    payload: bytes
    headers: bytes | None = None


@attrs.define
class Ping:
    pass


@attrs.define
class Pong:
    pass


@attrs.define
class Ok:
    """`+OK`: sent after each operation to a client that connected with `verbose: true`."""


@attrs.define
class Err:
    """`-ERR '<message>'`."""

    message: str


ClientEvent = Connect | Pub | AckRun | Sub | Unsub | Ping | Pong
ServerEvent = Info | Msg | Ping | Pong | Ok | Err
Event = ClientEvent | ServerEvent
