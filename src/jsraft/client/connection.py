"""`connect` and `Client`: one NATS client connection on trio, over the sans-IO `ClientConnection` (L4).

Owns: the TCP connection to a server and its lifecycle — the handshake (INFO in; CONNECT with headers
and no-responders; PING, PONG), the reader task that turns bytes into events (MSG/HMSG to subscriptions,
PING answered, PONG to `flush` waiters, `-ERR` kept as `last_error`), writes (`publish`, SUB, UNSUB) and
the closing. The JetStream API on top is `jsraft.client.jetstream`; subscriptions and messages are in
`subscription`, request/reply in `inbox`.

The reader runs as a trio *system* task (`trio.lowlevel.spawn_system_task`), so `client = await
connect(url)` needs no nursery; it is cancelled when `close()` is called or the `trio.run` ends.

Invariants:
  1. One writer at a time: every write goes through `_send` under `_send_lock`, so control lines and
     payloads of concurrent callers never interleave.
  2. The reader never raises out of its task (a system task's exception would crash the whole run):
     whatever ends it becomes the connection's error, after which every pending and later operation
     raises `ConnectionClosed` carrying the reason. No reconnects.
  3. A PONG answers the oldest `flush` waiting (the server answers PINGs in order), so `flush()`
     returning means the server has processed everything this client sent before it.
  4. Bounded: the protocol reader's buffers (max control line, the server's `max_payload`), each
     subscription's buffer (`pending_msgs_max`), the PINGs in flight (one per `flush` caller).

Imports: stdlib, trio, L0 (`errors`), L1 (`subjects`), L4 `protocol`, client siblings.
Reference: docs.nats.io "Client Protocol"; nats-py `nats.aio.client.Client`.
"""

from __future__ import annotations

import collections
import logging
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from jsraft import __version__, subjects
from jsraft.client.errors import ClientError, ConnectFailed, ConnectionClosed, RequestTimeout
from jsraft.client.inbox import Responses, new_inbox_prefix
from jsraft.client.subscription import Msg, Subscription
from jsraft.protocol import (
    NEED_DATA, ClientConnection, Connect, Err, Info, Ping, Pong, Pub, RemoteProtocolError, Sub, Unsub,
    build_headers,
)
from jsraft.protocol.events import Msg as MsgEvent

if TYPE_CHECKING:
    from jsraft.client.jetstream import JetStreamContext

log = logging.getLogger("jsraft.client")

DEFAULT_URL = "nats://127.0.0.1:4222"
DEFAULT_PORT = 4222
PENDING_MSGS_MAX_DEFAULT = 65536  # per subscription (nats-py: 512 * 1024 by default, ours is lower)
RECEIVE_BYTES = 65536
CLOSE_FLUSH_S = 1.0  # close() first waits this long at most for the server to have read what we sent
_PING, _PONG = Ping(), Pong()


def parse_url(url: str) -> tuple[str, int]:
    """`(host, port)` of `nats://host:port`, `host:port` or `host`; `ConnectFailed` otherwise."""
    parsed = urllib.parse.urlsplit(url if "://" in url else f"nats://{url}")
    if parsed.scheme != "nats":
        raise ConnectFailed(f"unsupported URL scheme in {url!r} (only nats://)")
    try:
        port = parsed.port or DEFAULT_PORT
    except ValueError:
        raise ConnectFailed(f"bad port in {url!r}") from None
    if not parsed.hostname:
        raise ConnectFailed(f"no host in {url!r}")
    return parsed.hostname, port


async def connect(url: str = DEFAULT_URL, *, name: str | None = None, connect_timeout_s: float = 5.0,
                  pending_msgs_max: int = PENDING_MSGS_MAX_DEFAULT) -> "Client":
    """A connected `Client`: TCP, then INFO / CONNECT / PING / PONG, within `connect_timeout_s`."""
    host, port = parse_url(url)
    protocol = ClientConnection()
    try:
        with trio.fail_after(connect_timeout_s):
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError as error:
                raise ConnectFailed(f"cannot connect to {url}: {error}") from None
            try:
                info = await _handshake(stream, protocol, name)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
    except trio.TooSlowError:
        raise ConnectFailed(f"no connection to {url} within {connect_timeout_s}s") from None
    client = Client(stream, protocol, info, url=url, name=name, pending_msgs_max=pending_msgs_max)
    trio.lowlevel.spawn_system_task(client._read_loop, name=f"jsraft.client reader {url}")
    return client


