"""A small request/response layer over the transport's DATA frames, on the reserved group `$rpc` (L5).

Owns: request ids, the wire format of requests and replies, timeouts, and the bound on work in flight.
A request is `method` + a JSON object of arguments + zero or more binary blobs (publish payloads travel
as blobs, never base64); the reply is a JSON result + blobs, or an error object with the error's
`code`, `err_code`, description, class name and (for `NotLeader`) the leader hint.

Frame (big-endian): `kind u8 | id u64 | method str8 | json u32+bytes | blobs u16 count, each u32+bytes`.
`kind` is REQUEST, REPLY or ERROR.

Invariants:
  1. At most `requests_max` requests from peers are served at once; more are answered at once with
     `RpcRefused` (code 503) instead of queueing without bound.
  2. At most `calls_max` outgoing calls wait for replies; a reply for an unknown id (late, after its
     timeout) is dropped.
  3. A malformed frame raises `TransportProtocolError` from `on_payload`: the transport closes that link
     (a broken peer never crashes the node).
  4. The handler never forwards a request itself: routing (retry at the hinted leader) is the caller's,
     so a request makes at most one hop.
  5. Requests sent by one task to one peer (`send_request` has no checkpoint) arrive in order, and a
     method with a `starter` begins to be served in that order: the starter is called as its frame is
     read. Other handlers start in tasks, in whatever order trio runs them.
  6. Every frame to a peer is sent after `before_send(peer)` (the node wires `Routes.send_pending`): what
     this node routed to that peer before the frame leaves before it on their one link (routes
     invariant 7), so an answer never overtakes the deliveries its server made before answering — but
     the reply to a method in `ANSWER_FIRST`: nats-server's consumer leader answers a create before its
     first delivery, and nats-py learns an ordered consumer's new name only from that answer (a
     delivery first, then an info asked by the old name: 404).
  7. ... and that reply is taken in link order on the caller's node: `on_payload` returns a gate for
     it (the transport reads nothing more from that peer until it is set, link invariant 5), which
     `reply` sets once its caller has the reply. The caller answers its client in that same step
     (`JsApi.dispatch` responds with no checkpoint after its endpoint, jsapi_handlers invariant 7), so
     the answer reaches the client before the new consumer's deliveries that followed the reply on the
     link — handed to the client as their frame is read — as nats-server's client sees them.

Imports: stdlib, L0, trio, L4 (`transport` errors), server siblings.
"""

from __future__ import annotations

import itertools
import json
import logging
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from jsraft.errors import JsraftError
from jsraft.raft.errors import NotLeader
from jsraft.server.errors import RemoteError, RpcLinkDown, RpcRefused, RpcTimeout
from jsraft.transport.errors import TransportProtocolError

log = logging.getLogger("jsraft.server.groups.rpc")

RPC_GROUP = "$rpc"
REQUEST, REPLY, ERROR = 0, 1, 2
_LINK_DOWN = -1  # a call slot's kind when the link to its peer went down (never on the wire)
_HEAD = struct.Struct(">BQB")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_BLOBS_MAX = 1024

# (from_node, method, args, blobs) -> (result, blobs)
Handler = Callable[[str, str, dict[str, Any], list[bytes]], Awaitable[tuple[Any, Sequence[bytes]]]]
SendFn = Callable[[str, str, bytes], bool]
# (from_node, args, blobs) -> the awaitable result; called synchronously on the request's arrival. It may
# raise a `JsraftError` at once (answered as the request's error), nothing else.
Starter = Callable[[str, dict[str, Any], list[bytes]], Awaitable[tuple[Any, Sequence[bytes]]]]


def encode_frame(kind: int, request_id: int, method: str, body: Any, blobs: Sequence[bytes] = ()) -> bytes:
    method_bytes = method.encode()
    text = json.dumps(body, separators=(",", ":")).encode()
    parts = [_HEAD.pack(kind, request_id, len(method_bytes)), method_bytes, _U32.pack(len(text)), text,
             _U16.pack(len(blobs))]
    for blob in blobs:
        parts += [_U32.pack(len(blob)), bytes(blob)]
    return b"".join(parts)


