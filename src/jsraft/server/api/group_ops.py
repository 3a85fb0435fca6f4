"""The operator's view of a stream's Raft group, and its way out of a halt (issue 14; layer L5).

Owns two requests on the client port, answered by whichever node receives them:
  `$JSRAFT.API.STREAM.GROUP.<stream>` — every replica's Raft status (role, term, last/commit index,
      acked watermark, repairing and why, halted reason), gathered from each peer over `$rpc`
      (`group.status`); a peer that does not answer is listed with its error.
  `$JSRAFT.API.STREAM.ACCEPT_LOSS.<stream>` with `{"confirm": "<stream>", "replicas": ["n2", ...]}` —
      the core's rule 4 override (`NodeRuntime.accept_data_loss`) on named repairing replicas, over
      `$rpc` (`group.accept_loss`), then the advisory `io.jsraft.advisory.v1.stream_data_loss_accepted`
      on `$JS.EVENT.ADVISORY.JSRAFT.DATA_LOSS_ACCEPTED.<stream>` naming each replica's range given up.

Invariants:
  1. Nothing changes unless `confirm` equals the stream name and every named replica answered that it is
     a repairing member: otherwise `AcceptLossRefused` (20621, 400) and no replica is touched.
  2. Only as many replicas give up data as the group needs for a quorum of healthy voters: the named ones
     are taken from the one holding the longest log down, and once the healthy voters (those that
     answered not repairing, plus those accepted) reach a quorum the rest are left repairing — they repair
     from the new leader and lose nothing. (Accepting two empty replicas of three at once would let them
     elect each other and overwrite the healthy replica's log.)
  3. Each replica that accepts logs a warning naming its range given up; the advisory names every one.

Imports: stdlib, L0, trio, server siblings.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import JsraftError, StreamNotFound
from jsraft.jsapi import validate_stream_name
from jsraft.server.nats.client_server import ClientServer, InternalMsg
from jsraft.server.errors import AcceptLossRefused
from jsraft.replica.stream_events import now_rfc3339

if TYPE_CHECKING:
    from jsraft.runtime.group import GroupStatus
    from jsraft.server.api.api_parts import ApiParts

log = logging.getLogger(__name__)

GROUP_PREFIX = "$JSRAFT.API.STREAM.GROUP."
ACCEPT_PREFIX = "$JSRAFT.API.STREAM.ACCEPT_LOSS."
ADVISORY_TYPE = "io.jsraft.advisory.v1.stream_data_loss_accepted"
ADVISORY_PREFIX = "$JS.EVENT.ADVISORY.JSRAFT.DATA_LOSS_ACCEPTED."
PEER_TIMEOUT_S = 2.0


def status_json(node_name: str, status: GroupStatus) -> dict[str, Any]:
    raft = status.raft
    return {"node": node_name, "role": str(raft.role), "term": raft.current_term,
            "leader": raft.leader_id, "last_index": raft.last_index, "commit_index": raft.commit_index,
            "applied_index": raft.applied_index, "acked_watermark": raft.acked_watermark,
            "repairing": raft.repairing, "repair_reason": raft.repair_reason,
            "halted_reason": raft.halted_reason}


def given_up(before: GroupStatus, after: GroupStatus) -> dict[str, int] | None:
    """The log range this replica gave up: past what it kept, up to the most it knew it held or had
    acknowledged. None when it knew of nothing beyond what it kept (a lost directory knows nothing)."""
    kept, raft = after.raft.last_index, before.raft
    last = max(raft.last_index, raft.acked_watermark, raft.commit_index)
    return {"first": kept + 1, "last": last} if last > kept else None


class GroupOps:
    """The two subscriptions, and the `$rpc` methods each peer serves for them."""

    def __init__(self, parts: ApiParts, clients: ClientServer) -> None:
        self._parts = parts
        self._clients = clients
        clients.subscribe_internal(GROUP_PREFIX + "*", self._group_request)
        clients.subscribe_internal(ACCEPT_PREFIX + "*", self._accept_request)

    def register(self, table: dict[str, Any]) -> None:
        """The `$rpc` methods each peer serves: its replica's status, and accepting its loss."""
        table["group.status"] = self._local_status
        table["group.accept_loss"] = self._local_accept

    # --- On each replica (`$rpc`) -------------------------------------------------------------------------

    def _group_name(self, args: dict[str, Any]) -> str:
        name = validate_stream_name(str(args["stream"]))
        replica = self._parts.local.replicas.get(name)
        if replica is None:
            raise StreamNotFound(f"stream {name!r} is not open on {self._parts.name}")
        return replica.group

    async def _local_status(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, tuple[()]]:
        return status_json(self._parts.name, self._parts.runtime.status(self._group_name(args))), ()

    async def _local_accept(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, tuple[()]]:
        group = self._group_name(args)
        changed = await self._parts.runtime.accept_data_loss(group)
        if changed is None:
            raise AcceptLossRefused(f"{self._parts.name} is not repairing stream {args['stream']!r}")
        before, after = changed
        lost = given_up(before, after)
        log.warning("ACCEPTED DATA LOSS on stream %s (group %s) at the operator's request: kept the log "
                    "through %d, gave up %s; was repairing because: %s", args["stream"], group,
                    after.raft.last_index, f"{lost['first']}..{lost['last']}" if lost else "nothing it knew of",
                    before.raft.repair_reason)
        return {"node": self._parts.name, "kept_through": after.raft.last_index, "given_up": lost,
                "repair_reason": before.raft.repair_reason}, ()

    # --- On the node that received the request ---------------------------------------------------------------

    async def _statuses(self, stream: str) -> list[dict[str, Any]]:
        peers = self._parts.meta.stream(stream).peers
        found: dict[str, dict[str, Any]] = {}

        async def ask(peer: str) -> None:
            try:
                found[peer] = await self._call(peer, "group.status", {"stream": stream})
            except JsraftError as error:
                found[peer] = {"node": peer, "offline": True, "error": error.description}

        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(ask, peer)
        return [found[peer] for peer in peers]

    async def _call(self, peer: str, method: str, args: dict[str, Any]) -> Any:
        if peer == self._parts.name:
            result, _ = await self._parts.handle(peer, method, args, [])
        else:
            result, _ = await self._parts.call_peer(peer, method, args, timeout_s=PEER_TIMEOUT_S)
        return result

    async def _group_request(self, msg: InternalMsg) -> None:
        stream = msg.subject[len(GROUP_PREFIX):]
        await self._answer(msg, "stream_group_response", self._group(stream))

    async def _group(self, stream: str) -> dict[str, Any]:
        validate_stream_name(stream)
        assignment = self._parts.meta.stream(stream)
        return {"stream": stream, "group": assignment.group, "replicas": await self._statuses(stream)}

    async def _accept_request(self, msg: InternalMsg) -> None:
        stream = msg.subject[len(ACCEPT_PREFIX):]
        await self._answer(msg, "stream_accept_loss_response", self._accept(stream, msg.payload))

    async def _accept(self, stream: str, payload: bytes) -> dict[str, Any]:
        validate_stream_name(stream)
        named = _accept_body(stream, payload)
        assignment = self._parts.meta.stream(stream)
        statuses = {s["node"]: s for s in await self._statuses(stream)}
        for name in named:  # invariant 1: all checked before any is touched
            status = statuses.get(name)
            if status is None:
                raise AcceptLossRefused(f"{name} is not a replica of stream {stream!r} "
                                        f"(replicas: {', '.join(assignment.peers)})")
            if status.get("offline"):
                raise AcceptLossRefused(f"{name} did not answer: {status['error']}")
            if not status["repairing"]:
                raise AcceptLossRefused(f"{name} is not repairing: it has nothing to give up")
        healthy = sum(1 for s in statuses.values() if not s.get("offline") and not s["repairing"])
        quorum = len(assignment.peers) // 2 + 1
        accepted, left = [], []
        for name in sorted(named, key=lambda n: (-statuses[n]["last_index"], n)):  # invariant 2
            if healthy >= quorum:
                left.append(name)
                continue
            accepted.append(await self._call(name, "group.accept_loss", {"stream": stream}))
            healthy += 1
        answer = {"stream": stream, "group": assignment.group, "accepted": accepted, "left_repairing": left,
                  "group_last_index": max((s["last_index"] for s in statuses.values() if not s.get("offline")),
                                          default=0)}
        advisory = {"type": ADVISORY_TYPE, "id": uuid.uuid4().hex, "timestamp": now_rfc3339(), **answer}
        log.warning("stream %s: data loss accepted on %s; left repairing (not needed for a quorum): %s",
                    stream, [a["node"] for a in accepted], left)
        self._clients.publish(ADVISORY_PREFIX + stream, json.dumps(advisory).encode())
        return answer

    async def _answer(self, msg: InternalMsg, kind: str, work: Any) -> None:
        body: dict[str, Any] = {"type": f"io.jsraft.api.v1.{kind}"}
        try:
            body.update(await work)
        except JsraftError as error:
            body["error"] = error.to_api()
        if msg.reply:
            msg.respond(json.dumps(body).encode())


def _accept_body(stream: str, payload: bytes) -> list[str]:
    try:
        body = json.loads(payload or b"{}")
    except ValueError:
        raise AcceptLossRefused("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise AcceptLossRefused("the request body is not a JSON object")
    if body.get("confirm") != stream:
        raise AcceptLossRefused(f'"confirm" must be the stream name ({stream!r}) to accept data loss')
    named = body.get("replicas")
    if not isinstance(named, list) or not named or not all(isinstance(n, str) and n for n in named):
        raise AcceptLossRefused('"replicas" must name at least one repairing replica')
    if set(body) - {"confirm", "replicas"}:
        raise AcceptLossRefused(f"unknown fields: {sorted(set(body) - {'confirm', 'replicas'})}")
    return sorted(set(named))
