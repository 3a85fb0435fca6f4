"""A received message (`Msg`) and a subscription (`Subscription`): an async iterator of messages (L4).

Owns: what a subscriber sees. The connection's reader task hands each MSG/HMSG for a subscription to
`Subscription.deliver`, which queues it in a bounded buffer; the subscriber takes messages with
`async for msg in sub` or `await sub.next_msg(timeout)`. `unsubscribe()` (optionally after `limit`
more messages) tells the server to stop.

Invariants:
  1. Bounded: a subscription buffers at most `pending_msgs_max` messages. The reader never waits for a
     slow subscriber (that would stall every other subscription of the connection): a message that does
     not fit is dropped and counted, and the subscriber's next `next_msg` raises `SlowConsumer` once
     with the count, so a gap is never silent.
  2. Ending: after `unsubscribe`, `close()` of the client, or `max_msgs` delivered, the messages already
     buffered are still delivered, then iteration stops (`StopAsyncIteration`; `next_msg` raises
     `ConnectionClosed`). After a disconnect the buffered messages are delivered, then `ConnectionClosed`
     is raised: a broken connection is never mistaken for the end of a subscription.
  3. `deliver` is synchronous and never blocks: it runs in the reader task.

Imports: stdlib, attrs, trio, L4 `protocol` (headers), client siblings.
Reference: nats-py `nats.aio.subscription.Subscription`, `nats.aio.msg.Msg`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from jsraft.client.errors import ClientError, ConnectionClosed, RequestTimeout, SlowConsumer
from jsraft.protocol.headers import HeaderBlock, parse_headers

if TYPE_CHECKING:
    from jsraft.client.connection import Client


class Msg:
    """One message as received: `subject`, `reply`, `data`, the raw header block `headers_raw`
    (None for a MSG without headers), and `headers` / `status` parsed from it on first use."""

    __slots__ = ("_client", "subject", "reply", "data", "headers_raw", "sid", "_block")

    def __init__(self, client: "Client | None", subject: str, reply: str | None, data: bytes,
                 headers_raw: bytes | None = None, sid: str = "") -> None:
        self._client = client
        self.subject = subject
        self.reply = reply
        self.data = data
        self.headers_raw = headers_raw
        self.sid = sid
        self._block: HeaderBlock | None = None

    def __repr__(self) -> str:
        return f"Msg(subject={self.subject!r}, reply={self.reply!r}, data={self.data[:64]!r})"

    @property
    def header_block(self) -> HeaderBlock:
        """The parsed header block (`MalformedHeaders` if the server sent a broken one)."""
        if self._block is None:
            self._block = parse_headers(self.headers_raw or b"")
        return self._block

    @property
    def headers(self) -> dict[str, str] | None:
        """Header fields, first value of each name (nats-py's shape); None when the message had none."""
        if not self.headers_raw:
            return None
        found: dict[str, str] = {}
        for name, value in self.header_block.fields:
            found.setdefault(name, value)
        return found

    @property
    def status(self) -> int | None:
        """The status of a status message (`503` no responders, `404`, `408`...), else None."""
        return self.header_block.status if self.headers_raw else None

    async def respond(self, data: bytes = b"", headers: dict[str, str] | None = None) -> None:
        """Publish `data` on this message's reply subject."""
        if not self.reply or self._client is None:
            raise ClientError(f"message on {self.subject!r} has no reply subject")
        await self._client.publish(self.reply, data, headers=headers)


class Subscription:
    """Messages on `subject` (in queue group `queue`, if given). Made by `Client.subscribe`."""

    def __init__(self, client: "Client", sid: str, subject: str, queue: str | None, *,
                 pending_msgs_max: int, max_msgs: int = 0) -> None:
        self._client = client
        self.sid = sid
        self.subject = subject
        self.queue = queue
        self.max_msgs = max_msgs  # 0: no limit
        self.delivered = 0  # handed to the buffer (dropped messages are not counted)
        self.dropped = 0
        self._unreported_drops = 0
        self._error: ClientError | None = None
        self._send, self._receive = trio.open_memory_channel(pending_msgs_max)

    def __repr__(self) -> str:
        return f"Subscription(sid={self.sid!r}, subject={self.subject!r}, queue={self.queue!r})"

    # --- Called by the connection's reader (invariant 3) ----------------------------------------------

    def deliver(self, msg: Msg) -> None:
        if self.max_msgs and self.delivered >= self.max_msgs:
            return  # a message the server sent before it saw our UNSUB limit
        try:
            self._send.send_nowait(msg)
        except trio.WouldBlock:
            self.dropped += 1
            self._unreported_drops += 1
            return
        except trio.ClosedResourceError:
            return  # unsubscribed: the server has not seen the UNSUB yet
        self.delivered += 1
        if self.max_msgs and self.delivered >= self.max_msgs:
            self._client._forget(self)
            self.end()

    def end(self, error: ClientError | None = None) -> None:
        """No more messages (invariant 2); `error` is raised once the buffered ones were taken."""
        if self._error is None:
            self._error = error
        self._send.close()

    # --- The subscriber's side --------------------------------------------------------------------------

    @property
    def pending_msgs(self) -> int:
        """Messages buffered and not yet taken."""
        return self._receive.statistics().current_buffer_used

    async def next_msg(self, timeout: float | None = None) -> Msg:
        """The next message; `RequestTimeout` if none arrives within `timeout` seconds."""
        if self._unreported_drops:  # invariant 1
            dropped, self._unreported_drops = self._unreported_drops, 0
            raise SlowConsumer(dropped, self.subject)
        try:
            if timeout is None:
                return await self._receive.receive()
            with trio.fail_after(timeout):
                return await self._receive.receive()
        except trio.TooSlowError:
            raise RequestTimeout(f"no message on {self.subject!r} within {timeout}s") from None
        except trio.EndOfChannel:
            raise self._error or ConnectionClosed(f"subscription to {self.subject!r} ended") from None

    def __aiter__(self) -> "Subscription":
        return self

    async def __anext__(self) -> Msg:
        try:
            return await self.next_msg()
        except ConnectionClosed:
            if self._error is None:
                raise StopAsyncIteration from None
            raise

    async def unsubscribe(self, limit: int = 0) -> None:
        """Stop now, or (with `limit`) after `limit` messages in all were delivered (server `UNSUB max`)."""
        if limit and self.delivered < limit:
            self.max_msgs = limit
            await self._client._unsubscribe(self, limit)
            return
        self._client._forget(self)
        self.end()
        await self._client._unsubscribe(self, None)

    async def __aenter__(self) -> "Subscription":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self._client.is_closed:
            await self.unsubscribe()
