"""The JetStream API's consumer endpoints: `CONSUMER.CREATE`, `CONSUMER.DURABLE.CREATE`, `CONSUMER.INFO`,
`CONSUMER.DELETE`, `CONSUMER.NAMES`, `CONSUMER.LIST`, `CONSUMER.PAUSE` and `CONSUMER.LEADER.STEPDOWN`
(layer L5).

Owns: what the node receiving a request checks before anything is sent — the create request's shape
(`{"stream_name", "config", "action", "pedantic"}`, decoded strictly), the names in the subject against
the body (legacy ephemeral `CREATE.<stream>`, `CREATE.<stream>.<name>[.<filter>]`,
`DURABLE.CREATE.<stream>.<durable>`) with nats-server's error codes, the consumer's name (given, or
generated for an unnamed ephemeral) and its config as stored (the body's `config` with `name` unless
generated, `ack_policy` `none` when absent, and an ephemeral's default `inactive_threshold` of 5 s) —
then carrying it to the stream leader (`Node.call_stream`, `consumer_admin`) and shaping the answer.
`JsApi` (jsapi_handlers) routes here and wraps the answers in the response envelope.

Invariants:
  1. A request is checked here in nats-server's order (`jsConsumerCreateRequest`) before any leader is
     asked, and the config is parsed against the stream's config known here, so a refused request
     changed nothing and gets the code nats-server gives it.
  2. "Stream not found" is said only after a meta read barrier (`jsapi_data.online`).
  3. Names and list are paged as nats-server pages them (`offset`, `limit` 1024 / 256, `total`); an empty
     page is `"consumers": []`.
  4. A listed consumer's config has no dynamic `_nats.ver` / `_nats.level` metadata (nats-server lists
     the stored config; INFO and CREATE answers serve them).
  5. A consumer's leader is its stream's leader (DESIGN §7): `CONSUMER.LEADER.STEPDOWN` steps the stream
     group's leader down (`jsapi.stream_stepdown`) once the consumer is known to exist; an R1 stream has
     no other leader to hand over to and answers success, as a clustered nats-server does for an R1
     consumer; a node that is not clustered answers 10010 as nats-server does.
  6. `CONSUMER.PAUSE`: a body that is not a JSON object (empty, `{}`, anything else) resumes, as
     nats-server takes it; a `pause_until` that is not an RFC 3339 string is 10025.
  7. Read-your-acks: INFO and LIST are carried to the leader only after the acks this node took for the
     stream before them (consumer_hub invariant 5), so the answer counts a client's acks sent before it.

Imports: stdlib, L0, L1 (`jsapi`), trio, server siblings. Reference: nats-server
`server/jetstream_api.go` (jsConsumerCreateRequest, jsConsumerInfoRequest, jsConsumerDeleteRequest,
jsConsumerNamesRequest, jsConsumerListRequest), `server/consumer.go` (updateInactiveThreshold).
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jsraft.errors import InvalidConfig, InvalidJSON, UnknownConfigField
from jsraft.jsapi import listed_metadata
from jsraft.jsapi.account_limits import consumer_with_account_limits
from jsraft.jsapi.consumer_config import parse_consumer_config, rfc3339_to_ns, validate_consumer_name
from jsraft.server.groups.consumer_errors import (
    ConsumerNamePathSeparators, DurableNameNotInSubject, DurableNameNotMatchSubject, DurableNameNotSet,
    EphemeralWithDurableName, FilterSubjectMismatch, MultipleFiltersNotAllowed,
)
from jsraft.server.api.jsapi_codec import (
    LIST_LIMIT, NAMES_LIMIT, ZERO_TIME, ClusterRequired, NotEmptyRequest, PagedRequest, StepdownRequest,
    StreamMismatch, decode_request, is_empty_request, is_json_object_or_array, load_json,
)
from jsraft.server.api.jsapi_data import online

if TYPE_CHECKING:
    from jsraft.server.api.jsapi_handlers import ApiRequest
    from jsraft.server.api.api_parts import ApiParts

EPHEMERAL_INACTIVE_THRESHOLD_NS = 5_000_000_000  # nats-server JsDeleteWaitTimeDefault
_REQUEST_FIELDS = {"stream_name", "config", "action", "pedantic"}
_ACTIONS = {"": "", "create": "create", "update": "update"}
_NAME_ALPHABET = string.ascii_letters + string.digits


def generated_name() -> str:
    """An unnamed ephemeral's name: 8 letters and digits, as nats-server's `createConsumerName`."""
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(8))


def _json_error(error: InvalidConfig) -> InvalidJSON:
    """A config that does not structure, as nats-server's strict decoder says it (jsapi_codec inv. 1)."""
    if isinstance(error, UnknownConfigField) and error.fields:
        return InvalidJSON(f'invalid JSON: json: unknown field "{error.fields[0]}"')
    return InvalidJSON(f"invalid JSON: {error.description}")


