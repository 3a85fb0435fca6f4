"""`StreamPublishes`: a client's publish on a stream's subjects is stored in that stream (layer L5).

Owns: one internal subscription per (stream, subject filter) of every stream in this node's meta state,
kept in step with it before each route, and the handler that sends the message to the stream's leader
(`Node.call_stream(..., "msg.publish")`, with the client's header block as it came) and answers the
PubAck JSON on the reply subject — `{"stream": ..., "seq": ...}`, plus `"duplicate": true` for a
duplicate `Nats-Msg-Id` — or `{"error": {"code", "err_code", "description"}, "stream": ...}`. That is
what nats-py's `js.publish` and `js.publish_async` read. Also `client_service(node)`, which builds the
node's `ClientServer` with this hook attached.

Invariants:
  1. Before a publish is routed, the internal subscriptions match the streams of the meta state applied
     at that moment (`meta.applied_index` is compared on each route, rebuilt when it moved), so a
     publish right after `add_stream` returned on this node is stored, not answered "no responders".
  2. A publish without a reply subject is stored all the same and answered to nobody (nats-server).
  3. Publishes from one connection reach the stream leader in the order they arrived when the leader is
     this node (ClientServer invariant 3); the PubAck's `seq` is the leader's answer, never guessed.

Imports: stdlib, L0, server siblings. Reference: nats-server `server/stream.go` (`processInboundJetStreamMsg`,
`JSPubAckResponse`).
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from jsraft.errors import InvalidSubject, JsraftError
from jsraft.server.client_server import ClientOptions, ClientServer, InternalMsg, InternalSubscription

if TYPE_CHECKING:
    from jsraft.server.node import Node

log = logging.getLogger("jsraft.server.clients")


def server_id(storage_uuid: str) -> str:
    """A stable NATS server id for the node: 'N' and its storage UUID, upper-case (nats-server ids are
    upper-case and start with 'N')."""
    return "N" + uuid.UUID(storage_uuid).hex.upper()


def client_service(node: "Node") -> ClientServer:
    """The node's client port, with stream-subject publishes routed to the streams."""
    config = node.config
    storage_uuid = node.identity.storage_uuid if node.identity is not None else str(uuid.UUID(int=0))
    clients = ClientServer(ClientOptions.of(config), server_id=server_id(storage_uuid), server_name=node.name)
    StreamPublishes(node, clients)
    return clients


class StreamPublishes:
    def __init__(self, node: "Node", clients: ClientServer) -> None:
        self._node = node
        self._clients = clients
        self._seen_index: int | None = None
        self._subs: dict[tuple[str, str], InternalSubscription] = {}
        clients.before_route.append(self.refresh)

    def refresh(self) -> None:
        """Invariant 1."""
        meta = self._node.meta
        index = meta.applied_index
        if index == self._seen_index:
            return
        self._seen_index = index
        wanted = {(assignment.name, subject) for assignment in meta.streams() for subject in assignment.subjects}
        for key in self._subs.keys() - wanted:
            self._clients.unsubscribe_internal(self._subs.pop(key))
        for name, subject in sorted(wanted - self._subs.keys()):
            try:
                self._subs[(name, subject)] = self._clients.subscribe_internal(
                    subject, functools.partial(self._publish, name))
            except InvalidSubject as error:  # meta accepted it, so this is not expected; do not route it
                log.warning("stream %s subject %r not served to clients: %s", name, subject, error)

    async def _publish(self, stream: str, msg: InternalMsg) -> None:
        answer: dict[str, Any]
        try:
            result, _ = await self._node.call_stream(stream, "msg.publish", {"subject": msg.subject},
                                                     [msg.headers or b"", msg.payload])
        except JsraftError as error:
            log.debug("publish on %s to stream %s failed: %s", msg.subject, stream, error)
            answer = {"error": error.to_api(), "stream": stream}
        else:
            answer = {"stream": result["stream"], "seq": int(result["seq"])}
            if result.get("duplicate"):
                answer["duplicate"] = True
        if msg.reply:
            msg.respond(json.dumps(answer, separators=(",", ":")).encode())
