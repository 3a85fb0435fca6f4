"""`JetStreamContext`: the embedded JetStream API of a node, named as nats-py's JetStream context (L5).

Owns: the in-process API (`add_stream`, `update_stream`, `delete_stream`, `stream_info`, `streams`,
`stream_names`, `purge_stream`, `publish`, `get_msg`, `delete_msg`; for consumers `add_consumer`,
`consumer_info`, `consumers`, `delete_consumer`, `pull_subscribe`, `pull_subscribe_bind`, `subscribe` — push,
through a client connection to the node itself) and its values
(`PubAck`, `StreamInfo`, `RawStreamMsg`, `ConsumerInfo`). Every call goes where it must be served: admin to the meta leader, data
to the stream's leader (`Node.call_meta` / `Node.call_stream`), on this node or over `$rpc`.

Invariants:
  1. A stream config is strictly parsed here first (`parse_stream_config`): a bad config fails with its
     precise error (unknown field → 10052 naming it, bad name → 10052) before anything is sent.
  2. `add_stream` returns once the stream's group has a leader that answers `stream.info`, and this
     node's meta state holds the stream (so the next publish here can find it by subject).
  3. A `PubAck` is returned only for a publish whose entry committed and applied at the leader.
  4. A consumer request is checked as the JetStream API checks it (`jsapi_consumer`): the same codes,
     the same stored config (name filled in, an ephemeral's 5 s inactive threshold).
  5. A stream created (only when no node had created it), updated or deleted here publishes the same
     `$JS.EVENT.ADVISORY.STREAM.*` action advisory as through the JetStream API; consumer advisories come
     from the stream group either way.

Imports: stdlib, L0, L1 (`jsapi`), L3½ (`replica.stream_events`), L4 (`client` values), attrs, trio, server siblings. Reference: nats-py `nats.js.JetStreamContext`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

# The values and the request body are the ones `jsraft.client` uses: one definition for both contexts.
from jsraft.client.connection import connect
from jsraft.client.jetstream import config_bytes
from jsraft.client.push import PushSubscription
from jsraft.client.values import ConsumerInfo, PubAck, RawStreamMsg, consumer_info_from
from jsraft.server.api.header_block import decode_headers, encode_headers
from jsraft.errors import JsraftError
from jsraft.jsapi import StreamConfig, parse_stream_config
from jsraft.jsapi.consumer_config import ConsumerConfig, validate_consumer_name
from jsraft.server.groups.consumer_errors import ConsumerNotFound
from jsraft.server.errors import NoLeader, ServerError
from jsraft.replica.stream_events import stream_action
from jsraft.server.api.jetstream_pull import EmbeddedPull
from jsraft.server.api.jsapi_data import meta_barrier
from jsraft.server.api.jsapi_consumer import generated_name, stored_consumer_config

if TYPE_CHECKING:
    from jsraft.server.api.api_parts import ApiParts


@attrs.frozen
class StreamInfo:
    config: StreamConfig
    state: dict[str, int]
    cluster: dict[str, Any]
    config_raw: bytes = attrs.field(repr=False, default=b"")


class JetStreamContext:
    def __init__(self, parts: "ApiParts", publish: Callable[..., bool], url: Callable[[], str | None]) -> None:
        """`publish`: the client port's (`ClientServer.publish`); `url`: this node's client URL, once open."""
        self._parts, self._publish, self._url = parts, publish, url

    # --- Streams -------------------------------------------------------------------------------------

    async def add_stream(self, config: StreamConfig | Mapping[str, Any] | None = None, **params: Any) -> StreamInfo:
        raw = config_bytes(config, params)
        parsed, _ = parse_stream_config(raw)  # invariant 1
        await meta_barrier(self._parts)  # as the API: advise "create" only for a stream no node had created
        existed = self._parts.meta.has_stream(parsed.name)
        await self._parts.call_meta("stream.create", {"name": parsed.name}, [raw])
        info = await self._settled(parsed.name)
        if not existed:
            self._advise(parsed.name, "create")
        return info

    async def update_stream(self, config: StreamConfig | Mapping[str, Any] | None = None, **params: Any) -> StreamInfo:
        raw = config_bytes(config, params)
        parsed, _ = parse_stream_config(raw)
        await self._parts.call_meta("stream.update", {"name": parsed.name}, [raw])
        info = await self._settled(parsed.name)
        self._advise(parsed.name, "modify")
        return info

    def _advise(self, name: str, action: str) -> None:
        """The stream action advisory the JetStream API publishes for the same change (invariant 5)."""
        self._parts.advisories.publish(*stream_action(name, action))

    async def _settled(self, name: str, timeout_s: float = 10.0) -> StreamInfo:
        """Invariant 2: this node's meta holds the stream and its group answers from a leader."""
        with trio.move_on_after(timeout_s):
            while not self._parts.meta.has_stream(name):  # O(1): `names()` sorts every stream
                await trio.sleep(self._parts.tick_s / 2)
            return await self.stream_info(name)
        raise NoLeader(f"stream {name!r} was created but is not visible on {self._parts.name} yet")

    async def delete_stream(self, name: str) -> bool:
        await self._parts.call_meta("stream.delete", {"name": name})
        self._advise(name, "delete")
        return True

    async def stream_info(self, name: str) -> StreamInfo:
        result, _ = await self._parts.call_stream(name, "stream.info", {})
        raw = result["config"].encode()
        config, _ = parse_stream_config(raw)
        return StreamInfo(config=config, state=result["state"], cluster=result["cluster"], config_raw=raw)

    async def streams(self) -> list[StreamInfo]:
        return [await self.stream_info(name) for name in self.stream_names()]

    def stream_names(self) -> list[str]:
        return self._parts.meta.names()

    async def purge_stream(self, name: str, subject: str | None = None, seq: int | None = None,
                           keep: int | None = None) -> int:
        result, _ = await self._parts.call_stream(name, "stream.purge", {"subject": subject, "seq": seq, "keep": keep})
        return int(result["purged"])

    # --- Messages ------------------------------------------------------------------------------------

    async def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                      stream: str | None = None, headers: Mapping[str, str] | None = None, *,
                      msg_id: str | None = None, expected_stream: str | None = None,
                      expected_last_seq: int | None = None, expected_last_subject_seq: int | None = None,
                      expected_last_msg_id: str | None = None) -> PubAck:
        all_headers = dict(headers or {})
        for key, value in (("Nats-Msg-Id", msg_id), ("Nats-Expected-Stream", expected_stream),
                           ("Nats-Expected-Last-Sequence", expected_last_seq),
                           ("Nats-Expected-Last-Subject-Sequence", expected_last_subject_seq),
                           ("Nats-Expected-Last-Msg-Id", expected_last_msg_id)):
            if value is not None:
                all_headers[key] = str(value)
        name = stream or self._parts.stream_for_subject(subject)
        call = self._parts.call_stream(name, "msg.publish", {"subject": subject},
                                      [encode_headers(all_headers), bytes(payload)])
        if timeout is None:
            result, _ = await call
        else:
            with trio.fail_after(timeout):
                result, _ = await call
        return PubAck(stream=result["stream"], seq=int(result["seq"]), duplicate=bool(result["duplicate"]))

    async def get_msg(self, stream_name: str, seq: int | None = None, subject: str | None = None, *,
                      last_by_subj: str | None = None) -> RawStreamMsg:
        last = last_by_subj or subject
        if (seq is None) == (last is None):
            raise JsraftError("get_msg needs exactly one of seq and last_by_subj")
        args = {"seq": seq} if seq is not None else {"last_by_subj": last}
        result, blobs = await self._parts.call_stream(stream_name, "msg.get", args)
        return RawStreamMsg(subject=result["subject"], seq=int(result["seq"]), data=blobs[1],
                            headers=decode_headers(blobs[0]), time_ns=int(result["time_ns"]), stream=stream_name)

    async def delete_msg(self, stream_name: str, seq: int) -> bool:
        await self._parts.call_stream(stream_name, "msg.delete", {"seq": seq})
        return True

    # --- Consumers -----------------------------------------------------------------------------------

    async def add_consumer(self, stream: str, config: ConsumerConfig | Mapping[str, Any] | None = None,
                           **params: Any) -> ConsumerInfo:
        """Create (or update to `config`) a consumer, named `name`, else `durable_name`, else made up."""
        data = json.loads(config_bytes(config, params))
        data.setdefault("ack_policy", "explicit")  # as nats-py's ConsumerConfig (the server's default is none)
        given = data.get("name") or data.get("durable_name")
        name = validate_consumer_name(given or generated_name())
        # invariant 4; an unnamed ephemeral's config keeps no name, as nats-server's (and the JetStream API's)
        raw = stored_consumer_config(name, data, generated=not given)
        result, _ = await self._parts.call_stream(stream, "consumer.create", {"name": name, "action": ""}, [raw])
        return consumer_info_from(result)

    async def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        result, _ = await self._parts.call_stream(stream, "consumer.info", {"name": validate_consumer_name(consumer)})
        return consumer_info_from(result)

    async def consumers(self, stream: str) -> list[ConsumerInfo]:
        infos: list[ConsumerInfo] = []
        while True:
            result, _ = await self._parts.call_stream(stream, "consumer.list", {"offset": len(infos)})
            infos += [consumer_info_from(info) for info in result["infos"]]
            if not result["infos"] or len(infos) >= int(result["total"]):
                return infos

    async def delete_consumer(self, stream: str, consumer: str) -> bool:
        await self._parts.call_stream(stream, "consumer.delete", {"name": validate_consumer_name(consumer)})
        return True

    async def pull_subscribe(self, subject: str, durable: str | None = None, stream: str | None = None,
                             config: ConsumerConfig | Mapping[str, Any] | None = None) -> EmbeddedPull:
        """nats-py's `pull_subscribe`: durable `durable` (created, filtered on `subject`, if missing) or a
        new ephemeral; `stream` defaults to the stream holding `subject`."""
        stream = stream or self._parts.stream_for_subject(subject)
        if durable is not None:
            try:
                await self.consumer_info(stream, durable)
                return self.pull_subscribe_bind(durable, stream)
            except ConsumerNotFound:
                pass
        data = json.loads(config_bytes(config, {}))
        if not data.get("filter_subjects"):
            data.setdefault("filter_subject", subject)
        if durable:
            data.update(name=durable, durable_name=durable)
        return self.pull_subscribe_bind((await self.add_consumer(stream, data)).name, stream)

    def pull_subscribe_bind(self, consumer: str, stream: str) -> EmbeddedPull:
        return EmbeddedPull(self._parts.call_stream, self._publish, stream,
                            validate_consumer_name(consumer))

    async def subscribe(self, subject: str, queue: str | None = None, **options: Any) -> PushSubscription:
        """nats-py's `subscribe` (push), with the wire client's arguments (`jsraft.client.JetStreamContext
        .subscribe`), through a client connection of its own to this node's client port: a push consumer
        delivers NATS messages to subscribers of its deliver subject, which only a connection can hold.
        `unsubscribe()` closes that connection."""
        url = self._url()
        if url is None:
            raise ServerError("the node's client port is not open: push consumers need it")
        client = await connect(url)
        try:
            sub = await client.jetstream().subscribe(subject, queue, **options)
        except BaseException:
            await client.close()
            raise
        sub.owned_client = client
        return sub
