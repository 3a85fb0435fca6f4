"""`ConsumerConfig`: a consumer's configuration as the JetStream JSON API spells it.

Owns: strict decoding of client JSON (unknown fields are errors naming the field), the defaults
nats-server fills in (`setConsumerConfigDefaults`: `max_deliver` 0 -> -1, `ack_wait` 30 s for ack
policies that wait, `backoff[0]` overriding `ack_wait`, `max_waiting` 512 for pull consumers,
`max_ack_pending` 1000 unless the ack policy is none, the stream's `consumer_limits`), the cross-field
rules of `checkConsumerCfg` and of `addConsumer`'s work-queue checks, each refused with nats-server's
`err_code` (`ConsumerConfigError`), and the JSON form served back (`to_json`: `omitempty` fields left
out exactly as nats-server's `ConsumerConfig` marshals them).

Invariants:
  1. `parse_consumer_config(raw)` either returns a config whose `validate()` passed, or raises a
     `JsraftError` with a stable code; it never returns a half-checked config.
  2. `ConsumerConfig.from_dict(c.to_json()) == c` for every valid config (the JSON form round-trips).
  3. Durations are nanoseconds (ints), as on the JetStream wire; times (`opt_start_time`,
     `pause_until`) are RFC 3339 strings, normalised to Go's `RFC3339Nano` form so they are served back
     as nats-server serves them; `rfc3339_to_ns` turns one into Unix nanoseconds.

Imports: L0, L1 (`codec`, `subjects`, `jsapi.stream_config`, `jsapi.consumer_checks`), attrs, stdlib `datetime`/`re`.
Reference: nats-server `server/consumer.go` (ConsumerConfig, setConsumerConfigDefaults,
checkConsumerCfg, addConsumerWithAssignment), `server/jetstream_errors_generated.go`, ADR-8.
"""

from __future__ import annotations

import datetime
import enum
import json
import re
from typing import Any

import attrs

from jsraft.codec import structure, unstructure
from jsraft.errors import InvalidJSON
from jsraft.jsapi.consumer_checks import ConsumerConfigError, check_consumer_config, validate_consumer_name
from jsraft.jsapi.stream_config import Retention, StreamConfig, _frozen_metadata

SECOND_NS = 1_000_000_000
ACK_WAIT_DEFAULT_NS = 30 * SECOND_NS  # nats-server: JsAckWaitDefault
MAX_ACK_PENDING_DEFAULT = 1000  # nats-server: JsDefaultMaxAckPending
MAX_WAITING_DEFAULT = 512  # nats-server: JSWaitQueueDefaultMax


class DeliverPolicy(enum.StrEnum):
    all = "all"
    last = "last"
    new = "new"
    by_start_sequence = "by_start_sequence"
    by_start_time = "by_start_time"
    last_per_subject = "last_per_subject"


class AckPolicy(enum.StrEnum):
    none = "none"
    all = "all"
    explicit = "explicit"


class ReplayPolicy(enum.StrEnum):
    instant = "instant"
    original = "original"


# --- RFC 3339 times ---------------------------------------------------------------------------

_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)\Z")


def _parse_rfc3339(text: str) -> tuple[datetime.datetime, int]:
    """`(whole-second aware datetime, nanoseconds)`; ValueError when `text` is not RFC 3339."""
    match = _RFC3339.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    nanos = int((match.group(7) or "0").ljust(9, "0"))
    zone = match.group(8)
    if zone in ("Z", "z"):
        tz = datetime.timezone.utc
    else:
        sign = -1 if zone[0] == "-" else 1
        tz = datetime.timezone(sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=tz), nanos


def _normalise_time(value: Any) -> str | None:
    """Go's `RFC3339Nano` form of a time (trailing fraction zeros trimmed, `Z` for UTC)."""
    if value is None:
        return None
    moment, nanos = _parse_rfc3339(value)
    fraction = f".{nanos:09d}".rstrip("0").rstrip(".")
    offset = moment.utcoffset() or datetime.timedelta(0)
    if offset == datetime.timedelta(0):
        zone = "Z"
    else:
        minutes = int(offset.total_seconds()) // 60
        zone = f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return moment.strftime("%Y-%m-%dT%H:%M:%S").zfill(19) + fraction + zone


def rfc3339_to_ns(text: str) -> int:
    """Unix nanoseconds of an RFC 3339 time."""
    moment, nanos = _parse_rfc3339(text)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    delta = moment - epoch
    return (delta.days * 86400 + delta.seconds) * SECOND_NS + nanos


ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, what nats-server serves for "never"


def rfc3339(timestamp_ns: int) -> str:
    """Go's `time.RFC3339Nano` in UTC of Unix nanoseconds (`rfc3339_to_ns` the other way); `ZERO_TIME` for none."""
    if timestamp_ns <= 0:
        return ZERO_TIME
    seconds, nanos = divmod(timestamp_ns, 1_000_000_000)
    text = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{text}.{fraction}Z" if fraction else f"{text}Z"


def _empty_as_none(value: Any) -> Any:
    """nats-server's `omitempty` strings: an empty string means "not set"."""
    return None if value == "" else value


# Fields nats-server marshals even when zero; every other field is `omitempty`.
_ALWAYS_SERVED = frozenset({"deliver_policy", "ack_policy", "replay_policy", "num_replicas"})


