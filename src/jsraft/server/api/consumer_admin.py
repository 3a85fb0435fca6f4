"""The stream leader's side of the consumer API: create, delete, info, names and list, served over `$rpc`
(`consumer.create`, ...) at the leader of the consumer's stream (layer L5).

Owns: the checks that need the stream's consumer set and config — a create's config against the stream
(`parse_consumer_config(stream=...)`), an existing consumer (same config: answered as it is; `action`
create: 10148; a change nats-server does not allow: 10012), the work-queue rules
(`ConsumerSet.check_create`), `max_consumers` — then the CREATE / DELETE op through the stream log, and
nats-server's `ConsumerInfo` JSON (`info_json`).

Invariants:
  1. Every method needs this node to lead the stream and its consumers (`ConsumerService.require`):
     `NotLeader` otherwise, before anything is proposed (handlers invariant 1), so the router carries
     the request on.
  2. A create or delete is answered once its entry applied here; a create refused at apply (the
     work-queue rules, checked again in log order) raises that refusal.
  3. An info is read after the leader's consumer proposals made before it settled (a bounded barrier):
     a fetch followed by an info sees its delivery.

Imports: stdlib, L0, L1 (`jsapi`, `raft` errors), L2 (`store`), L3 (`consumer`), server siblings.
Reference: nats-server `server/consumer.go` (checkNewConsumerConfig, info), `server/jetstream_cluster.go`
(jsClusteredConsumerRequest).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jsraft.consumer import ConsumerEntry, DeleteOp, num_pending
from jsraft.jsapi import consumer_required_level, served_metadata, validate_stream_name
from jsraft.jsapi.consumer_config import ConsumerConfig, parse_consumer_config
from jsraft.jsapi.account_limits import consumers_max
from jsraft.meta import ConsumerOffline, StreamOffline  # both take the reason alone (10195, 10194)
from jsraft.server.groups.consumer_errors import (
    ConsumerAlreadyExists, ConsumerCreateFailed, ConsumerDoesNotExist, ConsumerNotFound, MaximumConsumersLimit,
)
from jsraft.replica.consumer_pull import Leading
from jsraft.server.groups.consumer_service import ConsumerService
from jsraft.server.api.jsapi_codec import LIST_LIMIT, rfc3339
from jsraft.server.api.jsapi_stream import cluster_json
from jsraft.server.groups.versioning import check_consumer_level, consumer_offline_reason

if TYPE_CHECKING:
    from jsraft.server.api.api_parts import ApiParts
    from jsraft.server.groups.stream_lookup import LocalStreams

Result = tuple[Any, Sequence[bytes]]

# checkNewConsumerConfig: what an update may not change, with nats-server's words.
_FIXED_ON_UPDATE = (
    ("deliver_policy", "deliver policy can not be updated"),
    ("mem_storage", "storage type can not be updated"),
    ("direct", "direct can not be updated"),
    ("opt_start_seq", "start sequence can not be updated"),
    ("opt_start_time", "start time can not be updated"),
    ("ack_policy", "ack policy can not be updated"),
    ("replay_policy", "replay policy can not be updated"),
    ("idle_heartbeat", "heart beats can not be updated"),
    ("flow_control", "flow control can not be updated"),
    ("max_waiting", "max waiting can not be updated"),
)


def check_update(old: ConsumerConfig, new: ConsumerConfig) -> None:
    """nats-server `checkNewConsumerConfig` (a consumer cannot switch between pull and push)."""
    for field, why in _FIXED_ON_UPDATE:
        if getattr(old, field) != getattr(new, field):
            raise ConsumerCreateFailed(why)
    if old.is_pull and not new.is_pull:
        raise ConsumerCreateFailed("can not update pull consumer to push based")
    if not old.is_pull and new.is_pull:
        raise ConsumerCreateFailed("can not update push consumer to pull based")


def served_config(config: ConsumerConfig, paused_until_ns: int | None = None, *, api_level: int) -> dict[str, Any]:
    served = config.to_json()
    if paused_until_ns is not None and paused_until_ns != config.pause_until_ns:
        # A PAUSE request changed it (consumer_control): nats-server serves the config as it left it.
        served.pop("pause_until", None)
        if paused_until_ns:
            served["pause_until"] = rfc3339(paused_until_ns)
    level = consumer_required_level(config, paused_until_ns)
    served["metadata"] = served_metadata(config.metadata, required_level=level, api_level=api_level)
    return served


def info_json(stream: str, entry: ConsumerEntry, leading: Leading | None, store: Any,
              cluster: dict[str, Any] | None, now_ns: int, api_level: int, *, as_created: bool = False) -> dict[str, Any]:
    """nats-server `ConsumerInfo`, in its field order. `as_created`: the create's answer counts
    `num_pending` from where the consumer starts (its replicated cursor), not from the leader's live one: a
    push leader may deliver between the CREATE's apply and this answer, and a client that reads 0 pending
    there (nats-py's KV watcher) takes the initial values as done before it saw them."""
    config, state = entry.config, entry.state
    assert config is not None
    live = leading is not None and not as_created
    cursor = leading.leader.next_seq - 1 if live and leading is not None else state.delivered_stream_seq
    delivered: dict[str, Any] = {"consumer_seq": state.delivered_consumer_seq,
                                 "stream_seq": state.delivered_stream_seq}
    ack_floor: dict[str, Any] = {"consumer_seq": state.ack_floor_consumer_seq,
                                 "stream_seq": state.ack_floor_stream_seq}
    if leading is not None and leading.delivered_ns:
        delivered["last_active"] = rfc3339(leading.delivered_ns)
    if leading is not None and leading.acked_ns:
        ack_floor["last_active"] = rfc3339(leading.acked_ns)
    info: dict[str, Any] = {
        "stream_name": stream, "name": entry.name, "created": rfc3339(entry.created_ns),
        "config": served_config(config, entry.paused_until_ns, api_level=api_level), "delivered": delivered, "ack_floor": ack_floor,
        "num_ack_pending": state.num_ack_pending,
        # nats-server reports no redeliveries for max_deliver 1: there are none to make.
        "num_redelivered": 0 if config.max_deliver == 1 else state.num_redelivered,
        "num_waiting": len(leading.queue) if leading is not None else 0,
        # The leader's kept count while it holds (delivery rule 7): a filtered count walks half the stream.
        "num_pending": leading.leader.num_pending(store) if live and leading is not None else
        num_pending(store, config.filters, cursor),
    }
    if cluster is not None:
        info["cluster"] = cluster
    if getattr(leading, "interest", False):
        info["push_bound"] = True  # a push consumer with a subscriber (nats-server `isActive`)
    if entry.paused_until_ns > now_ns:
        info["paused"], info["pause_remaining"] = True, entry.paused_until_ns - now_ns
    info["ts"] = rfc3339(now_ns)
    return info


async def leading_service(local: "LocalStreams", args: dict[str, Any]) -> ConsumerService:
    """The consumer service of `args["stream"]` on this node, leading (invariant 1): `NotLeader` when this
    node has no replica of it, `StreamNotFound` when the stream does not exist at all."""
    name = validate_stream_name(str(args["stream"]))
    replica = local.replica(name, args)
    await replica.wait_leader(1.0)
    replica.consumers.follow(replica.leader)
    replica.consumers.require()
    return replica.consumers


class ConsumerAdmin:
    """The `consumer.*` admin methods; `register` adds them to a node's request table."""

    def __init__(self, parts: "ApiParts") -> None:
        self.parts = parts

    def register(self, table: dict[str, Any]) -> None:
        table.update({"consumer.create": self.create, "consumer.delete": self.delete,
                      "consumer.info": self.info, "consumer.names": self.names, "consumer.list": self.list})

    async def _service(self, args: dict[str, Any]) -> ConsumerService:
        return await leading_service(self.parts.local, args)

    def _cluster(self, service: ConsumerService) -> dict[str, Any] | None:
        config = self.parts.config
        if not config.clustered:
            return None
        online = self.parts.online()
        peers = self.parts.meta.stream(service.stream).peers
        replicas = {peer: {"current": True, "status": "current"} if peer in online
                    else {"offline": True, "status": "offline"} for peer in peers}
        # A consumer lives in its stream's group and is led by the stream's leader (DESIGN §6).
        return cluster_json(config.cluster_name, None, self.parts.name, replicas,
                            leader_since_ns=service.replica.leader_since_ns,
                            heard_ns=self.parts.raft_heard_ns.get(service.replica.group))

    def _info(self, service: ConsumerService, name: str, *, as_created: bool = False) -> dict[str, Any]:
        entry = service.replica.adapter.consumers.entries.get(name)  # type: ignore[union-attr]
        if entry is None:
            raise ConsumerNotFound()
        reason = consumer_offline_reason(entry, self.parts.config.api_level)
        if reason is not None:
            raise ConsumerOffline(reason)
        return info_json(service.stream, entry, service.leading.get(name), service.replica.store,
                         self._cluster(service), service.now_ns(), self.parts.config.api_level, as_created=as_created)

    # --- Methods ------------------------------------------------------------------------------------------

    async def create(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        service = await self._service(args)
        name, action = str(args["name"]), str(args.get("action") or "")
        machine = service.replica.machine
        assert machine is not None
        config, raw = parse_consumer_config(blobs[0], stream=machine.config)
        check_consumer_level(config, config.pause_until_ns, self.parts.config.api_level)
        consumers = service.replica.adapter.consumers.consumers  # type: ignore[union-attr]  # the ConsumerSet
        existing = consumers.consumers.get(name)
        offline = consumer_offline_reason(existing, self.parts.config.api_level) if existing is not None else None
        if offline is not None:
            raise ConsumerOffline(offline)
        if service.replica.stopped_reason is not None:  # stream_replica invariant 6: only deletes
            raise StreamOffline(service.replica.stopped_reason)
        if existing is not None:
            if existing.config == config:
                await service.settled()
                return self._info(service, name), ()
            if action == "create":
                raise ConsumerAlreadyExists()
            check_update(existing.config, config)
        elif action == "update":
            raise ConsumerDoesNotExist()
        elif 0 < consumers_max(machine.config.max_consumers, self.parts.config.account_limits) \
                <= len(consumers.consumers):
            raise MaximumConsumersLimit()
        consumers.check_create(name, config)
        if existing is None:
            service.hold(name)  # no delivery ahead of this answer (consumer_service invariant 6)
        try:
            proposal = await service.propose([consumers.create_op(name, config, raw, service.now_ns())])
            applied = await service.replica.runtime.outcome(service.replica.group, proposal)
            for refused, error in getattr(applied, "refused", ()):
                if refused == name:
                    raise error  # invariant 2
            return self._info(service, name, as_created=existing is None), ()
        finally:
            if existing is None:
                service.release(name)

    async def delete(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        service = await self._service(args)
        name = str(args["name"])
        if name not in service.replica.adapter.consumers.entries:  # type: ignore[union-attr]
            raise ConsumerNotFound()
        proposal = await service.propose([DeleteOp(name=name)])
        await service.replica.runtime.outcome(service.replica.group, proposal)
        return {"success": True}, ()

    async def info(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        service = await self._service(args)
        await service.settled()  # invariant 3
        return self._info(service, str(args["name"])), ()

    async def names(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        service = await self._service(args)
        return {"names": sorted(service.replica.adapter.consumers.entries)}, ()  # type: ignore

    async def list(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """One page of infos from `offset`; an offline consumer is listed by name under `offline`."""
        service = await self._service(args)
        await service.settled()
        entries = service.replica.adapter.consumers.entries  # type: ignore[union-attr]
        names = sorted(entries)
        offset = min(max(int(args.get("offset") or 0), 0), len(names))
        infos, offline = [], {}
        for name in names[offset:offset + LIST_LIMIT]:
            try:
                infos.append(self._info(service, name))
            except ConsumerOffline as error:  # nats-server's `offline` map holds the reason alone
                offline[name] = error.reason
        return {"total": len(names), "offset": offset, "infos": infos, "offline": offline}, ()
