"""The JetStream account a node serves: `$JS.API.INFO`, its limits, and its domain (layer L5).

Owns: the account info answer (nats-server's `JetStreamAccountStats`: usage, reservations, stream and
consumer counts, `limits`, `domain`, `api`), the account-limit checks a stream create or update passes
before it reaches the meta leader (`check_stream`), and the domain's API prefix: `$JS.<domain>.API.>`
is imported into `$JS.API.>` (`import_domain_api`), as nats-server maps it.

Invariants:
  1. Usage counts every replica's bytes, as nats-server sums what each server stores; reservations are
     `max_bytes` times the replicas (`jsapi.account_limits` invariant 3).
  2. `check_stream` reads this node's meta state after a read barrier (`meta_barrier`): every stream
     created before the request arrived counts against the account's storage. Two creates racing through
     different nodes may both pass the reservation check (nats-server's clustered check has the same
     window); `max_streams` has none, the meta leader counts it with its in-flight creates.
  3. A request on the domain prefix is routed as the same request on `$JS.API.` from the same client, at
     once and in order (a sync handler), so its answer, its counters and its no-responders are those of
     the plain subject.
  4. `limits` is served in full, `domain` only when configured, `tiers` never (jsraft's limits are not
     tiered, and nats-server leaves `tiers` out for an account without tiers).

Imports: stdlib, L1 (`jsapi`), L3 (`meta` errors and assignments), server siblings.
Reference: nats-server `server/jetstream_api.go` (`jsAccountInfoRequest`), `server/jetstream.go`
(`JetStreamAccountStats`, `checkLimits`, `enableJetStream`'s domain service import). The consumer limits
are applied by `jsapi_consumer` (`max_ack_pending`) and `consumer_admin` (`max_consumers` per stream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jsraft.errors import JsraftError
from jsraft.jsapi import StorageType
from jsraft.jsapi.account_limits import AccountLimits, check_reservation, check_stream_config, reservation_bytes
from jsraft.meta import MaximumConsumersLimit, MaximumStreamsLimit, StreamAssignment
from jsraft.server.api.jsapi_data import meta_barrier
from jsraft.server.nats.client_server import ClientServer, InternalMsg

if TYPE_CHECKING:
    from jsraft.server.api.api_parts import ApiParts

STATE_TIMEOUT_S = 1.0
API_PREFIX = "$JS.API."


def domain_prefix(domain: str) -> str:
    return f"$JS.{domain}.API."


def import_domain_api(clients: ClientServer, domain: str | None) -> None:
    """Invariant 3: `$JS.<domain>.API.X` reaches whatever serves `$JS.API.X`."""
    if domain is None:
        return
    prefix = domain_prefix(domain)

    def forward(msg: InternalMsg) -> None:
        try:
            clients.route(msg.origin, API_PREFIX + msg.subject[len(prefix):], msg.reply, msg.headers, msg.payload)
        finally:
            msg.done()

    clients.subscribe_internal(prefix + ">", forward, sync=True)


class Account:
    def __init__(self, parts: "ApiParts", counters: Callable[[], tuple[int, int]]) -> None:
        self.parts = parts
        self.limits: AccountLimits = parts.config.account_limits
        self.domain: str | None = parts.config.jetstream_domain
        self.counters = counters  # (api total, api errors) of the answers so far

    def with_domain(self, info: dict[str, Any]) -> dict[str, Any]:
        """A stream info as nats-server serves it in an info, update or list answer: with the domain."""
        if self.domain is not None:
            info["domain"] = self.domain
        return info

    # --- $JS.API.INFO -----------------------------------------------------------------------------------

    async def info(self) -> dict[str, Any]:
        """Invariants 1 and 4, in nats-server's field order."""
        await meta_barrier(self.parts)
        used = {StorageType.memory: 0, StorageType.file: 0}
        reserved = {StorageType.memory: 0, StorageType.file: 0}
        assignments = self.parts.meta.streams()
        consumers = 0
        for assignment in assignments:
            config = assignment.config
            if config is None:
                continue
            used[config.storage] += await self._stream_bytes(assignment) * config.num_replicas
            reserved[config.storage] += reservation_bytes(config)
            consumers += await self._consumer_count(assignment)
        total, errors = self.counters()
        answer: dict[str, Any] = {
            "memory": used[StorageType.memory], "storage": used[StorageType.file],
            "reserved_memory": reserved[StorageType.memory], "reserved_storage": reserved[StorageType.file],
            "streams": len(assignments), "consumers": consumers, "limits": self.limits.to_json()}
        if self.domain is not None:
            answer["domain"] = self.domain
        answer["api"] = {"level": self.parts.config.api_level, "total": total, "errors": errors}
        return answer

    async def _consumer_count(self, assignment: StreamAssignment) -> int:
        """The stream's consumers (they live in its Raft group, not in the meta state): this node's
        replica's, else its leader's names; 0 when neither answers."""
        replica = self.parts.local.replicas.get(assignment.name)
        if replica is not None and replica.adapter is not None:
            return len(replica.adapter.consumers.entries)
        try:
            answer, _ = await self.parts.call_stream(assignment.name, "consumer.names", {})
            return len(answer["names"])
        except JsraftError:
            return 0

    async def _stream_bytes(self, assignment: StreamAssignment) -> int:
        """Bytes one replica of the stream holds: this node's, else the first peer's that answers."""
        replica = self.parts.local.replicas.get(assignment.name)
        if replica is not None and replica.store is not None:
            return replica.store.state().bytes
        for peer in assignment.peers:
            try:
                answer, _ = await self.parts.call_peer(peer, "replica.state", {"stream": assignment.name},
                                                     timeout_s=STATE_TIMEOUT_S)
                return int(answer["state"]["bytes"])
            except JsraftError:
                continue
        return 0

    # --- Limits -----------------------------------------------------------------------------------------

    async def check_stream(self, config: Any, *, create: bool) -> None:
        """A stream create's or update's config against the account (`jsapi.account_limits` invariant 2;
        invariant 2 here). `config` has its defaults applied. A create that would pass `max_streams` is
        refused here already so that it gets nats-server's answer (10027 before 10026 or 10047); the
        meta leader's count is the one that holds under races."""
        limits = self.limits
        check_stream_config(limits, config)
        if limits.max_streams <= 0 and limits.max_memory < 0 and limits.max_storage < 0:
            if 0 < limits.max_consumers < config.max_consumers:
                raise MaximumConsumersLimit()
            return  # nothing depends on the other streams: no read barrier (a create's latency)
        await meta_barrier(self.parts)
        names = self.parts.meta.names()
        if create and config.name not in names and 0 < limits.max_streams <= len(names):
            raise MaximumStreamsLimit()
        if 0 < limits.max_consumers < config.max_consumers:
            raise MaximumConsumersLimit()
        reserved = sum(reservation_bytes(other.config) for other in self.parts.meta.streams()
                       if other.config is not None and other.name != config.name
                       and other.config.storage == config.storage)
        check_reservation(limits, config, reserved)