def decode_frame(data: bytes) -> tuple[int, int, str, Any, list[bytes]]:
    try:
        view = memoryview(data)
        kind, request_id, method_len = _HEAD.unpack_from(view, 0)
        at = _HEAD.size
        method = bytes(view[at:at + method_len]).decode()
        at += method_len
        (text_len,) = _U32.unpack_from(view, at)
        body = json.loads(bytes(view[at + 4:at + 4 + text_len]))
        at += 4 + text_len
        (count,) = _U16.unpack_from(view, at)
        at += 2
        if kind not in (REQUEST, REPLY, ERROR) or count > _BLOBS_MAX:
            raise ValueError(f"kind {kind}, {count} blobs")
        blobs = []
        for _ in range(count):
            (size,) = _U32.unpack_from(view, at)
            if at + 4 + size > len(view):
                raise ValueError("blob runs past the frame")
            blobs.append(bytes(view[at + 4:at + 4 + size]))
            at += 4 + size
        if at != len(view):
            raise ValueError("trailing bytes")
    except (struct.error, ValueError, UnicodeDecodeError) as error:
        raise TransportProtocolError(f"malformed rpc frame: {error}") from None
    return kind, request_id, method, body, blobs


def error_body(error: JsraftError) -> dict[str, Any]:
    body: dict[str, Any] = {**error.to_api(), "kind": type(error).__name__}
    if isinstance(error, NotLeader):
        body["leader"] = error.leader_id
    return body


def _error_classes() -> dict[str, type[JsraftError]]:
    found: dict[str, type[JsraftError]] = {}
    pending: list[type[JsraftError]] = [JsraftError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.__name__, cls)
        pending.extend(cls.__subclasses__())
    return found


def error_from_body(body: dict[str, Any]) -> JsraftError:
    """The remote error as the same class when this node knows it (so `except StreamNotFound` works on a
    forwarded request as on a local one), else a `RemoteError` with the remote's numbers."""
    kind, description = str(body.get("kind", "")), str(body.get("description", ""))
    code, err_code = int(body.get("code", 500)), int(body.get("err_code", 20000))
    if kind == "NotLeader":
        return NotLeader(body.get("leader"))
    cls = _error_classes().get(kind)
    if cls is not None and cls.err_code == err_code and cls.http_code == code:
        error = cls.__new__(cls)
        JsraftError.__init__(error, description)  # not cls.__init__: its arguments are not on the wire
        return error
    return RemoteError(code, err_code, description, kind)


# Methods whose replies go ahead of what the routes batched for the peer (invariant 6) and are taken
# before what follows them on the link (invariant 7).
ANSWER_FIRST = frozenset({"consumer.create"})


