"""`JetStreamContext` over the wire: the embedded context's methods as `$JS.API.*` requests (layer L4).

Owns: `add_stream`, `update_stream`, `delete_stream`, `stream_info`, `streams`, `stream_names`,
`purge_stream`, `publish`, `get_msg`, `delete_msg`, and for consumers `add_consumer`, `consumer_info`,
`consumers`, `delete_consumer`, `pull_subscribe` / `pull_subscribe_bind` (fetching in `pull`), `subscribe`
(push, in `push`) — the names, arguments and return values of
`jsraft.server.api.jetstream.JetStreamContext`, served by any node's JetStream API (nats-server's JSON
shapes), so code moves between an embedded node and a remote one unchanged. Differences: `stream_names`
is a coroutine here (it asks the server); `publish(stream=...)` sends `Nats-Expected-Stream` (the server
picks the stream by subject, and refuses if it is another one).

Invariants:
  1. An error answer raises the same jsraft error class the embedded context raises for the condition
     (`errors.error_from_api`: `StreamNotFound` 10059, `InvalidConfig` 10052, ...), with the server's
     `err_code`; a stream config is checked locally first (`parse_stream_config`), as the embedded context
     does, so a bad one fails with its precise error before anything is sent.
  2. A publish that reaches no stream (no responders on its subject) is `StreamNotFound`, as in the
     embedded context; no responders on `$JS.API` itself is `NoResponders` (JetStream not available).
  3. Listings follow the API's paging (`offset`, `limit`, `total`) to the end: every stream is returned.

Imports: stdlib, L0, L1 (`jsapi`), client siblings. Reference: nats-py `nats.js.JetStreamContext` and
`JetStreamManager`; nats-server `server/jetstream_api.go`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jsraft.client.errors import BadResponse, NoResponders, error_from_api
from jsraft.client.inbox import new_inbox_prefix
from jsraft.client.pull import PullSubscription
from jsraft.client.push import PushSubscription
from jsraft.client.values import (
    ConsumerInfo, PubAck, RawStreamMsg, StreamInfo, consumer_info_from, pub_ack_from, raw_msg_from, stream_info_from,
)
from jsraft.errors import JsraftError, StreamNotFound
from jsraft.jsapi import StreamConfig, parse_stream_config, validate_stream_name
from jsraft.jsapi.consumer_config import ConsumerConfig, validate_consumer_name

if TYPE_CHECKING:
    from jsraft.client.connection import Client

PAGES_MAX = 10_000  # bounds a listing loop against a server whose paging never ends


def config_bytes(config: StreamConfig | ConsumerConfig | Mapping[str, Any] | None, params: dict[str, Any]) -> bytes:
    if isinstance(config, (StreamConfig, ConsumerConfig)):
        data: dict[str, Any] = config.to_json()
    elif config is None:
        data = {}
    else:
        data = dict(config)
    data.update(params)
    return json.dumps(data).encode()


def _json_answer(data: bytes, subject: str) -> dict[str, Any]:
    try:
        answer = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadResponse(f"answer to {subject!r} is not JSON: {data[:120]!r}") from None
    if not isinstance(answer, dict):
        raise BadResponse(f"answer to {subject!r} is not a JSON object")
    if "error" in answer:
        raise error_from_api(answer["error"])  # invariant 1
    return answer


class JetStreamContext:
    def __init__(self, client: "Client", *, timeout: float = 5.0, prefix: str = "$JS.API") -> None:
        self._client = client
        self.timeout = timeout
        self.prefix = prefix

    async def _api(self, tail: str, body: dict[str, Any] | bytes | None = None,
                   timeout: float | None = None) -> dict[str, Any]:
        subject = f"{self.prefix}.{tail}"
        payload = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
        try:
            msg = await self._client.request(subject, payload, timeout=timeout or self.timeout)
        except NoResponders:
            raise NoResponders(f"JetStream is not available: no responders on {subject!r}") from None
        return _json_answer(msg.data, subject)

    # --- Streams -------------------------------------------------------------------------------------

    async def add_stream(self, config: StreamConfig | Mapping[str, Any] | None = None, **params: Any) -> StreamInfo:
        raw = config_bytes(config, params)
        parsed, _ = parse_stream_config(raw)  # invariant 1
        return stream_info_from(await self._api(f"STREAM.CREATE.{parsed.name}", raw))

    async def update_stream(self, config: StreamConfig | Mapping[str, Any] | None = None,
                            **params: Any) -> StreamInfo:
        raw = config_bytes(config, params)
        parsed, _ = parse_stream_config(raw)
        return stream_info_from(await self._api(f"STREAM.UPDATE.{parsed.name}", raw))

    async def delete_stream(self, name: str) -> bool:
        answer = await self._api(f"STREAM.DELETE.{validate_stream_name(name)}")
        return answer.get("success") is True

    async def stream_info(self, name: str) -> StreamInfo:
        return stream_info_from(await self._api(f"STREAM.INFO.{validate_stream_name(name)}"))

    async def _pages(self, tail: str, key: str) -> list[Any]:
        """Every item of a paged listing (invariant 3)."""
        found: list[Any] = []
        for _ in range(PAGES_MAX):
            answer = await self._api(tail, {"offset": len(found)})
            page = answer.get(key) or []
            total = answer.get("total", 0)
            if not isinstance(page, list) or type(total) is not int:
                raise BadResponse(f"{tail}: malformed page")
            found.extend(page)
            if not page or len(found) >= total:
                return found
        raise BadResponse(f"{tail}: more than {PAGES_MAX} pages")

    async def streams(self) -> list[StreamInfo]:
        return [stream_info_from(info) for info in await self._pages("STREAM.LIST", "streams")]

    async def stream_names(self) -> list[str]:
        names = await self._pages("STREAM.NAMES", "streams")
        if not all(isinstance(name, str) for name in names):
            raise BadResponse("STREAM.NAMES: a name is not a string")
        return names

    async def purge_stream(self, name: str, subject: str | None = None, seq: int | None = None,
                           keep: int | None = None) -> int:
        body = {key: value for key, value in (("filter", subject), ("seq", seq), ("keep", keep)) if value is not None}
        answer = await self._api(f"STREAM.PURGE.{validate_stream_name(name)}", body)
        purged = answer.get("purged", 0)
        if type(purged) is not int:
            raise BadResponse("purge: 'purged' is not a number")
        return purged

    # --- Messages ------------------------------------------------------------------------------------

    async def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                      stream: str | None = None, headers: Mapping[str, str] | None = None, *,
                      msg_id: str | None = None, expected_stream: str | None = None,
                      expected_last_seq: int | None = None, expected_last_subject_seq: int | None = None,
                      expected_last_msg_id: str | None = None) -> PubAck:
        all_headers = dict(headers or {})
        for key, value in (("Nats-Msg-Id", msg_id), ("Nats-Expected-Stream", expected_stream or stream),
                           ("Nats-Expected-Last-Sequence", expected_last_seq),
                           ("Nats-Expected-Last-Subject-Sequence", expected_last_subject_seq),
                           ("Nats-Expected-Last-Msg-Id", expected_last_msg_id)):
            if value is not None:
                all_headers[key] = str(value)
        try:
            msg = await self._client.request(subject, payload, timeout=timeout or self.timeout,
                                             headers=all_headers or None)
        except NoResponders:  # invariant 2
            raise StreamNotFound(f"no stream matches subject {subject!r}") from None
        return pub_ack_from(_json_answer(msg.data, subject))

    async def get_msg(self, stream_name: str, seq: int | None = None, subject: str | None = None, *,
                      last_by_subj: str | None = None) -> RawStreamMsg:
        last = last_by_subj or subject
        if (seq is None) == (last is None):
            raise JsraftError("get_msg needs exactly one of seq and last_by_subj")
        body: dict[str, Any] = {"seq": seq} if seq is not None else {"last_by_subj": last}
        answer = await self._api(f"STREAM.MSG.GET.{validate_stream_name(stream_name)}", body)
        return raw_msg_from(answer, stream_name)

    async def delete_msg(self, stream_name: str, seq: int) -> bool:
        answer = await self._api(f"STREAM.MSG.DELETE.{validate_stream_name(stream_name)}", {"seq": seq})
        return answer.get("success") is True

    # --- Consumers -----------------------------------------------------------------------------------

    async def add_consumer(self, stream: str, config: ConsumerConfig | Mapping[str, Any] | None = None,
                           **params: Any) -> ConsumerInfo:
        """Create (or update to `config`) a consumer; its name is `name`, else `durable_name`, else the
        server makes one up (an ephemeral)."""
        data = json.loads(config_bytes(config, params))
        data.setdefault("ack_policy", "explicit")  # as nats-py's ConsumerConfig (the server's default is none)
        name = data.get("name") or data.get("durable_name")
        tail = f"CONSUMER.CREATE.{validate_stream_name(stream)}" + (f".{validate_consumer_name(name)}" if name else "")
        return consumer_info_from(await self._api(tail, {"stream_name": stream, "config": data}))

    async def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        tail = f"CONSUMER.INFO.{validate_stream_name(stream)}.{validate_consumer_name(consumer)}"
        return consumer_info_from(await self._api(tail))

    async def consumers(self, stream: str) -> list[ConsumerInfo]:
        return [consumer_info_from(info)
                for info in await self._pages(f"CONSUMER.LIST.{validate_stream_name(stream)}", "consumers")]

    async def delete_consumer(self, stream: str, consumer: str) -> bool:
        tail = f"CONSUMER.DELETE.{validate_stream_name(stream)}.{validate_consumer_name(consumer)}"
        return (await self._api(tail)).get("success") is True

    async def pull_subscribe(self, subject: str, durable: str | None = None, stream: str | None = None,
                             config: ConsumerConfig | Mapping[str, Any] | None = None) -> PullSubscription:
        """nats-py's `pull_subscribe`: bind to durable `durable` (created, filtered on `subject`, if it does
        not exist), or to a new ephemeral consumer. `stream` defaults to the one holding `subject`."""
        if stream is None:
            names = (await self._api("STREAM.NAMES", {"subject": subject})).get("streams") or []
            if len(names) != 1:
                raise StreamNotFound(f"no stream matches subject {subject!r}")
            stream = str(names[0])
        if durable is not None:
            try:
                await self.consumer_info(stream, durable)
                return await self.pull_subscribe_bind(durable, stream)
            except JsraftError as error:
                if error.err_code != 10014:  # consumer not found: create it below
                    raise
        data = json.loads(config_bytes(config, {}))
        if not data.get("filter_subjects"):
            data.setdefault("filter_subject", subject)
        if durable:
            data.update(name=durable, durable_name=durable)
        info = await self.add_consumer(stream, data)
        return await self.pull_subscribe_bind(info.name, stream)

    async def subscribe(self, subject: str, queue: str | None = None, *, durable: str | None = None,
                        stream: str | None = None, config: ConsumerConfig | Mapping[str, Any] | None = None,
                        deliver_subject: str | None = None, flow_control: bool = False,
                        idle_heartbeat: float | None = None, ordered_consumer: bool = False) -> PushSubscription:
        """nats-py's `subscribe` (push): bind to durable `durable` (or, with `queue` and no durable, the
        consumer named after the queue) if it exists, else create it — filtered on `subject`, delivering
        to `deliver_subject` (a new inbox by default) and to the queue group `queue`. `ordered_consumer`
        sets what nats-py sets (ack none, flow control, heartbeats, memory, one replica) and the
        subscription makes the consumer again after a gap (`PushSubscription` invariant 3)."""
        if ordered_consumer and (durable or queue):
            raise ValueError("an ordered consumer is ephemeral: no durable name, no queue group")
        stream = stream or await self._stream_for(subject)
        durable = durable or queue
        if durable is not None:
            try:
                info = await self.consumer_info(stream, durable)
            except JsraftError as error:
                if error.err_code != 10014:  # consumer not found: create it below
                    raise
            else:
                return await self._bind_push(info.name, stream, info.config.deliver_subject, queue)
        data = json.loads(config_bytes(config, {}))
        if not data.get("filter_subjects"):
            data.setdefault("filter_subject", subject)
        if durable:
            data.update(durable_name=durable)
        if queue:
            data["deliver_group"] = queue
        data["deliver_subject"] = data.get("deliver_subject") or deliver_subject or new_inbox_prefix() + ".push"
        if flow_control or ordered_consumer:
            data["flow_control"] = True
        if idle_heartbeat or ordered_consumer:
            data["idle_heartbeat"] = int((idle_heartbeat or 5.0) * 1e9)
        if ordered_consumer:
            data.update(ack_policy="none", max_deliver=1, num_replicas=1, mem_storage=True)
        info = await self.add_consumer(stream, data)
        return await self._bind_push(info.name, stream, data["deliver_subject"], queue,
                                     data if ordered_consumer else None)

    async def _bind_push(self, consumer: str, stream: str, deliver: str | None, queue: str | None,
                         ordered: dict[str, Any] | None = None) -> PushSubscription:
        if not deliver:
            raise BadResponse(f"consumer {consumer!r} is not a push consumer (no deliver subject)")
        sub = await self._client.subscribe(deliver, queue)
        return PushSubscription(self._client, sub, validate_stream_name(stream), validate_consumer_name(consumer),
                                self, ordered)

    async def _stream_for(self, subject: str) -> str:
        names = (await self._api("STREAM.NAMES", {"subject": subject})).get("streams") or []
        if len(names) != 1:
            raise StreamNotFound(f"no stream matches subject {subject!r}")
        return str(names[0])

    async def pull_subscribe_bind(self, consumer: str, stream: str) -> PullSubscription:
        sub = await self._client.subscribe(new_inbox_prefix() + ".pull")
        return PullSubscription(self._client, sub, validate_stream_name(stream), validate_consumer_name(consumer),
                                self.prefix)