def decode_create(payload: bytes) -> tuple[str, dict[str, Any], str]:
    """`(stream_name, config object, action)` of a create request, strictly."""
    data = load_json(payload)
    if not isinstance(data, dict):
        raise InvalidJSON("invalid JSON: json: cannot unmarshal into a consumer create request")
    unknown = sorted(set(data) - _REQUEST_FIELDS)
    if unknown:
        raise InvalidJSON(f'invalid JSON: json: unknown field "{unknown[0]}"')
    config = data.get("config") or {}
    stream_name, action = data.get("stream_name", ""), data.get("action") or ""
    if not isinstance(config, dict) or not isinstance(stream_name, str) or action not in _ACTIONS:
        raise InvalidJSON("invalid JSON: json: cannot unmarshal into a consumer create request")
    return stream_name, config, action


def _names(subject: str, stream: str, config: dict[str, Any]) -> str:
    """The consumer's name from the subject and body, checked as nats-server does (invariant 1)."""
    tokens = subject.split(".")
    durable = config.get("durable_name") or ""
    if tokens[3] == "DURABLE":
        if len(tokens) != 7:
            raise DurableNameNotInSubject()
        name = tokens[6]
    elif len(tokens) == 5:
        name = config.get("name") or ""
    else:
        name = tokens[5]
    if name and ("/" in name or "\\" in name):
        raise ConsumerNamePathSeparators()
    if tokens[3] == "DURABLE":
        if not durable:
            raise DurableNameNotSet()
        if durable != name:
            raise DurableNameNotMatchSubject()
    elif len(tokens) > 5 and durable and durable != name:
        raise DurableNameNotMatchSubject()
    elif len(tokens) == 5 and durable:
        raise EphemeralWithDurableName()
    filter_subject = ".".join(tokens[6:]) if tokens[3] != "DURABLE" and len(tokens) > 6 else ""
    if filter_subject and config.get("filter_subjects"):
        raise MultipleFiltersNotAllowed()
    if filter_subject and config.get("filter_subject") != filter_subject:
        raise FilterSubjectMismatch()
    return name


def stored_consumer_config(name: str, config: dict[str, Any], *, generated: bool = False) -> bytes:
    """The config as the CREATE op stores it: the request's, with `name` (not for a generated name:
    nats-server leaves an unnamed ephemeral's `config.name` empty), `ack_policy` `none` when the request
    has none (Go's zero value: nats-server does not default it to explicit, clients do), and an
    ephemeral's default `inactive_threshold` (nats-server `updateInactiveThreshold` stamps 5 s on it)."""
    stored = {**config} if generated else {**config, "name": name}
    stored.setdefault("ack_policy", "none")
    if not stored.get("durable_name") and not stored.get("inactive_threshold"):
        stored["inactive_threshold"] = EPHEMERAL_INACTIVE_THRESHOLD_NS
    return json.dumps(stored, separators=(",", ":")).encode()


def decode_pause(payload: bytes) -> int:
    """The `pause_until` of a PAUSE request as Unix ns; 0 resumes (invariant 6)."""
    if not is_json_object_or_array(payload):
        return 0
    data = load_json(payload)
    if not isinstance(data, dict):
        raise InvalidJSON("invalid JSON: json: cannot unmarshal array into Go value of type "
                          "api.JSApiConsumerPauseRequest")
    unknown = sorted(set(data) - {"pause_until"})
    if unknown:
        raise InvalidJSON(f'invalid JSON: json: unknown field "{unknown[0]}"')
    value = data.get("pause_until")
    if value is None:
        return 0
    if not isinstance(value, str):
        kind = {bool: "bool", list: "array", dict: "object"}.get(type(value), "number")
        raise InvalidJSON(f"invalid JSON: json: cannot unmarshal {kind} into Go struct field "
                          "JSApiConsumerPauseRequest.pause_until of type time.Time")
    if value == ZERO_TIME:
        return 0
    try:
        return max(rfc3339_to_ns(value), 0)
    except (ValueError, OverflowError):
        raise InvalidJSON(f'invalid JSON: parsing time {json.dumps(value)} as "2006-01-02T15:04:05Z07:00": '
                          f'cannot parse {json.dumps(value)} as "2006"') from None


def stepdown_args(payload: bytes) -> dict[str, Any]:
    """A stepdown body's placement as `jsapi.stream_stepdown` takes it (as `jsapi_data` reads it)."""
    body = decode_request(payload, StepdownRequest) if is_json_object_or_array(payload) else StepdownRequest()
    placement = body.placement
    if placement is None:
        return {}
    return {"preferred": placement.preferred, "cluster": placement.cluster, "tags": list(placement.tags)}


