"""`JsApi`: the JetStream JSON API on the client port — `$JS.API.INFO`, `$JS.API.STREAM.>`,
`$JS.API.META.>`, `$JS.API.CONSUMER.>` — answered by whichever node receives the request (layer L5).

Owns: the internal subscriptions and the table from request subject to endpoint, the response envelope
(`{"type": "io.nats.jetstream.api.v1.<kind>", ...}` or `{"type": ..., "error": {"code", "err_code",
"description"}}`), the API counters of `$JS.API.INFO` (`api.total`, `api.errors`), the account info
(served by `jsapi_account`, which also imports the domain's API prefix), and the admin endpoints (stream create, update, info, delete, names, list). The data endpoints
are in `jsapi_data`, snapshot and restore in `jsapi_snapshot`, direct gets in `jsapi_direct`, the leader-side work in `jsapi_stream`, the consumer
endpoints in `jsapi_consumer` (their leader side in `consumer_admin` and `consumer_control`; pull requests
and acks, which are not JSON API requests, in `consumer_hub`). It attaches the client port to the node's
`AdvisoryLog`, which publishes the consumer events on it (`consumer_events`).

Invariants:
  1. Every request on a known subject with a reply subject gets exactly one answer, whatever fails: an
     operating error (`JsraftError`, local or relayed by `$rpc`) becomes the error object, with
     nats-server's `code` and `err_code`. A subject that names no endpoint is not answered (nats-server
     drops it the same way).
  2. The API subscriptions are ordinary subscriptions of the node: a client subscribed to `$JS.API.>`
     sees every request as well (as on nats-server), and no request depends on one.
  3. Admin requests go to the meta leader, stream requests to the stream leader (`Node.call_meta`,
     `Node.call_stream`). What is answered from this node's own meta state — the account info, stream
     names and lists, "stream not found" — is answered after a read barrier (`jsapi_data.meta_barrier`):
     every stream created or deleted through any node before the request arrived is seen.
  4. A create or update is answered with the stream info of the config the meta leader committed, once
     this node's meta state holds that config (so the caller's next request here finds it, and reads
     the new limits: jsapi_stream invariant 6) and the group applied it — but the create that made the
     group, whose replicas open with its config, does not wait for its CONFIG entry (a later INFO does).
  5. An error answer carries, besides `type` and `error`, the fields nats-server's response struct
     always serializes, at their zero value: `total`/`offset`/`limit` 0 for stream info, names and list,
     `"streams": null` (names) or `[]` (list), `"purged": 0` for a purge.
  6. The counters follow nats-server's (`sendAPIResponse` counts `total`, `sendAPIErrResponse` counts
     `total` and `errors`): every answer counts, except a successful STREAM.MSG.GET, which counts
     nowhere. An answer from the stream group (a message delete's "sequence N not found") counts as an
     error, as in a clustered nats-server, where the stream leader answers it from its apply loop.
  7. `dispatch` answers in the step its endpoint returns (no checkpoint after it): a consumer create's
     answer reaches the client before any delivery the routes hand on after its reply (rpc invariant
     7), and before the new consumer's first pass on this node (consumer_service invariant 6).

Imports: stdlib, L0, L1 (`jsapi`, `subjects`), L3 (`meta` errors), trio, server siblings.
Reference: nats-server `server/jetstream_api.go` (`jsAccountInfoRequest`, `jsStreamCreateRequest`,
`jsStreamUpdateRequest`, `jsStreamInfoRequest`, `jsStreamDeleteRequest`, `jsStreamNamesRequest`,
`jsStreamListRequest`), ADR-8 (JetStream JSON API).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from jsraft import subjects
from jsraft.errors import InvalidConfig, JsraftError
from jsraft.jsapi import listed_metadata, parse_stream_config
from jsraft.meta import StreamOffline
from jsraft.server.nats.client_server import ClientServer, InternalMsg
from jsraft.server.api.consumer_admin import ConsumerAdmin
from jsraft.server.api.consumer_control import ConsumerControl
from jsraft.server.api.consumer_hub import ConsumerHub
from jsraft.server.errors import NoLeader
from jsraft.server.api.group_ops import GroupOps
from jsraft.server.api.header_block import decode_headers
from jsraft.server.api.jsapi_codec import (
    LIST_LIMIT, NAMES_LIMIT, ZERO_TIME, SUBJECT_DETAILS_MAX, NotEmptyRequest, PagedRequest, StreamInfoRequest, StreamMismatch,
    StreamNamePathSeparators, decode_request, decode_stream_config, dumps, is_empty_request,
    is_json_object_or_array, response_type,
)
from jsraft.server.api.jsapi_account import Account, import_domain_api
from jsraft.server.api.jsapi_consumer import ConsumerEndpoints
from jsraft.server.api.jsapi_data import DataEndpoints, meta_barrier, online
from jsraft.server.api.bulk_get import BulkGets
from jsraft.server.api.jsapi_direct import DirectGets
from jsraft.server.api.jsapi_snapshot import Endpoints, SnapshotEndpoints
from jsraft.server.api.snapshot_leader import SnapshotLeaderSide
from jsraft.server.api.jsapi_stream import LeaderSide, config_json
from jsraft.replica.stream_events import stream_action

if TYPE_CHECKING:
    from jsraft.server.api.api_parts import ApiParts

log = logging.getLogger("jsraft.server.jsapi")

API_SUBJECTS = ("$JS.API.INFO", "$JS.API.STREAM.>", "$JS.API.META.>", "$JS.API.CONSUMER.>", "$JS.API.SERVER.>")
REQUIRED_LEVEL_HEADER = "Nats-Required-Api-Level"
SETTLE_TIMEOUT_S = 10.0
GROUP_WAIT_S = 2.0  # `_local_group_known`: past it the router's retries take over (nothing is lost)


@attrs.frozen
class ApiRequest:
    name: str  # the stream named in the subject ("" when the subject names none)
    payload: bytes
    reply: str | None
    subject: str = ""  # the whole request subject (consumer endpoints read further names from it)


Endpoint = Callable[[ApiRequest], Awaitable[dict[str, Any]]]


# The fields nats-server's response structs always carry (no `omitempty`), so an error answer has them
# too, at their zero value (invariant 5).
PAGED_ZERO = (("total", 0), ("offset", 0), ("limit", 0))


@attrs.frozen
class Route:
    pattern: tuple[str, ...]  # the tokens after `$JS.API`; "*" is the stream name; a last ">": one or more
    kind: str  # the response type's last part
    endpoint: Endpoint
    # nats-server counts a successful STREAM.MSG.GET nowhere (its answer bypasses the API layer), a
    # failed one in `total` and `errors`, like every other request (invariant 6).
    success_counted: bool = True
    error_fields: tuple[tuple[str, Any], ...] = ()  # invariant 5


class JsApi:
    def __init__(self, parts: "ApiParts", clients: ClientServer, table: dict[str, Any]) -> None:
        self.parts = parts
        self.total = 0
        self.errors = 0
        LeaderSide(parts).register(table)  # `table`: the node's request table (`Handlers.table`)
        data = DataEndpoints(parts)
        self.consumer_hub = ConsumerHub(parts, clients)  # pull requests and acks (not JSON API requests)
        consumers = ConsumerEndpoints(parts, self.consumer_hub.acks_carried)
        ConsumerAdmin(parts).register(table)
        ConsumerControl(parts).register(table)  # consumer.pause
        SnapshotLeaderSide(parts.local).register(table)  # snapshot.read, restore.append/finish
        snapshots = SnapshotEndpoints(parts, clients, Endpoints(
            stream_info=self.stream_info, stream_create=self.stream_create, stream_delete=self.stream_delete,
            consumer_create=consumers.create, consumer_list=consumers.list))
        parts.advisories.publisher = lambda subject, payload: clients.publish(subject, payload)
        self.direct = DirectGets(parts, clients)
        self.bulk = BulkGets(parts.local.replicas, parts.call_stream, clients)  # $JSRAFT.BULK.GET.<stream>
        self.group_ops = GroupOps(parts, clients)  # $JSRAFT.API.STREAM.GROUP / ACCEPT_LOSS.<stream>
        self.routes = [
            Route(("INFO",), "account_info_response", self.account_info),
            Route(("STREAM", "CREATE", "*"), "stream_create_response", self.stream_create),
            Route(("STREAM", "UPDATE", "*"), "stream_update_response", self.stream_update),
            Route(("STREAM", "INFO", "*"), "stream_info_response", self.stream_info, error_fields=PAGED_ZERO),
            Route(("STREAM", "DELETE", "*"), "stream_delete_response", self.stream_delete),
            Route(("STREAM", "NAMES"), "stream_names_response", self.stream_names,
                  error_fields=PAGED_ZERO + (("streams", None),)),
            Route(("STREAM", "LIST"), "stream_list_response", self.stream_list,
                  error_fields=PAGED_ZERO + (("streams", []),)),
            Route(("STREAM", "PURGE", "*"), "stream_purge_response", data.purge, error_fields=(("purged", 0),)),
            Route(("STREAM", "MSG", "GET", "*"), "stream_msg_get_response", data.msg_get, success_counted=False),
            Route(("STREAM", "MSG", "DELETE", "*"), "stream_msg_delete_response", data.msg_delete),
            Route(("STREAM", "SNAPSHOT", "*"), "stream_snapshot_response", snapshots.snapshot),
            Route(("STREAM", "RESTORE", "*"), "stream_restore_response", snapshots.restore),
            Route(("STREAM", "LEADER", "STEPDOWN", "*"), "stream_leader_stepdown_response", data.stream_stepdown),
            Route(("STREAM", "PEER", "REMOVE", "*"), "stream_remove_peer_response", data.stream_peer_remove),
            Route(("META", "LEADER", "STEPDOWN"), "meta_leader_stepdown_response", data.meta_stepdown),
            Route(("SERVER", "REMOVE"), "meta_server_remove_response", data.server_remove),
            Route(("CONSUMER", "CREATE", "*"), "consumer_create_response", consumers.create),
            Route(("CONSUMER", "CREATE", "*", ">"), "consumer_create_response", consumers.create),
            Route(("CONSUMER", "DURABLE", "CREATE", "*", "*"), "consumer_create_response", consumers.create),
            Route(("CONSUMER", "INFO", "*", "*"), "consumer_info_response", consumers.info),
            Route(("CONSUMER", "DELETE", "*", "*"), "consumer_delete_response", consumers.delete),
            Route(("CONSUMER", "NAMES", "*"), "consumer_names_response", consumers.names,
                  error_fields=PAGED_ZERO + (("consumers", []),)),
            Route(("CONSUMER", "LIST", "*"), "consumer_list_response", consumers.list,
                  error_fields=PAGED_ZERO + (("consumers", []),)),
            Route(("CONSUMER", "PAUSE", "*", "*"), "consumer_pause_response", consumers.pause,
                  error_fields=(("paused", False), ("pause_until", ZERO_TIME))),
            Route(("CONSUMER", "LEADER", "STEPDOWN", "*", "*"), "consumer_leader_stepdown_response",
                  consumers.leader_stepdown),
        ]
        for subject in API_SUBJECTS:
            clients.subscribe_internal(subject, self.dispatch)
        self.account = Account(parts, lambda: (self.total, self.errors))  # $JS.API.INFO, limits, domain
        self.account.register(table)  # jsapi.account_usage: a peer's account info asks once per node
        import_domain_api(clients, parts.config.jetstream_domain)

    # --- Dispatch -----------------------------------------------------------------------------------

    def route(self, subject: str) -> tuple[Route, str] | None:
        tokens = subject.split(".")[2:]
        for route in self.routes:
            rest = route.pattern[-1] == ">" and len(tokens) >= len(route.pattern)
            if (len(tokens) == len(route.pattern) or rest) and all(
                    p in ("*", ">", t) for p, t in zip(route.pattern, tokens)):
                name = next((t for p, t in zip(route.pattern, tokens) if p == "*"), "")
                return route, name
        return None

    async def dispatch(self, msg: InternalMsg) -> None:
        """Invariant 1."""
        found = self.route(msg.subject)
        if found is None:
            log.debug("no JetStream API endpoint for %r", msg.subject)
            return
        route, name = found
        answer: dict[str, Any] = {"type": response_type(route.kind)}
        try:
            headers = decode_headers(msg.headers or b"") or {}
            self.parts.meta.check_request_level(headers.get(REQUIRED_LEVEL_HEADER))
            answer.update(await route.endpoint(ApiRequest(name, msg.payload, msg.reply, msg.subject)))  # invariant 7
        except JsraftError as error:
            log.debug("JetStream API %s failed: %s", msg.subject, error)
            answer["error"] = error.to_api()
            answer.update((key, list(value) if isinstance(value, list) else value)
                          for key, value in route.error_fields)
        if "error" in answer or route.success_counted:
            self.total += 1
            self.errors += "error" in answer
        msg.respond(dumps(answer))

    # --- Account ------------------------------------------------------------------------------------

    async def account_info(self, request: ApiRequest) -> dict[str, Any]:
        return await self.account.info()

    # --- Stream admin -------------------------------------------------------------------------------

    async def stream_create(self, request: ApiRequest) -> dict[str, Any]:
        config, raw = decode_stream_config(request.payload)
        if config.name != request.name:
            raise StreamMismatch()
        if "/" in request.name or "\\" in request.name:
            raise StreamNamePathSeparators()
        if config.sealed:
            raise InvalidConfig("stream configuration for create can not be sealed")
        if config.mirror_direct and config.mirror is None:
            raise InvalidConfig("stream has no mirror but does have mirror direct")
        # `config.with_defaults().validate()`, through the parse the meta leader's apply makes of the same
        # bytes and name (`meta.assignment.parse_config`): its memo then has it (stream_config invariant 4).
        checked, _ = parse_stream_config(raw, expected_name=request.name)
        await self.account.check_stream(checked, create=True)
        await meta_barrier(self.parts)  # `did_create` is true only for a stream no node had created
        existed = self.parts.meta.has_stream(request.name)
        result, _ = await self.parts.call_meta("stream.create", {"name": request.name}, [raw])
        info = await self._settled_info(request.name, result, created=not existed)
        if not existed:
            info["did_create"] = True
            self._advise(*stream_action(request.name, "create"))
        return info

    async def stream_update(self, request: ApiRequest) -> dict[str, Any]:
        config, raw = decode_stream_config(request.payload)
        config.with_defaults().validate()
        if config.name != request.name:
            raise StreamMismatch()
        await self.account.check_stream(config.with_defaults(), create=False)
        replica = self.parts.local.replicas.get(request.name)
        if replica is not None and replica.stopped_reason is not None:  # only deletes while stopped
            raise StreamOffline(replica.stopped_reason)
        result, _ = await self.parts.call_meta("stream.update", {"name": request.name}, [raw])
        info = await self._settled_info(request.name, result)
        self._advise(*stream_action(request.name, "modify"))
        return self.account.with_domain(info)  # nats-server's update answer has it, its create answer not

    def _advise(self, subject: str, body: dict[str, Any]) -> None:
        """A stream action advisory, published by the node that answered the request (once per change)."""
        self.parts.advisories.publish(subject, body)

    async def _settled_info(self, name: str, result: dict[str, Any], *, created: bool = False) -> dict[str, Any]:
        """Invariant 4: the stream info, with the config the meta leader answered (`created`: by this create)."""
        version = int(result.get("config_index", 0))  # this node's meta must hold the answered config
        meta = self.parts.meta
        with trio.move_on_after(SETTLE_TIMEOUT_S):  # woken after each Ready cycle (`runtime.progress`)
            await self.parts.runtime.progress.until(
                lambda: meta.has_stream(name) and meta.stream(name).config_index >= version, float("inf"))
            await self._local_group_known(name)
            info = await self.info(name, config_index=0 if created else None, with_config=False)
            assignment, answered = self.parts.meta.stream(name), result["config"].encode()
            # The answered config is usually the assignment's: served from its parsed view, not decoded again.
            info["config"] = config_json(answered, assignment.required_level, self.parts.config.api_level,
                                         assignment.config if answered == assignment.config_raw else None)
            if not self.parts.config.clustered:
                info.pop("cluster", None)  # a standalone nats-server's create/update answer has none
            return info
        raise NoLeader(f"stream {name!r} was stored but is not visible on {self.parts.name} yet")

    async def _local_group_known(self, name: str) -> None:
        """Before a create's or update's info, on a member of the stream: wait (bounded) until its replica
        opened and knows the group's leader (`first_election`), so the info finds the leader at once."""
        def known() -> bool:
            replica = self.parts.local.replicas.get(name)
            return (self.parts.name not in self.parts.meta.stream(name).peers
                    or (replica is not None and replica.leader_id() is not None))
        await self.parts.runtime.progress.until(known, GROUP_WAIT_S)

    async def info(self, name: str, subjects_filter: str = "", *, config_index: int | None = None,
                   with_config: bool = True) -> dict[str, Any]:
        """`with_config` False: the leader leaves `config` out (the caller serves its own: `_settled_info`)."""
        assignment = await online(self.parts, name)  # its config version: read-your-writes (jsapi_stream 6)
        args: dict[str, Any] = {"subjects_filter": subjects_filter,
                                "config_index": assignment.config_index if config_index is None else config_index}
        if not with_config:
            args["config"] = False  # a peer of an older build sends it anyway: replaced all the same
        result, _ = await self.parts.call_stream(name, "jsapi.stream_info", args)
        return dict(result)

    async def stream_info(self, request: ApiRequest) -> dict[str, Any]:
        body = StreamInfoRequest()
        if is_json_object_or_array(request.payload):
            body = decode_request(request.payload, StreamInfoRequest)
        info = await self.info(request.name, body.subjects_filter)
        paged = {"total": 0, "offset": 0, "limit": 0}
        found = info["state"].get("subjects")
        if found:
            names = sorted(found)
            offset = min(max(body.offset, 0), len(names))
            paged = {"total": len(names), "offset": offset, "limit": SUBJECT_DETAILS_MAX}
            page = {key: found[key] for key in names[offset:offset + SUBJECT_DETAILS_MAX]}
            if page:
                info["state"]["subjects"] = page
            else:  # nats-server leaves an empty page out
                del info["state"]["subjects"]
        return {**paged, **self.account.with_domain(info)}

    async def stream_delete(self, request: ApiRequest) -> dict[str, Any]:
        if not is_empty_request(request.payload):
            raise NotEmptyRequest()
        await self.parts.call_meta("stream.delete", {"name": request.name})
        self._advise(*stream_action(request.name, "delete"))
        return {"success": True}

    # --- Listings -----------------------------------------------------------------------------------

    async def _names(self, payload: bytes) -> tuple[list[str], int]:
        """The stream names matching the request's subject filter, sorted; and the page's offset."""
        body = decode_request(payload, PagedRequest) if is_json_object_or_array(payload) else PagedRequest()
        await meta_barrier(self.parts)
        names = [assignment.name for assignment in self.parts.meta.streams()
                 if not body.subject or any(subjects.overlaps(body.subject, subject)
                                            for subject in assignment.subjects or (assignment.name,))]
        return names, min(max(body.offset, 0), len(names))

    async def stream_names(self, request: ApiRequest) -> dict[str, Any]:
        """An empty page is `"streams": null`, as nats-server's (a Go slice nothing was appended to)."""
        names, offset = await self._names(request.payload)
        return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT,
                "streams": names[offset:offset + NAMES_LIMIT] or None}

    async def stream_list(self, request: ApiRequest) -> dict[str, Any]:
        names, offset = await self._names(request.payload)
        page = names[offset:offset + LIST_LIMIT]
        offline = {name: reason for name, reason in self.parts.meta.offline().items() if name in page}
        infos: dict[str, dict[str, Any]] = {}

        async def one(name: str) -> None:
            try:
                info = await self.info(name)
                # nats-server lists the stored config: no dynamic `_nats.*` metadata (api_level rule 4).
                info["config"]["metadata"] = listed_metadata(info["config"].get("metadata", {}))
                infos[name] = self.account.with_domain(info)
            except JsraftError as error:
                if error.err_code == StreamOffline.err_code:  # stopped by a consumer it cannot run
                    offline[name] = error.description.removeprefix("stream is offline: ")
                    return  # listed under `missing`, as nats-server does for silent streams
                log.info("stream list: %s did not answer: %s", name, error)

        async with trio.open_nursery() as nursery:
            for name in page:
                if name not in offline:
                    nursery.start_soon(one, name)
        answer: dict[str, Any] = {"total": len(names), "offset": offset, "limit": LIST_LIMIT,
                                  "streams": [infos[name] for name in page if name in infos]}
        missing = [name for name in page if name not in infos]
        if missing:
            answer["missing"] = missing
        if offline:
            answer["offline"] = offline
        return answer

