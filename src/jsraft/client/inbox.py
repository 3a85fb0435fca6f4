"""Request/reply over one wildcard inbox subscription (layer L4).

Owns: `Responses`, the connection's single `_INBOX.<random>.*` subscription that all requests share
(nats-py's "new style" requests): each request gets a token, its reply subject is the prefix plus the
token, and the reply is matched back to the waiting request by that token.

Invariants:
  1. A request is registered before its PUB is sent, so a reply that overtakes the sender's own
     bookkeeping is not lost; it is forgotten when it completes, times out or is cancelled, so the
     table never holds more than the requests in flight.
  2. A status reply `503` with no body is "no responders" (`NoResponders`), never a message.
  3. When the connection closes, every waiting request fails with the connection's error at once.

Imports: stdlib, trio, client siblings. Reference: nats-py `Client._request_new_style`.
"""

from __future__ import annotations

import itertools
import secrets

import trio

from jsraft.client.errors import ClientError, ConnectionClosed, NoResponders, RequestTimeout
from jsraft.client.subscription import Msg
from jsraft.protocol.headers import STATUS_NO_RESPONDERS


def new_inbox_prefix() -> str:
    """A unique inbox prefix: `_INBOX.` and 22 random hex characters (nats-py uses a NUID)."""
    return f"_INBOX.{secrets.token_hex(11)}"


class _Waiting:
    __slots__ = ("done", "msg", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.msg: Msg | None = None
        self.error: ClientError | None = None


class Responses:
    """The reply side of every request of one connection (duck type of `Subscription.deliver`/`end`)."""

    def __init__(self, prefix: str, sid: str) -> None:
        self.prefix = prefix
        self.sid = sid
        self.subject = f"{prefix}.*"
        self.queue = None
        self._tokens = itertools.count(1)
        self._waiting: dict[str, _Waiting] = {}
        self._error: ClientError | None = None

    def new_reply(self) -> tuple[str, str]:
        """`(token, reply subject)` for one request."""
        token = format(next(self._tokens), "x")
        return token, f"{self.prefix}.{token}"

    def deliver(self, msg: Msg) -> None:
        token = msg.subject[len(self.prefix) + 1:]
        waiting = self._waiting.get(token)
        if waiting is None or waiting.done.is_set():
            return  # a reply after its request gave up, or a second reply: nobody waits for it
        waiting.msg = msg
        waiting.done.set()

    def end(self, error: ClientError | None = None) -> None:
        """Invariant 3 (a request is never left waiting: a close by the user fails it too)."""
        error = error or ConnectionClosed("connection closed")
        self._error = error
        for waiting in self._waiting.values():
            waiting.error = error
            waiting.done.set()

    def register(self, token: str) -> _Waiting:
        """Invariant 1: before the request is sent."""
        waiting = _Waiting()
        if self._error is not None:
            waiting.error = self._error
            waiting.done.set()
        self._waiting[token] = waiting
        return waiting

    def forget(self, token: str) -> None:
        """Invariant 1: a request that was never sent (its PUB failed) is not waited for."""
        self._waiting.pop(token, None)

    async def wait(self, token: str, waiting: _Waiting, subject: str, timeout: float) -> Msg:
        try:
            with trio.move_on_after(timeout):
                await waiting.done.wait()
        finally:
            self.forget(token)
        if waiting.error is not None:
            raise waiting.error
        msg = waiting.msg
        if msg is None:
            raise RequestTimeout(f"no reply to a request on {subject!r} within {timeout}s")
        if not msg.data and msg.headers_raw and msg.status == STATUS_NO_RESPONDERS:  # invariant 2
            raise NoResponders(f"no responders on {subject!r}")
        return msg