class ConsumerEndpoints:
    def __init__(self, parts: "ApiParts", acks_carried: Callable[[str], Awaitable[None]]) -> None:
        self.parts = parts
        self.acks_carried = acks_carried  # `ConsumerHub.acks_carried` (invariant 7)

    async def create(self, request: "ApiRequest") -> dict[str, Any]:
        stream_name, config, action = decode_create(request.payload)
        if stream_name != request.name:
            raise StreamMismatch()
        given = _names(request.subject, request.name, config)
        name = validate_consumer_name(given or generated_name())
        raw = stored_consumer_config(name, config, generated=not given)
        assignment = await online(self.parts, request.name, stopped_ok=True)
        try:
            parsed, _ = parse_consumer_config(raw, stream=assignment.config)  # invariant 1: refused here, not later
        except InvalidJSON:
            raise
        except InvalidConfig as error:
            if isinstance(error, UnknownConfigField) or type(error) is InvalidConfig:
                raise _json_error(error) from None
            raise
        raw = self._account_limited(raw, parsed, assignment.config)
        result, _ = await self.parts.call_stream(request.name, "consumer.create", {"name": name, "action": action},
                                                [raw])
        return dict(result)

    def _account_limited(self, raw: bytes, parsed: Any, stream: Any) -> bytes:
        """The stored config with the account's `max_ack_pending` default, or 10121 above it."""
        limits = self.parts.config.account_limits
        stream_limits = getattr(stream, "consumer_limits", None)
        stored = json.loads(raw)
        limited = consumer_with_account_limits(limits, stored, parsed,
                                               stream_limits.max_ack_pending if stream_limits is not None else 0)
        return raw if limited is stored else json.dumps(limited, separators=(",", ":")).encode()

    async def info(self, request: "ApiRequest") -> dict[str, Any]:
        if not is_empty_request(request.payload):
            raise NotEmptyRequest()
        await online(self.parts, request.name, stopped_ok=True)
        await self.acks_carried(request.name)  # invariant 7
        result, _ = await self.parts.call_stream(request.name, "consumer.info",
                                                {"name": request.subject.split(".")[5]})
        return dict(result)

    async def delete(self, request: "ApiRequest") -> dict[str, Any]:
        if not is_empty_request(request.payload):
            raise NotEmptyRequest()
        await online(self.parts, request.name, stopped_ok=True)
        await self.parts.call_stream(request.name, "consumer.delete", {"name": request.subject.split(".")[5]})
        return {"success": True}

    async def pause(self, request: "ApiRequest") -> dict[str, Any]:
        """`$JS.API.CONSUMER.PAUSE.<stream>.<consumer>` (invariant 6), answered by the stream leader."""
        until_ns = decode_pause(request.payload)
        await online(self.parts, request.name, stopped_ok=True)
        result, _ = await self.parts.call_stream(request.name, "consumer.pause",
                                                {"name": request.subject.split(".")[5], "until_ns": until_ns})
        return dict(result)

    async def leader_stepdown(self, request: "ApiRequest") -> dict[str, Any]:
        """`$JS.API.CONSUMER.LEADER.STEPDOWN.<stream>.<consumer>` (invariant 5)."""
        if not self.parts.config.clustered:
            raise ClusterRequired()
        args = stepdown_args(request.payload)
        assignment = await online(self.parts, request.name, stopped_ok=True)
        await self.parts.call_stream(request.name, "consumer.info", {"name": request.subject.split(".")[6]})
        if assignment.config is not None and assignment.config.num_replicas > 1:
            await self.parts.call_stream(request.name, "jsapi.stream_stepdown", args)
        return {"success": True}

    def _offset(self, payload: bytes) -> int:
        body = decode_request(payload, PagedRequest) if is_json_object_or_array(payload) else PagedRequest()
        return max(body.offset, 0)

    async def names(self, request: "ApiRequest") -> dict[str, Any]:
        offset = self._offset(request.payload)
        await online(self.parts, request.name, stopped_ok=True)
        result, _ = await self.parts.call_stream(request.name, "consumer.names", {})
        names = list(result["names"])
        offset = min(offset, len(names))
        return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT,
                "consumers": names[offset:offset + NAMES_LIMIT]}

    async def list(self, request: "ApiRequest") -> dict[str, Any]:
        offset = self._offset(request.payload)
        await online(self.parts, request.name, stopped_ok=True)
        await self.acks_carried(request.name)  # invariant 7
        result, _ = await self.parts.call_stream(request.name, "consumer.list", {"offset": offset})
        infos = [dict(info) for info in result["infos"]]
        for info in infos:  # nats-server lists the stored config: no dynamic `_nats.*` metadata (invariant 4)
            info["config"] = {**info["config"], "metadata": listed_metadata(info["config"].get("metadata", {}))}
        answer: dict[str, Any] = {"total": int(result["total"]), "offset": int(result["offset"]),
                                  "limit": LIST_LIMIT, "consumers": infos}
        if result.get("offline"):
            answer["offline"] = dict(result["offline"])
        return answer
