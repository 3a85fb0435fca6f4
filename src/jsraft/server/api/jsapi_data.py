"""The JetStream API's stream data endpoints: purge, message get and delete, leader stepdowns (layer L5).

Owns: `$JS.API.STREAM.PURGE.<name>`, `STREAM.MSG.GET.<name>`, `STREAM.MSG.DELETE.<name>`,
`STREAM.LEADER.STEPDOWN.<name>`, `STREAM.PEER.REMOVE.<name>`, `META.LEADER.STEPDOWN` and `SERVER.REMOVE`: checking each request body as nats-server
does, then carrying it to the stream leader (or the meta leader) with `Node.call_stream` /
`Node.call_meta`. `JsApi` (jsapi_handlers) routes requests here and wraps the answers.

Invariants:
  1. A body is checked before anything is sent to a leader: a refused request changed nothing.
  2. A message delete erases the message's bytes unless the request says `no_erase` (nats-server
     `eraseMsg` is the default, `removeMsg` the exception).
  3. A stepdown on a node that is not clustered is 10010 (`ClusterRequired`), as nats-server answers.
  4. "Stream not found" is answered only after a read barrier (`meta_barrier`, Raft's ReadIndex): this
     node's meta state has applied all the meta leader had committed when asked, so a stream created
     through another node a moment ago is found here.

Imports: stdlib, L0, L3 (`meta` errors), server siblings (the runtime's `progress` through `ApiParts`).
Reference: nats-server `server/jetstream_api.go` (`jsStreamPurgeRequest`, `jsMsgGetRequest`,
`jsMsgDeleteRequest`, `jsStreamLeaderStepDownRequest`, `jsLeaderStepDownRequest`, `jsStreamRemovePeerRequest`, `jsLeaderServerRemoveRequest`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jsraft.errors import BadRequest, StreamNotFound
from jsraft.meta import StreamAssignment, StreamOffline
from jsraft.server.errors import NoLeader
from jsraft.server.api.jsapi_codec import (
    ClusterRequired, MsgDeleteRequest, MsgGetRequest, PeerRemoveRequest, PurgeRequest, ServerRemoveRequest, StepdownRequest, decode_request,
    is_empty_request, is_json_object_or_array, stored_msg_json,
)

if TYPE_CHECKING:
    from jsraft.server.api.jsapi_handlers import ApiRequest
    from jsraft.server.api.api_parts import ApiParts

BARRIER_TIMEOUT_S = 10.0


async def meta_barrier(parts: "ApiParts", timeout_s: float = BARRIER_TIMEOUT_S) -> None:
    """Wait until this node's meta state has applied everything the meta leader had committed when
    asked (invariant 4); `NoLeader` (10008) when there is no leader or this node does not catch up."""
    result, _ = await parts.call_meta("jsapi.meta_index", {})
    target = int(result["commit_index"])
    if await parts.runtime.progress.until(lambda: parts.meta.applied_index >= target, timeout_s):
        return  # woken after each Ready cycle (`runtime.progress`), not polled
    raise NoLeader(f"the meta state on {parts.name} is behind the meta leader's")


async def online(parts: "ApiParts", name: str, *, stopped_ok: bool = False) -> StreamAssignment:
    """The stream's assignment; `StreamNotFound` (10059) if there is none — said only after a read
    barrier — and `StreamOffline` (10194) for a stream loaded offline (DESIGN §9), or, unless
    `stopped_ok` (the consumer endpoints, which answer for each consumer), stopped on this node by a
    consumer it cannot run (stream_replica invariant 6)."""
    try:
        assignment = parts.meta.stream(name)
    except StreamNotFound:
        await meta_barrier(parts)
        assignment = parts.meta.stream(name)
    if assignment.offline_reason is not None:
        raise StreamOffline(assignment.offline_reason)
    replica = parts.local.replicas.get(name)
    stopped = replica.stopped_reason if replica is not None and not stopped_ok else None
    if stopped is not None:
        raise StreamOffline(stopped)
    return assignment


class DataEndpoints:
    def __init__(self, parts: "ApiParts") -> None:
        self.parts = parts

    async def purge(self, request: "ApiRequest") -> dict[str, Any]:
        body = PurgeRequest()
        if is_json_object_or_array(request.payload):
            body = decode_request(request.payload, PurgeRequest)
        if body.seq > 0 and body.keep > 0:
            raise BadRequest()  # nats-server: seq and keep are mutually exclusive
        await online(self.parts, request.name)
        args = {"subject": body.filter or None, "seq": body.seq or None, "keep": body.keep or None}
        result, _ = await self.parts.call_stream(request.name, "stream.purge", args)
        return {"success": True, "purged": int(result["purged"])}

    async def msg_get(self, request: "ApiRequest") -> dict[str, Any]:
        if is_empty_request(request.payload):
            raise BadRequest()
        body = decode_request(request.payload, MsgGetRequest)
        if body.batch > 0 or body.max_bytes > 0 or body.up_to_seq > 0 or body.multi_last or body.conflicting():
            raise BadRequest()  # batches are direct gets only; exactly one way to pick the message
        await online(self.parts, request.name)
        result, blobs = await self.parts.call_stream(request.name, "jsapi.msg_get", body.rpc_args())
        headers = b"" if body.no_hdr else blobs[0]
        return {"message": stored_msg_json(str(result["subject"]), int(result["seq"]), headers, blobs[1],
                                           int(result["time_ns"]))}

    async def msg_delete(self, request: "ApiRequest") -> dict[str, Any]:
        if is_empty_request(request.payload):
            raise BadRequest()
        body = decode_request(request.payload, MsgDeleteRequest)
        await online(self.parts, request.name)
        await self.parts.call_stream(request.name, "msg.delete", {"seq": body.seq, "erase": not body.no_erase})
        return {"success": True}

    def _stepdown_args(self, payload: bytes) -> dict[str, Any]:
        if not self.parts.config.clustered:
            raise ClusterRequired()
        body = StepdownRequest()
        if is_json_object_or_array(payload):
            body = decode_request(payload, StepdownRequest)
        placement = body.placement
        if placement is None:
            return {}
        return {"preferred": placement.preferred, "cluster": placement.cluster, "tags": list(placement.tags)}

    async def stream_stepdown(self, request: "ApiRequest") -> dict[str, Any]:
        args = self._stepdown_args(request.payload)
        await online(self.parts, request.name)
        await self.parts.call_stream(request.name, "jsapi.stream_stepdown", args)
        return {"success": True}

    async def stream_peer_remove(self, request: "ApiRequest") -> dict[str, Any]:
        """`$JS.API.STREAM.PEER.REMOVE.<name>` `{"peer": "<server name>"}`: the meta leader moves the
        stream off that server (nats-server's `jsStreamRemovePeerRequest`)."""
        body = decode_request(request.payload, PeerRemoveRequest) if request.payload.strip() else PeerRemoveRequest()
        if not body.peer:
            raise BadRequest("peer is required")
        await meta_barrier(self.parts)
        self.parts.meta.stream(request.name)  # StreamNotFound (10059) first, as nats-server
        await self.parts.call_meta("stream.peer_remove", {"name": request.name, "peer": body.peer})
        return {"success": True}

    async def server_remove(self, request: "ApiRequest") -> dict[str, Any]:
        """`$JS.API.SERVER.REMOVE` `{"peer": name}` or `{"peer_id": id}`: the meta leader takes the server out
        of the meta group and re-places its streams (nats-server's `jsLeaderServerRemoveRequest`)."""
        body = decode_request(request.payload, ServerRemoveRequest) if request.payload.strip() else ServerRemoveRequest()
        peer = body.peer or body.peer_id
        if not peer:
            raise BadRequest("peer or peer_id is required")
        if body.peer and body.peer_id and body.peer != body.peer_id:
            raise BadRequest("peer and peer_id name different servers")
        await self.parts.call_meta("server.remove", {"peer": peer})
        return {"success": True}

    async def meta_stepdown(self, request: "ApiRequest") -> dict[str, Any]:
        await self.parts.call_meta("jsapi.meta_stepdown", self._stepdown_args(request.payload))
        return {"success": True}
