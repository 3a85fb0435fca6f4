"""Pull consumers over the wire: `PullSubscription.fetch` and the acks of a JetStream message (layer L4).

Owns: a pull subscription (an inbox subscription of the connection and the consumer it pulls from),
`fetch(batch, timeout)` — one `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>` request with `batch`,
`expires` and `no_wait`, answered by up to `batch` messages and ended by a status (`404 No Messages`,
`408 Request Timeout`, `409 ...`) — and `JsMsg`: a delivered message with nats-py's `ack`, `ack_sync`,
`nak(delay)`, `in_progress`, `term` and the `metadata` its `$JS.ACK...` reply subject carries.

Invariants:
  1. `fetch` returns as soon as it has `batch` messages or the server ended the request, with what it
     got; with none at all it raises `RequestTimeout` (nats-py: a timeout), also when a `409` ended the
     request (a leader change, a deleted consumer: nats-py treats them as temporary). `100 Idle
     Heartbeat` is skipped; `503` (no such consumer) raises `NoResponders`, any other status
     `BadResponse`.
  2. Messages of an earlier, ended fetch still arriving on the inbox are delivered by the next one (the
     server counted them as delivered: dropping them would only delay them by an ack wait).

Imports: stdlib, attrs, trio, client siblings. Reference: nats-py `nats.js.client.PullSubscription`,
`nats.aio.msg.Msg` (ack kinds, `Metadata`); ADR-13 (pull requests), ADR-15 (ack subjects).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import attrs
import trio

from jsraft.client.errors import BadResponse, NoResponders, RequestTimeout
from jsraft.client.subscription import Msg, Subscription

if TYPE_CHECKING:
    from jsraft.client.connection import Client

EXPIRES_MARGIN_NS = 1_000_000  # the server ends the request just before the client stops waiting
_ENDS = {404, 408, 409}


@attrs.frozen(kw_only=True)
class Metadata:
    """What the ack subject says: `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`
    (or the 12-token form with domain and account hash)."""

    stream: str
    consumer: str
    num_delivered: int
    stream_seq: int
    consumer_seq: int
    timestamp_ns: int
    num_pending: int


def parse_metadata(reply: str | None) -> Metadata:
    tokens = (reply or "").split(".")
    if len(tokens) >= 12 and tokens[:2] == ["$JS", "ACK"]:
        tokens = tokens[:2] + tokens[4:11]
    if len(tokens) != 9 or tokens[:2] != ["$JS", "ACK"] or not all(t.isdigit() for t in tokens[4:9]):
        raise BadResponse(f"not a JetStream ack subject: {(reply or '')[:120]!r}")
    delivered, sseq, cseq, ts, pending = (int(t) for t in tokens[4:9])
    return Metadata(stream=tokens[2], consumer=tokens[3], num_delivered=delivered, stream_seq=sseq,
                    consumer_seq=cseq, timestamp_ns=ts, num_pending=pending)


class JsMsg:
    """A message delivered by a consumer; ack it one of nats-py's ways."""

    __slots__ = ("_client", "msg", "metadata")

    def __init__(self, client: "Client", msg: Msg) -> None:
        self._client = client
        self.msg = msg
        self.metadata = parse_metadata(msg.reply)

    @property
    def subject(self) -> str:
        return self.msg.subject

    @property
    def data(self) -> bytes:
        return self.msg.data

    @property
    def headers(self) -> dict[str, str] | None:
        return self.msg.headers

    def __repr__(self) -> str:
        return f"JsMsg(subject={self.subject!r}, stream_seq={self.metadata.stream_seq}, data={self.data[:64]!r})"

    async def _send(self, body: bytes) -> None:
        await self._client.publish(self.msg.reply or "", body)

    async def ack(self) -> None:
        await self._send(b"+ACK")

    async def ack_sync(self, timeout: float = 5.0) -> None:
        """Ack and wait until the server confirmed it (the ack is committed)."""
        await self._client.request(self.msg.reply or "", b"+ACK", timeout=timeout)

    async def nak(self, delay: float | None = None) -> None:
        """Redeliver now, or after `delay` seconds."""
        body = b"-NAK" + (b" " + json.dumps({"delay": int(delay * 1e9)}).encode() if delay else b"")
        await self._send(body)

    async def in_progress(self) -> None:
        await self._send(b"+WPI")

    async def term(self) -> None:
        await self._send(b"+TERM")


class PullSubscription:
    """Pulls from consumer `consumer` of `stream` into the inbox subscription `sub`."""

    def __init__(self, client: "Client", sub: Subscription, stream: str, consumer: str, prefix: str) -> None:
        self._client = client
        self._sub = sub
        self.stream = stream
        self.consumer = consumer
        self._next_subject = f"{prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"

    async def fetch(self, batch: int = 1, timeout: float = 5.0) -> list[JsMsg]:
        """Up to `batch` messages (invariant 1)."""
        request = {"batch": batch, "expires": max(int(timeout * 1e9) - EXPIRES_MARGIN_NS, EXPIRES_MARGIN_NS),
                   "no_wait": True}
        await self._client.publish(self._next_subject, json.dumps(request).encode(), reply=self._sub.subject)
        got: list[JsMsg] = []
        with trio.move_on_after(timeout):
            while len(got) < batch:
                msg = await self._sub.next_msg()
                status = msg.status
                if status is None:
                    got.append(JsMsg(self._client, msg))
                elif status == 100:
                    continue
                elif status in _ENDS:
                    break  # the request ended (no more now, timed out, or a 409 such as a leader change)
                elif status == 503:
                    raise NoResponders(f"no consumer {self.consumer!r} on stream {self.stream!r}")
                else:
                    raise BadResponse(f"pull request answered {status}: {msg.headers}")
        if not got:
            raise RequestTimeout(f"no message from {self.stream}.{self.consumer} within {timeout}s")
        return got

    async def unsubscribe(self) -> None:
        await self._sub.unsubscribe()
