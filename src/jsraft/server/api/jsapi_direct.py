"""`DirectGets`: `$JS.API.DIRECT.GET.<stream>[.<subject>]` for streams with `allow_direct` (layer L5).

Owns: one pair of internal subscriptions per stream whose config has `allow_direct` — the request form
(`DIRECT.GET.<stream>`, a JSON body with `seq`, `last_by_subj` or `next_by_subj`) and the last-by-subject
form (`DIRECT.GET.<stream>.<subject>`, no body) — kept in step with the meta state before each route,
and the reply: the stored message itself, its headers followed by `Nats-Stream`, `Nats-Subject`,
`Nats-Sequence` and `Nats-Time-Stamp`, or a status-only reply (`404 Message Not Found`,
`408 Empty Request` / `Malformed Request` / `Bad Request`, `412 Required Api Level`).

Invariants:
  1. Only streams with `allow_direct` are subscribed: a direct get on any other subject reaches nobody,
     and its requester gets no-responders, as from nats-server (which subscribes exactly those).
  2. The message is read at the stream leader (`jsapi.msg_get`), so a direct get never serves a
     follower's stale copy; the answer is exactly what `STREAM.MSG.GET` would return.
  3. A batch (`batch` with `seq` or `next_by_subj`, optional `max_bytes` and `up_to_seq`) and a
     `multi_last` get (optional `up_to_seq`, `batch`) are served by `direct_batch`, as nats-server serves
     them. Time-based gets (`up_to_time`, `start_time`) are not: fields this build does not know are
     answered `408 Malformed Request`, and a batch by `last_by_subj` `408 Bad Request`, never a partial
     batch.

Imports: stdlib, L0, server siblings. Reference: ADR-31 (JetStream direct get), nats-server
`server/stream.go` (`processDirectGetRequest`, `processDirectGetLastBySubjectRequest`, `getDirectRequest`).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from jsraft.errors import InvalidSubject, JsraftError, NoMessageFound, StreamNotFound
from jsraft.server.nats.client_server import ClientServer, InternalMsg, InternalSubscription
from jsraft.server.api.direct_batch import serve_batch, serve_multi_last
from jsraft.server.api.header_block import decode_headers
from jsraft.server.api.jsapi_codec import MsgGetRequest, decode_request, direct_headers, status_headers

if TYPE_CHECKING:
    from jsraft.meta.machine import StreamCursor
    from jsraft.server.api.api_parts import ApiParts

log = logging.getLogger("jsraft.server.jsapi")

PREFIX = "$JS.API.DIRECT.GET."
_NOT_FOUND = (NoMessageFound.err_code, StreamNotFound.err_code)


class DirectGets:
    def __init__(self, parts: "ApiParts", clients: ClientServer) -> None:
        self._parts = parts
        self._clients = clients
        self._seen_index: int | None = None
        self._subs: dict[str, list[InternalSubscription]] = {}
        self._cursor: StreamCursor | None = None  # where `refresh` is in the meta state's stream changes
        clients.before_route.append(self.refresh)

    def refresh(self) -> None:
        """Invariant 1, checked before each route (like `StreamPublishes.refresh`): the streams changed
        since the last refresh (every stream the first time or after a restore) looked at again."""
        meta = self._parts.meta
        if meta.applied_index == self._seen_index:
            return
        self._seen_index = meta.applied_index
        names, self._cursor = meta.stream_changes(self._cursor)
        if names is None:
            names = set(meta.names()) | self._subs.keys()
        for name in sorted(names):
            config = meta.stream(name).config if meta.has_stream(name) else None
            wanted = config is not None and config.allow_direct
            if not wanted and name in self._subs:
                for sub in self._subs.pop(name):
                    self._clients.unsubscribe_internal(sub)
            elif wanted and name not in self._subs:
                handler = functools.partial(self._get, name)
                try:
                    self._subs[name] = [self._clients.subscribe_internal(PREFIX + name, handler),
                                        self._clients.subscribe_internal(PREFIX + name + ".>", handler)]
                except InvalidSubject as error:
                    log.warning("stream %s: direct get not served: %s", name, error)

    async def _get(self, stream: str, msg: InternalMsg) -> None:
        if not msg.reply:
            return
        headers = decode_headers(msg.headers or b"") or {}
        try:
            self._parts.meta.check_request_level(headers.get("Nats-Required-Api-Level"))
        except JsraftError:
            msg.respond(b"", headers=status_headers(412, "Required Api Level"))
            return
        request = self._request(stream, msg)
        if isinstance(request, bytes):
            msg.respond(b"", headers=request)
            return
        if request.multi_last:
            await serve_multi_last(self._parts.call_stream, lambda payload, block: msg.respond(payload, headers=block),
                                   stream, filters=request.multi_last, up_to_seq=request.up_to_seq,
                                   batch=request.batch)
            return
        if request.batch > 0:
            max_bytes = request.max_bytes or self._parts.config.client_pending_bytes_max
            await serve_batch(self._parts.call_stream, lambda payload, block: msg.respond(payload, headers=block),
                              stream, seq=request.seq, subject_filter=request.next_by_subj, batch=request.batch,
                              max_bytes=max_bytes, no_hdr=request.no_hdr)
            return
        try:
            result, blobs = await self._parts.call_stream(stream, "jsapi.msg_get", request.rpc_args())
        except JsraftError as error:
            if error.err_code in _NOT_FOUND:
                msg.respond(b"", headers=status_headers(404, "Message Not Found"))
            else:
                msg.respond(b"", headers=status_headers(500, error.description))
            return
        block = None if request.no_hdr else direct_headers(stream, str(result["subject"]), int(result["seq"]),
                                                           int(result["time_ns"]), blobs[0])
        msg.respond(blobs[1], headers=block)

    @staticmethod
    def _request(stream: str, msg: InternalMsg) -> MsgGetRequest | bytes:
        """The request, or the status header block that refuses it (invariant 3)."""
        payload = msg.payload
        if msg.subject == PREFIX + stream:
            if not payload.strip():
                return status_headers(408, "Empty Request")
            try:
                request = decode_request(payload, MsgGetRequest)
            except JsraftError:
                return status_headers(408, "Malformed Request")
            if request.multi_last:
                plain = not (request.seq or request.last_by_subj or request.next_by_subj or request.max_bytes)
                return request if plain else status_headers(408, "Bad Request")
            if request.seq == 0 and not request.last_by_subj and not request.next_by_subj:
                return status_headers(408, "Empty Request")
            if request.conflicting() or (request.batch and request.last_by_subj):
                return status_headers(408, "Bad Request")
            if not request.batch and (request.max_bytes or request.up_to_seq):
                return status_headers(408, "Bad Request")
            return request
        key = msg.subject[len(PREFIX + stream) + 1:]
        try:
            extra = decode_request(payload, MsgGetRequest) if payload.strip() else MsgGetRequest()
        except JsraftError:
            return status_headers(408, "Malformed Request")
        if not key or extra != MsgGetRequest(no_hdr=extra.no_hdr):
            return status_headers(408, "Bad Request")
        return MsgGetRequest(last_by_subj=key, no_hdr=extra.no_hdr)