async def _next_event(stream: trio.SocketStream, protocol: ClientConnection) -> Any:
    while (event := protocol.next_event()) is NEED_DATA:
        data = await stream.receive_some(RECEIVE_BYTES)
        if not data:
            raise ConnectFailed("the server closed the connection during the handshake")
        protocol.receive_data(data)
    return event


async def _handshake(stream: trio.SocketStream, protocol: ClientConnection, name: str | None) -> dict[str, Any]:
    try:
        first = await _next_event(stream, protocol)
        if not isinstance(first, Info):
            raise ConnectFailed(f"the server did not start with INFO but {type(first).__name__}")
        options = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1,
                   "echo": True, "lang": "python-jsraft", "version": __version__}
        if name is not None:
            options["name"] = name
        await stream.send_all(protocol.send(Connect(options)) + protocol.send(_PING))
        while not isinstance(event := await _next_event(stream, protocol), Pong):
            if isinstance(event, Err):
                raise ConnectFailed(f"the server refused the connection: {event.message}")
            if isinstance(event, Ping):
                await stream.send_all(protocol.send(_PONG))
    except (RemoteProtocolError, trio.BrokenResourceError, OSError) as error:
        raise ConnectFailed(f"handshake failed: {error}") from None
    return first.options


class Client:
    """A NATS connection. Build with `await connect(url)`; use as `async with` to close at the end."""

    def __init__(self, stream: trio.SocketStream, protocol: ClientConnection, info: dict[str, Any], *, url: str,
                 name: str | None, pending_msgs_max: int) -> None:
        self.url = url
        self.name = name
        self.server_info = info
        self.last_error: str | None = None  # the last `-ERR` text the server sent
        self.pending_msgs_max = pending_msgs_max
        self._stream = stream
        self._protocol = protocol
        self._send_lock = trio.StrictFIFOLock()
        self._subs: dict[str, Subscription | Responses] = {}
        self._next_sid = 0
        self._responses: Responses | None = None
        self._pongs: collections.deque[trio.Event] = collections.deque()
        self._pongs_owed = 0
        self._error: ConnectionClosed | None = None
        self._reader_scope = trio.CancelScope()
        self._reader_done = trio.Event()

    def __repr__(self) -> str:
        return f"Client(url={self.url!r}, closed={self.is_closed})"

    @property
    def is_closed(self) -> bool:
        return self._error is not None

    @property
    def max_payload(self) -> int:
        return self._protocol.max_payload

    @property
    def client_id(self) -> int | None:
        return self.server_info.get("client_id")

    # --- Writing (invariant 1) --------------------------------------------------------------------------

    async def _send(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        async with self._send_lock:
            if self._error is not None:
                raise self._error
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                self._fail(ConnectionClosed(f"connection to {self.url} lost while sending: {error}"))
                raise self._error from None

    async def publish(self, subject: str, payload: bytes = b"", *, reply: str | None = None,
                      headers: Mapping[str, str] | None = None) -> None:
        """PUB (HPUB with `headers`). `InvalidSubject` for a subject with wildcards or empty tokens,
        `LocalProtocolError` for a payload over the server's `max_payload`."""
        subjects.validate_literal_cached(subject)
        block = build_headers(headers) if headers else None
        await self._send(self._protocol.send(Pub(subject, reply, bytes(payload), block)))

    async def subscribe(self, subject: str, queue: str | None = None, *, max_msgs: int = 0,
                        pending_msgs_max: int | None = None) -> Subscription:
        """SUB; messages arrive on the returned `Subscription` (an async iterator). `max_msgs`: end
        after that many (server `UNSUB <sid> <max>` sent right away)."""
        subjects.validate(subject, wildcards=True)
        sid = self._new_sid()
        sub = Subscription(self, sid, subject, queue, pending_msgs_max=pending_msgs_max or self.pending_msgs_max,
                           max_msgs=max_msgs)
        self._subs[sid] = sub
        data = self._protocol.send(Sub(subject, sid, queue))
        if max_msgs:
            data += self._protocol.send(Unsub(sid, max_msgs))
        try:
            await self._send(data)
        except ClientError:
            self._subs.pop(sid, None)
            raise
        return sub

    def _new_sid(self) -> str:
        self._next_sid += 1
        return str(self._next_sid)

    def _forget(self, sub: Subscription) -> None:
        self._subs.pop(sub.sid, None)

    async def _unsubscribe(self, sub: Subscription, limit: int | None) -> None:
        if self._error is None:
            await self._send(self._protocol.send(Unsub(sub.sid, limit)))

    async def request(self, subject: str, payload: bytes = b"", *, timeout: float = 5.0,
                      headers: Mapping[str, str] | None = None) -> Msg:
        """Publish with a reply subject and wait for the first reply: `RequestTimeout` after `timeout`
        seconds, `NoResponders` when nobody is subscribed to `subject`."""
        responses = await self._ensure_responses()
        token, reply = responses.new_reply()
        waiting = responses.register(token)
        try:
            await self.publish(subject, payload, reply=reply, headers=headers)
        except BaseException:
            responses.forget(token)
            raise
        return await responses.wait(token, waiting, subject, timeout)

    async def _ensure_responses(self) -> Responses:
        if self._responses is None:
            responses = Responses(new_inbox_prefix(), self._new_sid())
            self._subs[responses.sid] = responses
            self._responses = responses
            await self._send(self._protocol.send(Sub(responses.subject, responses.sid)))
        return self._responses

    async def flush(self, timeout: float = 5.0) -> None:
        """PING and wait for the PONG (invariant 3): the server has processed all we sent before."""
        pong = trio.Event()
        self._pongs.append(pong)
        await self._send(self._protocol.send(_PING))
        with trio.move_on_after(timeout):
            await pong.wait()
        if self._error is not None:
            raise self._error
        if not pong.is_set():
            raise RequestTimeout(f"no PONG from {self.url} within {timeout}s")

    def jetstream(self, *, timeout: float = 5.0, prefix: str = "$JS.API") -> "JetStreamContext":
        """The JetStream API over this connection (`$JS.API.*` requests)."""
        from jsraft.client.jetstream import JetStreamContext

        return JetStreamContext(self, timeout=timeout, prefix=prefix)

    # --- Reading (invariant 2) --------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            with self._reader_scope:
                while True:
                    data = await self._stream.receive_some(RECEIVE_BYTES)
                    if not data:
                        why = f": {self.last_error}" if self.last_error else ""
                        raise ConnectionClosed(f"the server closed the connection{why}")
                    self._protocol.receive_data(data)
                    for event in self._protocol.events():
                        self._on_event(event)
                    if self._pongs_owed:
                        owed, self._pongs_owed = self._pongs_owed, 0
                        await self._send(self._protocol.send(_PONG) * owed)
        except ConnectionClosed as error:
            self._fail(error)
        except RemoteProtocolError as error:
            self._fail(ConnectionClosed(f"the server broke the protocol: {error}"))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._fail(ConnectionClosed(f"connection to {self.url} lost: {error}"))
        except Exception as error:  # a bug here must not crash the whole trio run (invariant 2)
            log.exception("jsraft.client: reader failed")
            self._fail(ConnectionClosed(f"client reader failed: {error!r}"))
        finally:
            self._fail(ConnectionClosed("connection closed"))
            await trio.aclose_forcefully(self._stream)
            self._reader_done.set()

    def _on_event(self, event: Any) -> None:
        kind = type(event)
        if kind is MsgEvent:
            sub = self._subs.get(event.sid)
            if sub is not None:
                sub.deliver(Msg(self, event.subject, event.reply, event.payload, event.headers, event.sid))
        elif kind is Ping:
            self._pongs_owed += 1
        elif kind is Pong:
            if self._pongs:
                self._pongs.popleft().set()
        elif kind is Err:
            self.last_error = event.message
            log.warning("server %s: -ERR %s", self.url, event.message)
        elif kind is Info:
            self.server_info = event.options
        # Ok: only sent in verbose mode, which this client does not ask for.

    def _fail(self, error: ConnectionClosed, *, by_user: bool = False) -> None:
        """Close the connection's state once; end every subscription and waiter (invariant 2)."""
        if self._error is not None:
            return
        self._error = error
        for sub in list(self._subs.values()):
            sub.end(None if by_user and isinstance(sub, Subscription) else error)
        self._subs.clear()
        while self._pongs:
            self._pongs.popleft().set()
        self._reader_scope.cancel()  # a write that failed may leave the reader waiting on a dead socket

    # --- Closing ----------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Flush briefly, then close: subscriptions end, later calls raise `ConnectionClosed`. Closed even
        when cancelled while flushing (the reader then finishes on its own)."""
        try:
            if self._error is None:
                with trio.move_on_after(CLOSE_FLUSH_S):
                    try:
                        await self.flush(CLOSE_FLUSH_S)
                    except ClientError:
                        pass  # already broken: nothing left to flush
        finally:
            self._fail(ConnectionClosed("connection closed by the client"), by_user=True)
        await self._reader_done.wait()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
