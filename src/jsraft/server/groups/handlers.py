"""What a node does for a request, locally — the one table behind both `$rpc` and in-process calls (L5).

Owns: the request methods and their JSON shapes: admin methods served by the meta leader
(`stream.create`, `stream.update`, `stream.delete`), data methods served by the stream leader
(`msg.publish`, `msg.get`, `msg.delete`, `stream.purge`, `stream.info`), repairs and audits
(`stream.snapshot`, `stream.catchup`, `stream.audit_request` served by the stream leader,
`stream.audit_report` collected by it, `stream.resync` sent by it to a replica an audit found
disagreeing, `stream.audit_agreed` to one awaiting a verdict that agreed; see `stream_repair`,
`stream_audit`), member queries (`replica.state`), and the meta leader's notice to a removed server
(`meta.removed`, see `meta_members`).

Invariants:
  1. A method that needs a leader raises `NotLeader(hint)` on any other node; it never forwards
     (rpc invariant 4): the caller's router retries at the hinted leader.
  2. Nothing here changes replicated state except through a Raft proposal (meta or stream):
     `stream.resync` only makes this replica distrust, and then repair, its own store;
     `stream.audit_agreed` only lets it trust its store again (replica/judgement.py).
  3. A method that awaits after finding its replica looks again before reading the store: a replica
     closed meanwhile answers `StreamNotFound` if a delete closed it, `NotLeader` otherwise, never
     `StoreClosed` (a `stream_info` racing the stream's delete).

Imports: stdlib, L0, L1, L3, L4 (`raft` errors through `runtime`), trio, server siblings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import BadRequest, JsraftError, StreamNotFound
from jsraft.jsapi import validate_stream_name
from jsraft.meta import StreamAssignment
from jsraft.raft.errors import NotLeader
from jsraft.server.groups.stream_audit import report_from_json
from jsraft.server.groups.repair_serve import leader_snapshot, serve_catchup_request
from jsraft.server.groups import stream_handover
from jsraft.server.groups.stream_replica import StreamReplica, api_error

if TYPE_CHECKING:
    from jsraft.runtime.group import GroupStatus
    from jsraft.server.groups.meta_service import MetaService
    from jsraft.server.groups.stream_lookup import CallPeer, LocalStreams

Result = tuple[Any, Sequence[bytes]]
REPLICA_STATE_TIMEOUT_S = 1.0


def assignment_json(assignment: StreamAssignment) -> dict[str, Any]:
    return {"name": assignment.name, "group": assignment.group, "peers": list(assignment.peers),
            "config": assignment.config_raw.decode(), "offline": assignment.offline_reason,
            "config_index": assignment.config_index}


class Handlers:
    def __init__(self, *, local: LocalStreams, meta_service: MetaService, status: Callable[[str], GroupStatus],
                 call_peer: CallPeer) -> None:
        """`status`: a local group's status (`NodeRuntime.status`); `call_peer`: `Rpc.call`."""
        self.local, self.meta_service = local, meta_service
        self._status, self._call_peer = status, call_peer
        self.table = {
            "stream.create": self.stream_create, "stream.update": self.stream_update,
            "stream.delete": self.stream_delete, "stream.peer_remove": self.stream_peer_remove,
            "server.remove": self.server_remove, "meta.removed": self.meta_removed,
            "msg.publish": self.msg_publish, "msg.get": self.msg_get,
            "msg.delete": self.msg_delete, "stream.purge": self.stream_purge, "stream.info": self.stream_info,
            "replica.state": self.replica_state, "stream.snapshot": self.stream_snapshot,
            "stream.catchup": self.stream_catchup, "stream.audit_report": self.stream_audit_report,
            "stream.audit_request": self.stream_audit_request, "stream.resync": self.stream_resync,
            "stream.audit_agreed": self.stream_audit_agreed,
        }

    async def handle(self, from_node: str, method: str, args: dict[str, Any], blobs: list[bytes]) -> Result:
        handler = self.table.get(method)
        if handler is None:
            raise BadRequest(f"unknown method {method!r}")
        try:
            return await handler(args, blobs)
        except (KeyError, IndexError, TypeError, ValueError) as error:
            # Arguments from a peer that do not have the method's shape: that request fails, not the node.
            raise BadRequest(f"{method}: malformed arguments: {error!r}") from None

    # --- Meta leader -----------------------------------------------------------------------------------

    async def stream_create(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        assignment = await self.meta_service.create_stream(str(args["name"]), blobs[0])
        return assignment_json(assignment), ()

    async def stream_update(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        assignment = await self.meta_service.update_stream(str(args["name"]), blobs[0])
        return assignment_json(assignment), ()

    async def stream_delete(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        await self.meta_service.delete_stream(str(args["name"]))
        return {"success": True}, ()

    async def server_remove(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        await self.meta_service.server_remove(str(args["peer"]))
        return {"success": True}, ()

    async def meta_removed(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """The meta leader tells this server it was removed and its storage may not rejoin."""
        return self.meta_service.members.on_notice(args), ()

    async def stream_peer_remove(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        assignment = await self.meta_service.stream_peer_remove(str(args["name"]), str(args["peer"]))
        return assignment_json(assignment), ()

    # --- Stream leader -----------------------------------------------------------------------------------

    def _replica(self, args: dict[str, Any]) -> StreamReplica:
        name = validate_stream_name(str(args["stream"]))
        return self.local.replica(name, args)

    async def _leading(self, args: dict[str, Any]) -> StreamReplica:
        replica = self._replica(args)
        await replica.wait_leader(1.0)
        return replica

    async def msg_publish(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = self._replica(args)
        outcome = await replica.publish(str(args["subject"]), blobs[0], blobs[1])
        if outcome.error is not None:
            raise api_error(outcome.error)
        return {"stream": replica.name, "seq": outcome.seq, "duplicate": outcome.duplicate}, ()

    async def msg_get(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = await self._leading(args)
        store = replica.store
        # Both raise NoMessageFound (10037) for a missing message.
        if args.get("last_by_subj"):
            msg = store.load_last(str(args["last_by_subj"]))
        else:
            msg = store.load(int(args["seq"]))
        return {"subject": msg.subject, "seq": msg.seq, "time_ns": msg.timestamp_ns}, (msg.headers, msg.payload)

    async def msg_delete(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = await self._leading(args)
        await replica.propose_op("propose_delete", int(args["seq"]), erase=bool(args.get("erase", False)))
        return {"success": True}, ()

    async def stream_purge(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = await self._leading(args)
        result = await replica.propose_op("propose_purge", args.get("subject"), args.get("seq"), args.get("keep"))
        return {"success": True, "purged": result.removed}, ()

    async def stream_info(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = await self._leading(args)
        assignment = self.local.meta.stream(replica.name)
        replicas: dict[str, Any] = {}

        async def ask(peer: str) -> None:
            try:
                if peer == self.local.name:
                    replicas[peer], _ = await self.replica_state({"stream": replica.name}, [])
                else:
                    replicas[peer], _ = await self._call_peer(peer, "replica.state", {"stream": replica.name},
                                                                 timeout_s=REPLICA_STATE_TIMEOUT_S)
            except JsraftError as error:
                replicas[peer] = {"offline": True, "error": error.description}

        async with trio.open_nursery() as nursery:
            for peer in assignment.peers:
                nursery.start_soon(ask, peer)
        if replica.closed or self.local.replicas.get(replica.name) is not replica:  # invariant 3
            self.local.meta.stream(replica.name)  # `StreamNotFound` when a delete closed it meanwhile
            raise NotLeader(None)  # stopped or replaced while it asked: whoever leads now answers
        state = replica.store.state()
        commit_index = self._status(replica.group).raft.commit_index
        return {
            "config": assignment_json(assignment)["config"],
            "state": _state_json(state),
            "cluster": {"leader": self.local.name, "replicas": replica.audit.describe(replicas, commit_index)},
        }, ()

    # --- Repairs and audits (stream_repair, stream_audit) ----------------------------------------------------

    async def stream_snapshot(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        index, data = await leader_snapshot(self._replica(args))
        return {"index": index}, (data,)

    async def stream_catchup(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        return {}, (await serve_catchup_request(self._replica(args), blobs[0]),)

    async def stream_audit_report(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        self._replica(args).audit.collect(str(args["replica"]), report_from_json(args["report"]),
                                          awaiting=args.get("awaiting") is True)
        return {}, ()

    async def stream_audit_request(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = await self._leading(args)
        replica.audit.request()
        machine = replica.machine  # the AUDIT proposed for it comes after this index (audit_wish inv. 4)
        return {"applied_index": machine.applied_index if machine is not None else 0}, ()

    async def stream_resync(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        outcome = self._replica(args).repair.on_audit_order(int(args["index"]), args["expected"], args["found"])
        return {"outcome": outcome}, ()

    async def stream_audit_agreed(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        self._replica(args).repair.note_audit(int(args["index"]), True)
        return {}, ()

    # --- Any member -----------------------------------------------------------------------------------------

    async def replica_state(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        name = validate_stream_name(str(args["stream"]))
        replica = self.local.replicas.get(name)
        if replica is None or replica.machine is None:
            raise StreamNotFound(f"stream {name!r} is not open on {self.local.name}")
        machine, adapter = replica.machine, replica.adapter
        return {"state": _state_json(replica.store.state()), "health": str(replica.repair.health()),
                "applied_index": machine.applied_index, "last_seq": machine.last_seq,
                "leader": replica.leader_id(), "faults": len(replica.store.faults()),
                "holding": adapter is not None and adapter.holding, "repair": replica.repair.describe(),
                "last_audit_index": replica.audit.last_audit_index, "store_lost": replica.memory_loss.lost,
                "can_lead": stream_handover.can_lead(replica),  # asked by an unfit leader
                "findings": [finding.to_json() for finding in machine.findings[-8:]]}, ()


def _state_json(state: Any) -> dict[str, Any]:
    return {"first_seq": state.first_seq, "last_seq": state.last_seq, "messages": state.msgs,
            "bytes": state.bytes, "num_deleted": state.num_deleted, "num_subjects": state.num_subjects,
            "digest": state.digest}