@attrs.frozen(kw_only=True)
class ConsumerConfig:
    """One consumer's configuration. Construct from client JSON with `parse_consumer_config`."""

    durable_name: str | None = attrs.field(default=None, converter=_empty_as_none)
    name: str | None = attrs.field(default=None, converter=_empty_as_none)
    description: str | None = attrs.field(default=None, converter=_empty_as_none)
    deliver_policy: DeliverPolicy = DeliverPolicy.all
    opt_start_seq: int = 0
    opt_start_time: str | None = attrs.field(default=None, converter=_normalise_time)
    ack_policy: AckPolicy = AckPolicy.explicit
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: tuple[int, ...] = ()
    filter_subject: str | None = attrs.field(default=None, converter=_empty_as_none)
    filter_subjects: tuple[str, ...] = ()
    replay_policy: ReplayPolicy = ReplayPolicy.instant
    rate_limit_bps: int = 0
    sample_freq: str | None = attrs.field(default=None, converter=_empty_as_none)
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str | None = attrs.field(default=None, converter=_empty_as_none)
    deliver_group: str | None = attrs.field(default=None, converter=_empty_as_none)
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False
    metadata: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_frozen_metadata)
    pause_until: str | None = attrs.field(default=None, converter=_normalise_time)

    @classmethod
    def from_dict(cls, data: dict) -> "ConsumerConfig":
        """Strictly structure JSON-shaped data (no defaults filled, nothing validated)."""
        return structure(data, cls, where="consumer config")

    @property
    def consumer_name(self) -> str | None:
        """The name the consumer is known by: `name`, else `durable_name` (None: an unnamed ephemeral)."""
        return self.name or self.durable_name

    @property
    def is_pull(self) -> bool:
        return self.deliver_subject is None

    @property
    def filters(self) -> tuple[str, ...]:
        """Every filter subject (nats-server `gatherSubjectFilters`); empty means the whole stream."""
        return (self.filter_subject,) if self.filter_subject else self.filter_subjects

    @property
    def pause_until_ns(self) -> int:
        return rfc3339_to_ns(self.pause_until) if self.pause_until else 0

    def with_defaults(self, stream: StreamConfig | None = None) -> "ConsumerConfig":
        """The config with the defaults nats-server fills in (`setConsumerConfigDefaults`, not pedantic)."""
        limits = stream.consumer_limits if stream is not None else None
        c: dict[str, Any] = attrs.asdict(self, recurse=False)
        if c["max_deliver"] == 0 or c["max_deliver"] < -1:
            c["max_deliver"] = -1
        for field in ("max_waiting", "max_batch", "max_expires", "max_bytes", "idle_heartbeat",
                      "inactive_threshold"):
            c[field] = max(c[field], 0)
        if c["max_ack_pending"] < -1:
            c["max_ack_pending"] = -1
        if c["deliver_subject"] is None and c["max_waiting"] == 0:
            c["max_waiting"] = MAX_WAITING_DEFAULT
        if c["ack_wait"] == 0 and c["ack_policy"] in (AckPolicy.explicit, AckPolicy.all):
            c["ack_wait"] = ACK_WAIT_DEFAULT_NS
        if c["backoff"]:
            c["ack_wait"] = c["backoff"][0]
        if c["max_ack_pending"] == 0 and limits is not None:
            c["max_ack_pending"] = limits.max_ack_pending
        if c["inactive_threshold"] == 0 and limits is not None:
            c["inactive_threshold"] = limits.inactive_threshold
        if c["max_ack_pending"] == 0 and c["ack_policy"] is not AckPolicy.none:
            c["max_ack_pending"] = MAX_ACK_PENDING_DEFAULT
        if c["name"] is None and c["durable_name"] is not None:
            c["name"] = c["durable_name"]
        return ConsumerConfig(**c)

    def validate(self, stream: StreamConfig | None = None) -> "ConsumerConfig":
        """Cross-field rules (`checkConsumerCfg`; with `stream`, also the rules against the stream)."""
        check_consumer_config(self, stream)
        return self

    def to_json(self) -> dict[str, Any]:
        """The JetStream JSON form, as nats-server marshals it: `omitempty` fields left out when zero."""
        data = unstructure(self)
        data["metadata"] = dict(self.metadata)
        data["backoff"] = list(self.backoff)
        data["filter_subjects"] = list(self.filter_subjects)
        data = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in data.items()}
        return {k: v for k, v in data.items() if k in _ALWAYS_SERVED or v not in (None, 0, False, "", [], {})}


def parse_consumer_config(raw: bytes, *, stream: StreamConfig | None = None,
                          defaults_from: StreamConfig | None = None) -> tuple[ConsumerConfig, bytes]:
    """Decode a consumer config's JSON (the `config` object of a create request, or a stored config).

    Returns `(config with defaults, validated against `stream` when given; the raw bytes)`. A stored
    config is decoded with `defaults_from` instead: the stream's defaults are filled in, but the rules
    comparing the config with the stream are not re-checked (the stream may have changed since).
    """
    try:
        data = json.loads(raw) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidJSON(f"invalid JSON: {error}") from None
    except RecursionError:
        raise InvalidJSON("invalid JSON: nested too deeply") from None
    config = ConsumerConfig.from_dict(data).with_defaults(stream or defaults_from).validate(stream)
    return config, bytes(raw)


__all__ = [
    "ACK_WAIT_DEFAULT_NS", "AckPolicy", "ConsumerConfig", "ConsumerConfigError", "DeliverPolicy",
    "MAX_ACK_PENDING_DEFAULT", "MAX_WAITING_DEFAULT", "ReplayPolicy", "Retention", "parse_consumer_config",
    "rfc3339_to_ns", "validate_consumer_name",
]
