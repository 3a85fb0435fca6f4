"""Push consumers over the wire: `PushSubscription`, the deliver-subject subscription of a push consumer
(layer L4).

Owns: reading a push consumer's deliver subject as JetStream messages (`JsMsg`, with nats-py's `ack`
family and `metadata`) through `next_msg(timeout)` and async iteration, and answering the server's
control messages on the way: a `100 FlowControl Request` is answered (an empty publish to its reply
subject) once every message sent before it was taken by the application — which is when `next_msg`
meets it, since messages are taken in order — and a `100 Idle Heartbeat` naming a stalled request
(`Nats-Consumer-Stalled`) is answered the same way (nats-py does both). Heartbeats are counted
(`heartbeats`), never returned.

Invariants:
  1. `next_msg` returns data messages only, in arrival order; every control message met before one is
     handled (answered or counted) before it is returned.
  2. A flow-control answer is sent at most once per request subject met here (a heartbeat naming the
     same request again sends it again: the server ignores a duplicate, and may have lost the first).
  3. Ordered (nats-py `ordered_consumer`): messages are returned with consecutive consumer seqs from
     one consumer; on a gap, a heartbeat whose `Nats-Last-Consumer` is not the last one returned, or
     two heartbeat intervals of silence, the consumer is made again (`_reset`) from the stream seq
     after the last message returned, on a new deliver subject — so no message is returned twice or
     skipped.

Imports: stdlib, trio, client siblings. Reference: nats-py `nats.aio.client` (`_process_msg`: control
messages), `nats.js.client.JetStreamContext.PushSubscription`; nats-server `server/consumer.go`
(sendFlowControl, sendIdleHeartbeat).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from jsraft.client.errors import ConnectionClosed, RequestTimeout
from jsraft.client.inbox import new_inbox_prefix
from jsraft.client.pull import JsMsg
from jsraft.client.subscription import Msg, Subscription
from jsraft.errors import JsraftError

if TYPE_CHECKING:
    from jsraft.client.connection import Client
    from jsraft.client.values import ConsumerInfo

STALLED_HEADER = "Nats-Consumer-Stalled"
LAST_CONSUMER_HEADER = "Nats-Last-Consumer"


class PushSubscription:
    """Messages of consumer `consumer` of `stream`, delivered to `sub` (its deliver subject). With
    `ordered` (the config it was created with) it is an ordered consumer (invariant 3)."""

    def __init__(self, client: "Client", sub: Subscription, stream: str, consumer: str, js: Any,
                 ordered: dict[str, Any] | None = None) -> None:
        self._client = client
        self._sub = sub
        self._js = js
        self.stream = stream
        self.consumer = consumer
        self.heartbeats = 0
        self.flow_control_answers = 0
        self.resets = 0  # ordered: consumers made again after a gap or a silence
        self.owned_client: "Client | None" = None  # a connection made for this subscription alone
        self._ordered = ordered
        self._last_cseq = 0  # ordered: the consumer seq and stream seq of the last message returned
        self._last_sseq = 0

    @property
    def subject(self) -> str:
        """The deliver subject."""
        return self._sub.subject

    async def _control(self, msg: Msg) -> bool:
        """A status-100 message: answer a flow-control request or a stalled heartbeat (invariant 2);
        False when an ordered consumer's heartbeat shows a message it never got."""
        block, reply = msg.header_block, msg.reply
        in_order = True
        if block.description.startswith("Idle"):
            self.heartbeats += 1
            reply = block.get(STALLED_HEADER)
            last = block.get(LAST_CONSUMER_HEADER)
            in_order = last is None or not last.isdigit() or int(last) == self._last_cseq
        if reply:
            await self._client.publish(reply, b"")
            self.flow_control_answers += 1
        return in_order

    async def next_msg(self, timeout: float | None = None) -> JsMsg:
        """The next delivered message (invariant 1); `RequestTimeout` after `timeout` seconds without one."""
        deadline = trio.current_time() + timeout if timeout is not None else None
        silence_s = 2 * self._ordered["idle_heartbeat"] / 1e9 if self._ordered else None
        while True:
            left = None if deadline is None else max(deadline - trio.current_time(), 0.0)
            if left == 0.0:
                raise RequestTimeout(f"no message from {self.stream}.{self.consumer} within {timeout}s")
            wait = left if silence_s is None else min(left if left is not None else silence_s, silence_s)
            try:
                msg = await self._sub.next_msg(timeout=wait)
            except RequestTimeout:
                if silence_s is None or wait != silence_s:
                    raise
                await self._reset()  # two heartbeats missed: the consumer is gone (invariant 3)
                continue
            if msg.status == 100 and not msg.data:
                if not await self._control(msg) and self._ordered:
                    await self._reset()
                continue
            got = JsMsg(self._client, msg)
            if self._ordered:
                if got.metadata.consumer_seq != self._last_cseq + 1:
                    await self._reset()  # a gap: start again after the last message returned
                    continue
                self._last_cseq, self._last_sseq = got.metadata.consumer_seq, got.metadata.stream_seq
            return got

    async def _reset(self) -> None:
        """Ordered: a new consumer from the stream seq after the last one returned, on a new inbox."""
        assert self._ordered is not None
        old, old_consumer = self._sub, self.consumer
        self._sub = await self._client.subscribe(new_inbox_prefix() + ".push")
        await old.unsubscribe()
        config = {k: v for k, v in self._ordered.items() if k not in ("name", "durable_name", "opt_start_time")}
        config.update(deliver_subject=self._sub.subject, deliver_policy="by_start_sequence",
                      opt_start_seq=self._last_sseq + 1)
        self.resets += 1
        self._last_cseq = 0
        try:
            await self._js.delete_consumer(self.stream, old_consumer)  # else it goes once inactive
        except JsraftError:
            pass
        self.consumer = (await self._js.add_consumer(self.stream, config)).name

    def __aiter__(self) -> "PushSubscription":
        return self

    async def __anext__(self) -> JsMsg:
        try:
            return await self.next_msg()
        except ConnectionClosed:
            if self._sub._error is None:  # unsubscribed or closed by the user: the end
                raise StopAsyncIteration from None
            raise

    async def consumer_info(self) -> "ConsumerInfo":
        return await self._js.consumer_info(self.stream, self.consumer)  # type: ignore[attr-defined]

    async def unsubscribe(self) -> None:
        """Stop (and close the connection made for this subscription, if any)."""
        if self.owned_client is not None:
            await self.owned_client.close()
            return
        await self._sub.unsubscribe()