class Rpc:
    """Calls to peers and the serving of their calls; run `run()` in a nursery, wire `on_payload`."""

    def __init__(self, send: SendFn, handler: Handler, *, requests_max: int = 1024, calls_max: int = 4096,
                 before_send: Callable[[str], None] | None = None) -> None:
        self._send = send
        self._handler = handler
        self.requests_max = requests_max
        self.calls_max = calls_max
        self._ids = itertools.count(1)
        self._calls: dict[int, list[Any]] = {}  # id -> [event, kind, body, blobs, to_node, method, gate]
        self._serving = 0
        self._nursery: trio.Nursery | None = None
        # method -> a function called at once when its request arrives (invariant 5); it returns what
        # the serving task awaits. Methods without one go to `handler` in a task of their own.
        self.starters: dict[str, Starter] = {}
        # Called with the peer before each frame to it (invariant 6); None: nothing else shares the link.
        self.before_send = before_send

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def call(self, to_node: str, method: str, args: dict[str, Any], blobs: Sequence[bytes] = (),
                   *, timeout_s: float = 5.0) -> tuple[Any, list[bytes]]:
        """Send one request and wait for its reply; raise the remote's error, `RpcTimeout` or `RpcRefused`."""
        request_id = self.send_request(to_node, method, args, blobs)
        return await self.reply(request_id, timeout_s=timeout_s)

    def send_request(self, to_node: str, method: str, args: dict[str, Any], blobs: Sequence[bytes] = ()) -> int:
        """The first half of `call`, without a checkpoint: requests sent by one task leave in call order.
        Raises `RpcRefused`; the caller must then `await reply(request_id)`."""
        if len(self._calls) >= self.calls_max:
            raise RpcRefused(f"{self.calls_max} calls already waiting for replies")
        request_id = next(self._ids)
        self._calls[request_id] = [trio.Event(), None, None, None, to_node, method, None]
        if not self._send_frame(to_node, encode_frame(REQUEST, request_id, method, args, blobs)):
            del self._calls[request_id]
            raise RpcRefused(f"cannot send {method} to {to_node}: no link or its queue is full")
        return request_id

    async def reply(self, request_id: int, *, timeout_s: float = 5.0) -> tuple[Any, list[bytes]]:
        """The second half of `call`: wait for the reply to a `send_request`."""
        slot = self._calls[request_id]
        to_node, method = slot[4], slot[5]
        try:
            with trio.move_on_after(timeout_s):
                await slot[0].wait()
            if not slot[0].is_set():
                raise RpcTimeout(f"{method} to {to_node}: no reply in {timeout_s}s")
        finally:
            self._calls.pop(request_id, None)
            if slot[6] is not None:
                slot[6].set()  # invariant 7: the caller has its reply; the link reads on after this step
        if slot[1] == _LINK_DOWN:
            raise RpcLinkDown(f"{method} to {to_node}: the link went down before the reply")
        if slot[1] == ERROR:
            raise error_from_body(slot[2])
        return slot[2], slot[3]

    def on_link(self, peer: str, up: bool) -> None:
        """The transport's link to `peer` changed; when it went down, every call waiting for that peer's
        reply fails now with `RpcLinkDown` (a reply can no longer arrive on it: frames are not resent)."""
        if up:
            return
        for slot in self._calls.values():
            if slot[4] == peer and not slot[0].is_set():
                slot[1] = _LINK_DOWN
                slot[0].set()

    def on_payload(self, from_node: str, payload: bytes) -> trio.Event | None:
        """A `$rpc` frame from `from_node` (called synchronously by the transport's reader); a gate for the
        transport when it is the reply to an `ANSWER_FIRST` call (invariant 7)."""
        kind, request_id, method, body, blobs = decode_frame(payload)
        if kind != REQUEST:
            slot = self._calls.get(request_id)
            if slot is not None and not slot[0].is_set():
                slot[1:4] = [kind, body, blobs]
                slot[0].set()
                if kind == REPLY and slot[5] in ANSWER_FIRST:
                    slot[6] = trio.Event()  # set as `reply` ends (a `call` is in it, woken by the set above)
                    return slot[6]
            return None
        if not isinstance(body, dict):
            raise TransportProtocolError("rpc request arguments are not a JSON object")
        if self._nursery is None or self._serving >= self.requests_max:
            refused = RpcRefused(f"{self.requests_max} requests in service; retry")
            self._send_frame(from_node, encode_frame(ERROR, request_id, method, error_body(refused)))
            return None
        starter = self.starters.get(method)
        if starter is None:
            work = self._handler(from_node, method, body, blobs)
        else:
            try:  # it begins serving now, in frame order (invariant 5); the rest is awaited in the task
                work = starter(from_node, body, blobs)
            except JsraftError as error:
                self._send_frame(from_node, encode_frame(ERROR, request_id, method, error_body(error)))
                return None
        self._serving += 1
        self._nursery.start_soon(self._serve, from_node, request_id, method, work)
        return None

    async def _serve(self, from_node: str, request_id: int, method: str,
                     work: Awaitable[tuple[Any, Sequence[bytes]]]) -> None:
        try:
            result, out_blobs = await work
            frame = encode_frame(REPLY, request_id, method, result, out_blobs)
        except JsraftError as error:
            frame = encode_frame(ERROR, request_id, method, error_body(error))
        finally:
            self._serving -= 1
        # A dropped reply (link down) surfaces to the caller as a timeout; nothing to do here.
        self._send_frame(from_node, frame, after_routed=method not in ANSWER_FIRST)

    def _send_frame(self, to_node: str, frame: bytes, *, after_routed: bool = True) -> bool:
        """Invariant 6: `before_send` first, then the frame, with no checkpoint in between."""
        if self.before_send is not None and after_routed:
            self.before_send(to_node)
        return self._send(to_node, RPC_GROUP, frame)
