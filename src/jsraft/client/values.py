"""The values the client's JetStream context returns, and their decoding from API JSON (layer L4).

Owns: `PubAck`, `StreamInfo`, `RawStreamMsg`, `ConsumerInfo` — the same names and fields as the embedded context's
(`jsraft.server.api.jetstream`), which the client cannot import — and turning the JSON a node serves
(`$JS.API.*` answers: nats-server's `PubAck`, `StreamInfo`, `StoredMsg`, `ConsumerInfo`) into them, including Go's
RFC 3339 timestamps with nanoseconds.

Invariants:
  1. Decoding is strict where jsraft is strict (a stream config is structured by `StreamConfig.from_dict`,
     unknown fields refused); a value of the wrong shape is `BadResponse`, never a `KeyError`.
  2. `parse_rfc3339_ns(format(t)) == t` for every timestamp a node serves (nanosecond precision); Go's
     zero time is 0.

Imports: stdlib, attrs, L0, L1 (`jsapi`), L4 `protocol` (headers), client siblings.
Reference: nats-server `server/stream.go` (`StreamInfo`, `StoredMsg`), `server/jetstream_api.go`.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from typing import Any

import attrs

from jsraft.client.errors import BadResponse
from jsraft.errors import JsraftError
from jsraft.jsapi import StreamConfig
from jsraft.jsapi.consumer_config import ConsumerConfig
from jsraft.protocol.headers import parse_headers

ZERO_TIME = "0001-01-01T00:00:00Z"


@attrs.frozen
class PubAck:
    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None


@attrs.frozen
class StreamInfo:
    """`config` as the node serves it (defaults filled in), `state` and `cluster` as JSON objects
    (nats-server's `StreamState` and `ClusterInfo`), `created` as RFC 3339."""

    config: StreamConfig
    state: dict[str, Any]
    cluster: dict[str, Any]
    created: str = ZERO_TIME
    config_raw: bytes = attrs.field(repr=False, default=b"")


@attrs.frozen
class RawStreamMsg:
    subject: str
    seq: int
    data: bytes
    headers: dict[str, str] | None
    time_ns: int
    stream: str


@attrs.frozen(kw_only=True)
class SequenceInfo:
    consumer_seq: int
    stream_seq: int
    last_active: str | None = None


@attrs.frozen(kw_only=True)
class ConsumerInfo:
    """nats-server's `ConsumerInfo`: `config` as served (defaults filled in), times as RFC 3339."""

    stream_name: str
    name: str
    config: ConsumerConfig
    delivered: SequenceInfo
    ack_floor: SequenceInfo
    num_ack_pending: int
    num_redelivered: int
    num_waiting: int
    num_pending: int
    created: str = ZERO_TIME
    cluster: dict[str, Any] = attrs.field(factory=dict)
    ts: str = ZERO_TIME


def parse_rfc3339_ns(text: str) -> int:
    """Nanoseconds since the epoch of `2024-05-01T12:00:00.123456789Z` (invariant 2)."""
    if text == ZERO_TIME:
        return 0
    try:
        head, _, fraction = text.removesuffix("Z").partition(".")
        if not text.endswith("Z") or (fraction and not fraction.isdigit()) or len(fraction) > 9:
            raise ValueError(text)
        moment = datetime.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        raise BadResponse(f"not an RFC 3339 UTC timestamp: {text[:64]!r}") from None
    seconds = int(moment.timestamp())
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0") or 0)


def _field(data: Any, name: str, kind: type, what: str) -> Any:
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadResponse(f"{what}: field {name!r} missing or not {kind.__name__}")
    return value


def pub_ack_from(answer: dict[str, Any]) -> PubAck:
    domain = answer.get("domain")
    return PubAck(stream=_field(answer, "stream", str, "publish ack"), seq=_field(answer, "seq", int, "publish ack"),
                  duplicate=answer.get("duplicate") is True, domain=domain if isinstance(domain, str) else None)


def stream_info_from(answer: dict[str, Any]) -> StreamInfo:
    served = _field(answer, "config", dict, "stream info")
    try:
        config = StreamConfig.from_dict(served)
    except JsraftError as error:
        raise BadResponse(f"stream info: config does not decode: {error}") from None
    created = answer.get("created")
    return StreamInfo(config=config, state=_field(answer, "state", dict, "stream info"),
                      cluster=answer.get("cluster") if isinstance(answer.get("cluster"), dict) else {},
                      created=created if isinstance(created, str) else ZERO_TIME,
                      config_raw=json.dumps(served).encode())


def _b64(message: dict[str, Any], name: str) -> bytes:
    value = message.get(name, "")
    try:
        return base64.b64decode(value, validate=True) if value else b""
    except (binascii.Error, TypeError):
        raise BadResponse(f"stored message: field {name!r} is not base64") from None


def headers_dict(block: bytes) -> dict[str, str] | None:
    """A header block as `{name: first value}`, None when there is none (the embedded context's shape)."""
    if not block:
        return None
    found: dict[str, str] = {}
    for name, value in parse_headers(block).fields:
        found.setdefault(name, value)
    return found


def raw_msg_from(answer: dict[str, Any], stream: str) -> RawStreamMsg:
    message = _field(answer, "message", dict, "message get")
    return RawStreamMsg(subject=_field(message, "subject", str, "stored message"),
                        seq=_field(message, "seq", int, "stored message"), data=_b64(message, "data"),
                        headers=headers_dict(_b64(message, "hdrs")),
                        time_ns=parse_rfc3339_ns(_field(message, "time", str, "stored message")), stream=stream)


def _sequence(answer: dict[str, Any], name: str) -> SequenceInfo:
    value = _field(answer, name, dict, "consumer info")
    last = value.get("last_active")
    return SequenceInfo(consumer_seq=_field(value, "consumer_seq", int, name),
                        stream_seq=_field(value, "stream_seq", int, name),
                        last_active=last if isinstance(last, str) else None)


def consumer_info_from(answer: dict[str, Any]) -> ConsumerInfo:
    try:
        config = ConsumerConfig.from_dict(_field(answer, "config", dict, "consumer info"))
    except JsraftError as error:
        raise BadResponse(f"consumer info: config does not decode: {error}") from None
    counts = {name: _field(answer, name, int, "consumer info")
              for name in ("num_ack_pending", "num_redelivered", "num_waiting", "num_pending")}
    cluster = answer.get("cluster")
    return ConsumerInfo(stream_name=_field(answer, "stream_name", str, "consumer info"),
                        name=_field(answer, "name", str, "consumer info"), config=config,
                        delivered=_sequence(answer, "delivered"), ack_floor=_sequence(answer, "ack_floor"),
                        created=str(answer.get("created") or ZERO_TIME), cluster=cluster if isinstance(cluster, dict) else {},
                        ts=str(answer.get("ts") or ZERO_TIME), **counts)
