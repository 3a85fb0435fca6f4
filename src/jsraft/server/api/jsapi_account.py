"""The JetStream account a node serves: `$JS.API.INFO`, its limits, and its domain (layer L5).

Owns: the account info answer (nats-server's `JetStreamAccountStats`: usage, reservations, stream and
consumer counts, `limits`, `domain`, `api`), the account-limit checks a stream create or update passes
before it reaches the meta leader (`check_stream`), and the domain's API prefix: `$JS.<domain>.API.>`
is imported into `$JS.API.>` (`import_domain_api`), as nats-server maps it.

Invariants:
  1. Usage counts every replica's bytes, as nats-server sums what each server stores; reservations are
     `max_bytes` times the replicas (`jsapi.account_limits` invariant 3). A stream's bytes and consumer
     count come from this node's replica when it has one open; the streams it has none of are asked of
     their peers in one `jsapi.account_usage` request per peer node, all peers at once (a peer answers
     for every replica it has open), never one request per stream: an account info costs at most one
     round trip per round (`USAGE_ROUNDS_MAX`), whatever the number of streams. A stream no peer answers
     for counts 0 bytes and 0 consumers.
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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

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
USAGE_METHOD = "jsapi.account_usage"
# Rounds of usage requests: a stream whose asked peer has no replica open is asked of its next peer in
# the next round (a stream has at most 5 replicas, and one of them may be this node's).
USAGE_ROUNDS_MAX = 5

Usage = tuple[int, int]  # (bytes one replica holds, consumers)


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
        usage = await self.usage([a for a in assignments if a.config is not None])
        consumers = 0
        for assignment in assignments:
            config = assignment.config
            if config is None:
                continue
            stream_bytes, stream_consumers = usage.get(assignment.name, (0, 0))
            used[config.storage] += stream_bytes * config.num_replicas
            reserved[config.storage] += reservation_bytes(config)
            consumers += stream_consumers
        total, errors = self.counters()
        answer: dict[str, Any] = {
            "memory": used[StorageType.memory], "storage": used[StorageType.file],
            "reserved_memory": reserved[StorageType.memory], "reserved_storage": reserved[StorageType.file],
            "streams": len(assignments), "consumers": consumers, "limits": self.limits.to_json()}
        if self.domain is not None:
            answer["domain"] = self.domain
        answer["api"] = {"level": self.parts.config.api_level, "total": total, "errors": errors}
        return answer

    # --- Usage (invariant 1) ----------------------------------------------------------------------------

    def register(self, table: dict[str, Any]) -> None:
        table[USAGE_METHOD] = self._usage_answer

    async def _usage_answer(self, args: dict[str, Any], blobs: list[bytes]) -> tuple[Any, Sequence[bytes]]:
        """`jsapi.account_usage` from a peer: every replica open here, by name, with its group."""
        return {"streams": {name: [group, *usage] for name, (group, usage) in self._local().items()}}, ()

    def _local(self) -> dict[str, tuple[str, Usage]]:
        """Name -> (group, (bytes, consumers)) of each replica open here with its store and state machine."""
        found: dict[str, tuple[str, Usage]] = {}
        for name, replica in self.parts.local.replicas.items():
            if replica.store is not None and replica.adapter is not None:
                usage = (replica.store.state().bytes, len(replica.adapter.consumers.entries))
                found[name] = (replica.group, usage)
        return found

    async def usage(self, assignments: list[StreamAssignment]) -> dict[str, Usage]:
        """Each stream's usage: this node's replica's, else one of its peers' (invariant 1)."""
        local = self._local()
        usage = {a.name: local[a.name][1] for a in assignments if local.get(a.name, ("", None))[0] == a.group}
        missing = [a for a in assignments if a.name not in usage]
        tried: dict[str, set[str]] = {a.name: {self.parts.name} for a in missing}
        for _ in range(USAGE_ROUNDS_MAX):
            online = self.parts.online()
            asks: dict[str, dict[str, str]] = {}  # peer -> {stream name: group}
            for assignment in missing:
                peer = next((p for p in assignment.peers if p in online and p not in tried[assignment.name]), None)
                if peer is not None:
                    tried[assignment.name].add(peer)
                    asks.setdefault(peer, {})[assignment.name] = assignment.group
            if not asks:
                break
            async with trio.open_nursery() as nursery:
                for peer, wanted in asks.items():
                    nursery.start_soon(self._ask, peer, wanted, usage)
            missing = [a for a in missing if a.name not in usage]
        return usage

    async def _ask(self, peer: str, wanted: dict[str, str], usage: dict[str, Usage]) -> None:
        """One peer's usage of the streams in `wanted` (name -> group) into `usage`; nothing when it fails."""
        try:
            answer, _ = await self.parts.call_peer(peer, USAGE_METHOD, {}, timeout_s=STATE_TIMEOUT_S)
        except JsraftError:
            return
        for name, group in wanted.items():
            found = answer["streams"].get(name)
            if found is not None and found[0] == group:
                usage[name] = (int(found[1]), int(found[2]))

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
