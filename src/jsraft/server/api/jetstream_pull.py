"""Pull consumers in the embedded JetStream context: `EmbeddedPull.fetch` and the acks of what it
returns, with no client connection (layer L5).

Owns: fetching over `$rpc` (`consumer.fetch` at the stream's leader, `consumer_hub`), in rounds short
enough for the router's attempt timeout, until messages arrive or the caller's timeout passes; and the
ack side of the messages it returns — the client's `JsMsg` (same `ack`, `ack_sync`, `nak(delay)`,
`in_progress`, `term`, `metadata`), acking through the node itself: a plain ack is published on the
client port (the node's consumer hub carries it to the leader), a double ack is `consumer.ack_sync`.

Invariants:
  1. `fetch` returns as soon as one round brought messages; with none by `timeout` it raises
     `RequestTimeout`, as the client's `PullSubscription.fetch` does.
  2. A message's ack goes to the consumer named by its ack subject, wherever its stream's leader is.

Imports: stdlib, trio, L4 (`client`: `JsMsg`, `Msg`, errors), server siblings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from jsraft.client.errors import RequestTimeout
from jsraft.client.pull import JsMsg, parse_metadata
from jsraft.client.subscription import Msg
from jsraft.server.api.consumer_hub import FETCH_EXPIRES_MAX_S

if TYPE_CHECKING:
    from jsraft.server.groups.router import CallStream

Publish = Callable[[str, bytes], object]  # the node's client port's `publish`


class _NodeAcks:
    """What `JsMsg` needs of a client (`publish`, `request`), done by the node itself."""

    def __init__(self, call_stream: "CallStream", publish: Publish) -> None:
        self._call_stream = call_stream
        self._publish = publish

    async def publish(self, subject: str, payload: bytes = b"", **_: Any) -> None:
        self._publish(subject, payload)

    async def request(self, subject: str, payload: bytes = b"", *, timeout: float = 5.0) -> None:
        stream = parse_metadata(subject).stream
        with trio.fail_after(timeout + 1.0):
            result, _ = await self._call_stream(stream, "consumer.ack_sync",
                                                {"subject": subject, "timeout_s": timeout}, [payload])
        if not result.get("confirmed"):
            raise RequestTimeout(f"ack on {subject!r} not confirmed within {timeout}s")


class EmbeddedPull:
    """Pulls from consumer `consumer` of `stream` for an embedded caller, through the node's `call_stream`
    and its client port's `publish` (plain acks)."""

    def __init__(self, call_stream: "CallStream", publish: Publish, stream: str, consumer: str) -> None:
        self._call_stream = call_stream
        self._acks = _NodeAcks(call_stream, publish)
        self.stream = stream
        self.consumer = consumer

    async def fetch(self, batch: int = 1, timeout: float = 5.0) -> list[JsMsg]:
        """Up to `batch` messages (invariant 1)."""
        deadline = trio.current_time() + timeout
        while True:
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                raise RequestTimeout(f"no message from {self.stream}.{self.consumer} within {timeout}s")
            args = {"consumer": self.consumer, "batch": batch, "expires_s": min(remaining, FETCH_EXPIRES_MAX_S)}
            result, blobs = await self._call_stream(self.stream, "consumer.fetch", args)
            msgs = [JsMsg(self._acks, Msg(None, str(subject), str(reply), blobs[2 * i + 1], blobs[2 * i] or None))
                    for i, (subject, reply) in enumerate(result["msgs"])]
            if msgs:
                return msgs
