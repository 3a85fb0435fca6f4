"""`$JS.API.STREAM.SNAPSHOT.<stream>` and `$JS.API.STREAM.RESTORE.<stream>`: a stream's messages and
consumers out as chunks, and back in (layer L5).

Owns: both endpoints with nats-server's request and response shapes and chunked flow, and the sending and
receiving of the chunks (the bytes are `snapshot_format`'s; the stream leader's work is
`snapshot_leader`'s).

Snapshot: the request `{"deliver_subject", "chunk_size", "window_size", "no_consumers", "jsck"}` is answered
`{"config", "state"}`; then chunks go to `deliver_subject`, each with the reply subject
`$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>` which the client acknowledges (any message); past
`window_size` unacknowledged bytes the sender waits. The last, partial chunk has no reply subject; the end is
an empty message with no reply and the status line `NATS/1.0 204`; a failure part way is an empty message
with the status line `NATS/1.0 500 <description>` (as nats-server 2.15 sends them). `jsck` (nats-server's
store check before a snapshot) needs no pass of its own here: every record sent is read through the
store, which verifies its CRC, and a damaged one fails the snapshot with that 500.

Restore: the request `{"config", "state"}` is answered `{"deliver_subject":
"$JS.SNAPSHOT.RESTORE.<stream>.<id>"}`; the client sends chunks there, each with a reply subject, and each
is acknowledged with an empty message; an empty chunk ends it, and is answered with a
`stream_create_response` (the stream's info, or the error).

Invariants:
  1. Nothing is restored from a snapshot that does not verify (`snapshot_format` invariant 1): the whole
     snapshot is staged to a file and verified before the stream is created. A damaged chunk is answered
     with the error at once and ends the restore.
  2. The restored stream is announced (the final answer) only once the leader's store state tuple
     (first, last, messages, bytes, digest) equals the snapshot's; otherwise the stream made for the
     restore is deleted and the answer is the error.
  3. A restore of a stream name that exists is refused before anything is staged (10130).
  4. Bounded: the chunk size, the unacknowledged window and the staged bytes (`RESTORE_BYTES_MAX`) have
     limits; a restore idle for `RESTORE_IDLE_S` and a snapshot unacknowledged for `ACK_TIMEOUT_S` end.

Imports: stdlib, attrs, trio, L0, L1 (`subjects`), server siblings. Reference: nats-server
`server/jetstream_api.go` (`jsStreamSnapshotRequest`, `streamSnapshot`, `jsStreamRestoreRequest`,
`processStreamRestore`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from jsraft import subjects
from jsraft.codec.records import encode_message
from jsraft.errors import BadRequest, JsraftError
from jsraft.server.groups.consumer_errors import ConsumerNotFound
from jsraft.server.errors import RestoreFailed
from jsraft.server.api.jsapi_codec import decode_request, dumps, is_empty_request, response_type
from jsraft.server.api.jsapi_data import meta_barrier
from jsraft.server.api.snapshot_format import (
    STATE_KEY, BadSnapshot, SnapshotReader, TupleSum, encode_consumer, encode_end, encode_header, encode_msgs,
    iter_records,
)

if TYPE_CHECKING:
    from jsraft.server.nats.client_server import ClientServer, InternalMsg
    from jsraft.server.api.jsapi_handlers import ApiRequest
    from jsraft.server.api.api_parts import ApiParts

log = logging.getLogger("jsraft.server.snapshot")

Endpoint = Callable[["ApiRequest"], Awaitable[dict[str, Any]]]
CHUNK_BYTES_DEFAULT = 128 * 1024  # nats-server's defaultSnapshotChunkSize
CHUNK_BYTES_MAX = 1 << 20
WINDOW_BYTES_DEFAULT = 8 << 20
READ_BYTES = 1 << 20
ACK_TIMEOUT_S = 30.0
RESTORE_IDLE_S = 60.0
RESTORE_BYTES_MAX = 64 << 30
APPEND_BYTES = 1 << 20


class StreamExistsRestore(RestoreFailed):
    err_code = 10130  # nats-server JSStreamNameExistRestoreFailedErr
    http_code = 400
    default_description = "stream name already in use, cannot restore"


@attrs.frozen(kw_only=True)
class SnapshotRequest:
    deliver_subject: str = ""
    no_consumers: bool = False
    chunk_size: int = 0
    window_size: int = 0
    jsck: bool = False


@attrs.frozen(kw_only=True)
class Endpoints:
    """The other API endpoints a restore goes through (created, described, deleted as any client's)."""

    stream_info: Endpoint
    stream_create: Endpoint
    stream_delete: Endpoint
    consumer_create: Endpoint
    consumer_list: Endpoint


def _without_server_metadata(config: dict[str, Any]) -> dict[str, Any]:
    """A served config minus the `_nats.*` metadata the server stamps (ADR-44): the new asset's own."""
    metadata = {k: v for k, v in (config.get("metadata") or {}).items() if not k.startswith("_nats.")}
    return {**config, "metadata": metadata} if metadata else {k: v for k, v in config.items() if k != "metadata"}


class SnapshotEndpoints:
    def __init__(self, parts: "ApiParts", clients: "ClientServer", endpoints: Endpoints) -> None:
        self.parts = parts
        self.clients = clients
        self.endpoints = endpoints

    def _request(self, request: "ApiRequest", subject: str, payload: bytes = b"") -> "ApiRequest":
        return attrs.evolve(request, payload=payload, reply=None, subject=subject)

    # --- Snapshot -------------------------------------------------------------------------------------

    async def snapshot(self, request: "ApiRequest") -> dict[str, Any]:
        if is_empty_request(request.payload):
            raise BadRequest()
        body = decode_request(request.payload, SnapshotRequest)
        try:
            subjects.validate_literal_cached(body.deliver_subject)
        except JsraftError:
            raise BadRequest("deliver subject not valid") from None
        info = await self.endpoints.stream_info(self._request(request, f"$JS.API.STREAM.INFO.{request.name}"))
        consumers: list[dict[str, Any]] = []
        while not body.no_consumers:
            page = await self.endpoints.consumer_list(self._request(
                request, f"$JS.API.CONSUMER.LIST.{request.name}", dumps({"offset": len(consumers)})))
            consumers.extend(page["consumers"])
            if not page["consumers"] or len(consumers) >= page["total"]:
                break
        # Started now, it first runs after this answer is sent (dispatch responds without a checkpoint).
        self.clients.start_soon(self._send, request.name, body, info, consumers)
        return {"config": info["config"], "state": info["state"]}

    async def _send(self, name: str, body: SnapshotRequest, info: dict[str, Any],
                    consumers: list[dict[str, Any]]) -> None:
        chunk_size = min(body.chunk_size or CHUNK_BYTES_DEFAULT, CHUNK_BYTES_MAX)
        sender = _ChunkSender(self.clients, name, body.deliver_subject, chunk_size,
                              body.window_size or WINDOW_BYTES_DEFAULT)
        try:
            await sender.write(encode_header(name, info["config"], info["state"]))
            total = TupleSum()
            seq, last_seq = int(info["state"]["first_seq"]), int(info["state"]["last_seq"])
            done = last_seq == 0
            while not done:
                result, blobs = await self.parts.call_stream(
                    name, "snapshot.read", {"from_seq": seq, "last_seq": last_seq, "bytes_max": READ_BYTES})
                records = []
                for seq_, _, subject, headers, payload, crc in iter_records(blobs[0]):
                    total.add(seq_, subject, headers, payload, crc)
                if blobs[0]:
                    records.append(blobs[0])
                    await sender.write(encode_msgs(records))
                seq, done = int(result["next_seq"]), bool(result["done"])
            for consumer in consumers:
                try:  # its replicated state as the leader holds it now (`snapshot_format`'s CONSUMER frame)
                    _, state = await self.parts.call_stream(name, "snapshot.consumer", {"name": consumer["name"]})
                except ConsumerNotFound:
                    continue  # deleted since it was listed: not in the snapshot
                await sender.write(encode_consumer({**consumer, STATE_KEY: base64.b64encode(state[0]).decode()}))
            await sender.write(encode_end(total.to_json(last_seq)))
            await sender.close()
        except (JsraftError, trio.TooSlowError) as error:
            description = getattr(error, "description", None) or "the client stopped acknowledging"
            log.warning("snapshot of %s failed: %s", name, description)
            sender.fail(f"snapshot failed: {description}")
        finally:
            sender.unsubscribe()

    # --- Restore --------------------------------------------------------------------------------------

    async def restore(self, request: "ApiRequest") -> dict[str, Any]:
        try:
            body = json.loads(request.payload)
        except ValueError:
            raise BadRequest("restore request is not JSON") from None
        if not isinstance(body, dict) or not isinstance(body.get("config"), dict):
            raise BadRequest("restore request needs the stream's config")
        if body["config"].get("name") != request.name:
            raise BadRequest("stream name in subject does not match request")
        await meta_barrier(self.parts)
        if request.name in self.parts.meta.names():
            raise StreamExistsRestore()  # invariant 3
        restore = _Restore(self, request, body, secrets.token_hex(8))
        restore.sub = self.clients.subscribe_internal(restore.deliver_subject, restore.on_chunk)
        self.clients.start_soon(restore.watch)
        return {"deliver_subject": restore.deliver_subject}


class _ChunkSender:
    """Chunks of a byte stream to a deliver subject, with nats-server's ack-window flow control."""

    def __init__(self, clients: "ClientServer", name: str, deliver: str, chunk_size: int, window: int) -> None:
        self.clients, self.deliver, self.chunk_size, self.window = clients, deliver, chunk_size, window
        self.buffer = bytearray()
        self.outstanding = 0
        self.index = 0
        self.acked = trio.Event()
        self.ack_prefix = f"$JS.SNAPSHOT.ACK.{name}.{secrets.token_hex(8)}"
        self.sub = clients.subscribe_internal(self.ack_prefix + ".>", self._on_ack, sync=True)

    def _on_ack(self, msg: "InternalMsg") -> None:
        try:
            self.outstanding -= int(msg.subject.split(".")[-2])
        except ValueError:
            pass
        self.acked.set()
        msg.done()

    async def write(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= self.chunk_size:
            await self._chunk(bytes(self.buffer[:self.chunk_size]))
            del self.buffer[:self.chunk_size]

    async def _chunk(self, chunk: bytes) -> None:
        with trio.fail_after(ACK_TIMEOUT_S):  # invariant 4
            while self.outstanding > self.window:
                self.acked = trio.Event()
                await self.acked.wait()
        self.index += 1
        if not self.clients.publish(self.deliver, chunk, reply=f"{self.ack_prefix}.{len(chunk)}.{self.index}"):
            raise RestoreFailed("snapshot failed: nobody listens on the deliver subject any more")
        self.outstanding += len(chunk)
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        """The last, partial chunk goes without a reply subject, then the end marker (status 204), as
        nats-server 2.15 sends them."""
        if self.buffer:
            self.clients.publish(self.deliver, bytes(self.buffer))
            self.buffer.clear()
        self.clients.publish(self.deliver, b"", headers=b"NATS/1.0 204\r\n\r\n")

    def fail(self, description: str) -> None:
        self.clients.publish(self.deliver, b"", headers=f"NATS/1.0 500 {description}\r\n\r\n".encode())

    def unsubscribe(self) -> None:
        self.clients.unsubscribe_internal(self.sub)


class _Restore:
    """One restore in progress: chunks staged to a file and verified as they come (invariant 1)."""

    def __init__(self, owner: SnapshotEndpoints, request: "ApiRequest", body: dict[str, Any], token: str) -> None:
        self.owner, self.request, self.body = owner, request, body
        self.name = request.name
        self.deliver_subject = f"$JS.SNAPSHOT.RESTORE.{self.name}.{token}"
        directory = os.path.join(owner.parts.config.store_dir, "restore")
        self.path = os.path.join(directory, f"{self.name}.{token}.part")
        try:
            os.makedirs(directory, exist_ok=True)
            self.file = open(self.path, "wb")
        except OSError as error:  # an operating error answers this request; it never ends the node
            raise RestoreFailed(f"restore failed: cannot stage the snapshot: {error}") from None
        self.reader = SnapshotReader()
        self.received = 0
        self.last_chunk = trio.current_time()
        self.sub: Any = None
        self.ended = False
        self.finishing = False  # the last chunk came: no idle limit while the stream is rebuilt

    async def watch(self) -> None:
        while not self.ended:
            await trio.sleep(1.0)
            if not self.finishing and trio.current_time() - self.last_chunk > RESTORE_IDLE_S:  # invariant 4
                log.warning("restore of %s: no chunk for %gs: abandoned", self.name, RESTORE_IDLE_S)
                self.end()

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.owner.clients.unsubscribe_internal(self.sub)
        self.file.close()
        try:
            os.remove(self.path)
        except OSError:
            pass

    async def on_chunk(self, msg: "InternalMsg") -> None:
        if self.ended:
            return
        self.last_chunk = trio.current_time()
        if not msg.reply:
            log.warning("restore of %s: a chunk without a reply subject: abandoned", self.name)
            self.end()
            return
        if msg.payload:
            try:
                self._stage(msg.payload)
            except JsraftError as error:  # invariant 1: the damaged chunk ends the restore at once
                self._answer(msg, {"error": error.to_api()})
                self.end()
                return
            msg.respond(b"")
            return
        self.finishing = True
        try:
            answer = await self._finish()
        except JsraftError as error:
            log.warning("restore of %s failed: %s", self.name, error.description)
            answer = {"error": error.to_api()}
        finally:
            self.end()
        self._answer(msg, answer)

    def _stage(self, payload: bytes) -> None:
        self.received += len(payload)
        if self.received > RESTORE_BYTES_MAX:
            raise RestoreFailed(f"restore failed: more than {RESTORE_BYTES_MAX} bytes")
        try:
            self.file.write(payload)
        except OSError as error:
            raise RestoreFailed(f"restore failed: cannot stage the snapshot: {error}") from None
        self.reader.feed(payload)
        for _ in self.reader.messages():  # verified, then dropped: the file has them (bounded memory)
            pass

    def _answer(self, msg: "InternalMsg", answer: dict[str, Any]) -> None:
        msg.respond(dumps({"type": response_type("stream_create_response"), **answer}))

    async def _finish(self) -> dict[str, Any]:
        try:
            self.file.flush()
        except OSError as error:
            raise RestoreFailed(f"restore failed: cannot stage the snapshot: {error}") from None
        end = self.reader.finish()  # invariant 1: verified before anything is made
        state = self.body.get("state") or {}
        # The stream info's `first_seq` of an empty stream is not the store's (nats-server's shape): only
        # the counts and the last sequence must agree with the snapshot then.
        keys = ("first_seq", "last_seq", "messages", "bytes") if end["messages"] else ("last_seq", "messages", "bytes")
        for key in keys:
            if key in state and state[key] != end[key]:
                raise RestoreFailed(f"restore failed: the request's state says {key}={state[key]}, "
                                    f"the snapshot holds {key}={end[key]}")
        endpoints, request = self.owner.endpoints, self.request
        config = _without_server_metadata(self.body["config"])
        await endpoints.stream_create(self.owner._request(request, f"$JS.API.STREAM.CREATE.{self.name}",
                                                          dumps(config)))
        try:
            await self._replay(end)
            for consumer in self.reader.consumers:
                payload = dumps({"stream_name": self.name, "config": _without_server_metadata(consumer["config"])})
                await endpoints.consumer_create(self.owner._request(
                    request, f"$JS.API.CONSUMER.CREATE.{self.name}.{consumer['name']}", payload))
                await self._restore_state(consumer)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._remove_stream()
            raise
        return await endpoints.stream_info(self.owner._request(request, f"$JS.API.STREAM.INFO.{self.name}"))

    async def _restore_state(self, consumer: dict[str, Any]) -> None:
        """The consumer's replicated state, as it was backed up (only its ack floor in an older backup)."""
        floor = int((consumer.get("ack_floor") or {}).get("stream_seq", 0))
        try:
            state = base64.b64decode(consumer.get(STATE_KEY) or "", validate=True)
        except ValueError:
            raise BadSnapshot(f"restore failed: consumer {consumer['name']!r} state is not base64") from None
        await self.owner.parts.call_stream(self.name, "restore.consumer",
                                          {"name": consumer["name"], "ack_floor_stream_seq": floor}, [state])

    async def _replay(self, end: dict[str, Any]) -> None:
        """Second pass over the staged file: the messages to the leader, then the tuple check (invariant 2)."""
        reader = SnapshotReader()
        parts = self.owner.parts
        try:
            staged = open(self.path, "rb")
        except OSError as error:
            raise RestoreFailed(f"restore failed: the staged snapshot is gone: {error}") from None
        with staged:
            while data := staged.read(APPEND_BYTES):
                reader.feed(data)
                records = [encode_message(seq, ts, subject.encode(errors="surrogateescape"), headers, payload)[0]
                           for seq, ts, subject, headers, payload in reader.messages()]
                if records:
                    await parts.call_stream(self.name, "restore.append", {}, [b"".join(records)])
        restored, _ = await parts.call_stream(self.name, "restore.finish", {"last_seq": end["last_seq"]})
        if restored != end:
            raise RestoreFailed(f"restore failed: the restored stream's state {restored} is not the "
                                f"snapshot's {end}")

    async def _remove_stream(self) -> None:
        try:
            await self.owner.endpoints.stream_delete(self.owner._request(
                self.request, f"$JS.API.STREAM.DELETE.{self.name}"))
        except JsraftError as error:
            log.error("restore of %s failed and its stream could not be removed: %s", self.name, error)
