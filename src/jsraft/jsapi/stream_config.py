"""`StreamConfig`: a stream's configuration as the JetStream JSON API spells it.

Owns: strict decoding of client JSON (unknown fields are errors naming the field), the defaults
nats-server fills in (`checkStreamCfg`: 0 limits become -1, `duplicate_window` 2 min capped at `max_age`,
`subjects` defaulting to the stream name, `num_replicas` 0 -> 1), cross-field validation, and the JSON
form served back (`to_json`). The raw bytes a client sent are kept by the caller (`parse_stream_config`
returns them), because a stored config is re-emitted exactly as received (DESIGN §5, §9).

Invariants:
  1. `parse_stream_config(raw)` either returns a config whose `validate()` passed, or raises a
     `JsraftError` with a stable code; it never returns a half-checked config.
  2. `StreamConfig.from_dict(c.to_json()) == c` for every valid config (the JSON form round-trips).
  3. Durations are nanoseconds (ints), as on the JetStream wire.
  4. `parse_stream_config` is a pure function of its arguments and a `StreamConfig` is frozen, so the
     decoded configs of the last `PARSE_MEMO_MAX` distinct requests are kept and shared: the same bytes
     give the same (identical) config; a failure is not kept and raises again each time.

Imports: L0, L1 (`codec`, `subjects`, `jsapi.stream_transforms` for `republish` and `subject_transform`), attrs. Reference: nats-server `server/stream.go` (StreamConfig,
checkStreamCfg), ADR-8 (JetStream API), docs.nats.io "Streams".
"""

from __future__ import annotations

import enum
import functools
import json
from typing import Any

import attrs

from jsraft import limits
from jsraft import subjects as subjectlib
from jsraft.codec import structure, unstructure
from jsraft.errors import BadRequest, InvalidConfig, InvalidJSON, InvalidSubject
from jsraft.jsapi.stream_transforms import validate_transforms, with_transform_defaults

DUPLICATE_WINDOW_DEFAULT_NS = 120 * 1_000_000_000  # nats-server: StreamDefaultDuplicatesWindow, 2 min
REPLICAS_MAX = 5  # nats-server: StreamMaxReplicas
_LIMIT_FIELDS = ("max_consumers", "max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size")
# Fields nats-server's `StreamConfig` tags `omitempty` whose empty value is also this class's default:
# served without them when empty, as nats-server serves them (and still decoded strictly when sent).
_OMITTED_WHEN_EMPTY = ("subjects", "no_ack", "duplicate_window", "first_seq", "discard_new_per_subject",
                       "subject_delete_marker_ttl", "allow_msg_counter", "allow_msg_schedules", "allow_atomic")
SECOND_NS = 1_000_000_000
# Configs decoded lately, by (bytes, expected name): one stream create decodes its config once where its
# API check, proposal, level check, preparation, apply, CONFIG entry and answer each decoded it (invariant 4).
PARSE_MEMO_MAX = 256
_NAME_FORBIDDEN = frozenset(" \t\r\n\f\v.*>/\\")


class ReplicasCountCannotBeNegative(BadRequest):
    """JSReplicasCountCannotBeNegative: `num_replicas` below 0 (0 itself means the default, 1)."""

    err_code = 10133
    default_description = "replicas count cannot be negative"


class Retention(enum.StrEnum):
    limits = "limits"
    interest = "interest"
    workqueue = "workqueue"


class StorageType(enum.StrEnum):
    file = "file"
    memory = "memory"


class Discard(enum.StrEnum):
    old = "old"
    new = "new"


class PersistMode(enum.StrEnum):
    """nats-server 2.12's `persist_mode`: `async` acknowledges a publish before its fsync (R1 file streams)."""

    default = "default"
    async_ = "async"


class StreamCompression(enum.StrEnum):
    """`s2` is accepted for compatibility with nats clients; jsraft compresses with zstd either way."""

    none = "none"
    s2 = "s2"
    zstd = "zstd"


@attrs.frozen(kw_only=True)
class Placement:
    cluster: str | None = None
    tags: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class RePublish:
    src: str | None = None
    dest: str = ""
    headers_only: bool = False


@attrs.frozen(kw_only=True)
class SubjectTransform:
    src: str | None = None
    dest: str = ""


@attrs.frozen(kw_only=True)
class ConsumerLimits:
    inactive_threshold: int = 0
    max_ack_pending: int = 0


def _frozen_metadata(value: Any) -> tuple[tuple[str, str], ...]:
    """JSON object (or its frozen form) -> sorted pairs; keys and values must be strings."""
    pairs = value.items() if isinstance(value, dict) else (value or ())
    frozen = tuple(sorted((k, v) for k, v in pairs))
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in frozen):
        raise ValueError("metadata keys and values must be strings")
    return frozen


@attrs.frozen(kw_only=True)
class StreamConfig:
    """One stream's configuration. Construct from client JSON with `parse_stream_config`."""

    name: str
    description: str | None = None
    subjects: tuple[str, ...] = ()
    retention: Retention = Retention.limits
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: int = 0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: Discard = Discard.old
    storage: StorageType = StorageType.file
    num_replicas: int = 1
    no_ack: bool = False
    duplicate_window: int = 0
    placement: Placement | None = None
    mirror: dict[str, Any] | None = None
    sources: tuple[dict[str, Any], ...] | None = None
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    allow_direct: bool = False
    mirror_direct: bool = False
    republish: RePublish | None = None
    discard_new_per_subject: bool = False
    first_seq: int = 0
    compression: StreamCompression = StreamCompression.none
    subject_transform: SubjectTransform | None = None
    consumer_limits: ConsumerLimits | None = None
    metadata: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_frozen_metadata)
    template_owner: str | None = None
    # ADR-43 per-message TTL: `Nats-TTL` headers are honoured only when this is on (never turned off again).
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0  # ns; > 0: expiry leaves markers (`stream.markers`)
    # ADR-49 counters: every message is a `Nats-Incr` increment of its subject's total (`stream.counters`).
    allow_msg_counter: bool = False
    # ADR-51 message schedules (`@at` delayed messages, `stream.schedules`): enabled for good once set.
    allow_msg_schedules: bool = False
    # ADR-50 atomic batch publish (`Nats-Batch-*`, `stream.batches`).
    allow_atomic: bool = False
    persist_mode: PersistMode = PersistMode.default  # served only when not the default (nats: omitempty)

    @classmethod
    def from_dict(cls, data: dict) -> "StreamConfig":
        """Strictly structure JSON-shaped data (no defaults filled, nothing validated). An empty
        `consumer_limits` (what `to_json` serves for unset, as nats-server does) reads back as unset, so a
        served config round-trips and creating with it again is the same config."""
        if isinstance(data, dict) and data.get("persist_mode") == "":  # nats-server reads "" as the default
            data = {**data, "persist_mode": PersistMode.default.value}
        config = structure(data, cls, where="stream config")
        if config.consumer_limits == ConsumerLimits():
            config = attrs.evolve(config, consumer_limits=None)
        return config

    def with_defaults(self) -> "StreamConfig":
        """The config with the defaults nats-server fills in (`checkStreamCfg`)."""
        changes: dict[str, Any] = {f: -1 for f in _LIMIT_FIELDS if getattr(self, f) == 0}
        if self.num_replicas == 0:
            changes["num_replicas"] = 1
        if not self.subjects and self.mirror is None and not self.sources:
            changes["subjects"] = (self.name,)
        if self.duplicate_window == 0 and self.mirror is None:
            window = DUPLICATE_WINDOW_DEFAULT_NS
            changes["duplicate_window"] = min(window, self.max_age) if self.max_age > 0 else window
        if self.allow_msg_schedules and not self.allow_rollup_hdrs:
            # nats-server outside pedantic mode turns on the rollups a schedule needs.
            changes["allow_rollup_hdrs"], changes["deny_purge"] = True, False
        if self.subject_delete_marker_ttl > 0:
            # nats-server outside pedantic mode turns on what subject delete markers need.
            changes["allow_msg_ttl"] = True
            if not self.allow_rollup_hdrs:
                changes["allow_rollup_hdrs"], changes["deny_purge"] = True, False
        config = attrs.evolve(self, **changes) if changes else self
        transforms = with_transform_defaults(config)  # after `subjects` got its default
        return attrs.evolve(config, **transforms) if transforms else config

    def validate(self) -> "StreamConfig":
        """Cross-field rules; raise `InvalidConfig` naming the problem. Returns self."""
        validate_stream_name(self.name)
        _validate_limits(self)
        _validate_subjects(self)
        if self.discard_new_per_subject and (self.discard is not Discard.new or self.max_msgs_per_subject <= 0):
            raise InvalidConfig("discard new per subject requires discard new policy to be set "
                                "and max messages per subject to be set")
        if self.mirror is not None or self.sources:
            raise InvalidConfig("mirrors and sources are not supported by this server")
        validate_transforms(self)
        _validate_marker_ttl(self)
        _validate_counter(self)
        _validate_schedules(self)
        return self

    def to_json(self) -> dict[str, Any]:
        """The JetStream JSON form: unset optionals and nats-server's `omitempty` fields at their empty
        default omitted, metadata as an object."""
        data = unstructure(self)
        data["metadata"] = dict(self.metadata)
        for key in ("description", "placement", "mirror", "sources", "republish", "subject_transform",
                    "template_owner"):
            if data.get(key) is None:
                data.pop(key, None)
        for key in _OMITTED_WHEN_EMPTY:
            if not data[key]:
                del data[key]
        # nats-server always serves StreamConsumerLimits, an empty object when unset: both its fields are
        # `omitempty` (a client reads a served 0 as a limit of zero).
        data["consumer_limits"] = {key: value for key, value in (data.get("consumer_limits") or {}).items() if value}
        if not data["metadata"]:
            del data["metadata"]
        if self.republish is not None and not self.republish.headers_only:
            del data["republish"]["headers_only"]  # nats-server: omitempty
        if self.persist_mode is PersistMode.default:
            del data["persist_mode"]
        return data


def validate_stream_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidConfig("stream name is required")
    if len(name.encode()) > limits.stream_name_bytes_max:
        raise InvalidConfig(f"stream name is longer than {limits.stream_name_bytes_max} bytes")
    if _NAME_FORBIDDEN.intersection(name):
        raise InvalidConfig("stream name can not contain whitespace, '.', '*', '>' or path separators")
    return name


def _validate_limits(config: StreamConfig) -> None:
    for field in _LIMIT_FIELDS:
        if getattr(config, field) < -1:
            raise InvalidConfig(f"{field} must be -1 (unlimited) or positive")
    if config.max_msg_size > limits.payload_bytes_max:
        raise InvalidConfig(f"max_msg_size can not be larger than the server limit {limits.payload_bytes_max}")
    if config.max_age < 0 or config.duplicate_window < 0 or config.first_seq < 0:
        raise InvalidConfig("max_age, duplicate_window and first_seq can not be negative")
    if config.max_age and config.duplicate_window > config.max_age:
        raise InvalidConfig("duplicates window can not be larger then max age")
    # nats-server's words and codes (`checkStreamCfg`); 0 is the default, made 1 by `with_defaults`.
    if config.num_replicas > REPLICAS_MAX:
        raise InvalidConfig(f"maximum replicas is {REPLICAS_MAX}")
    if config.num_replicas < 0:
        raise ReplicasCountCannotBeNegative()
    if config.num_replicas == 0:
        raise InvalidConfig("replicas must be at least 1 (0 is the default, made 1 by with_defaults)")


def _validate_marker_ttl(config: StreamConfig) -> None:
    """`subject_delete_marker_ttl`: nats-server's rules and words (`checkStreamCfg`); the markers
    themselves are `stream.markers`."""
    ttl_ns = config.subject_delete_marker_ttl
    if ttl_ns < 0:
        raise InvalidConfig("subject delete marker TTL must not be negative")
    if ttl_ns == 0:
        return
    if ttl_ns < SECOND_NS:
        raise InvalidConfig("subject delete marker TTL must be at least 1 second")
    if config.deny_purge and config.allow_rollup_hdrs:
        raise InvalidConfig("roll-ups require the purge permission")


def _validate_counter(config: StreamConfig) -> None:
    """`allow_msg_counter` (ADR-49): nats-server 2.12's rules and words (`checkStreamCfg`)."""
    if not config.allow_msg_counter:
        return
    if config.discard is Discard.new:
        raise InvalidConfig("counter stream cannot use discard new")
    if config.allow_msg_ttl:
        raise InvalidConfig("counter stream cannot use message TTLs")
    if config.allow_msg_schedules:
        raise InvalidConfig("counter stream cannot use message schedules")
    if config.retention is not Retention.limits:
        raise InvalidConfig("counter stream can only use limits retention")


def _validate_schedules(config: StreamConfig) -> None:
    """`allow_msg_schedules` (ADR-51) and `persist_mode`: nats-server 2.12's rules and words (`checkStreamCfg`)."""
    if config.allow_msg_schedules and config.discard is Discard.new:
        raise InvalidConfig("message scheduling cannot use discard new")
    if config.persist_mode is PersistMode.async_:
        if config.storage is not StorageType.file:
            raise InvalidConfig("async persist mode is only supported on file storage")
        if config.num_replicas > 1:
            raise InvalidConfig("async persist mode is not supported on replicated streams")
        if config.allow_atomic:
            raise InvalidConfig("async persist mode is not supported with atomic batch publish")


def _validate_subjects(config: StreamConfig) -> None:
    """nats-server's checks, in its order and words (`checkStreamCfg`): each subject is valid and
    overlaps none of the subjects after it. A repeated subject is such an overlap, and nats-server
    answers it as one ('subject "a" overlaps with "a"'), never reaching its "duplicate subjects" check."""
    for i, subject in enumerate(config.subjects):
        try:
            subjectlib.validate(subject, wildcards=True)
        except InvalidSubject:
            raise InvalidConfig("invalid subject") from None
        if subjectlib.overlaps(subject, "$JS.API.>"):
            raise InvalidConfig("subjects that overlap with jetstream api require no-ack to be true")
        for later in config.subjects[i + 1:]:
            if subjectlib.overlaps(later, subject):
                raise InvalidConfig(f"subject {json.dumps(subject)} overlaps with {json.dumps(later)}")


def parse_stream_config(raw: bytes, *, expected_name: str | None = None) -> tuple[StreamConfig, bytes]:
    """Decode a client's JSON request body: `(config with defaults, validated; the raw bytes)`.

    `expected_name` is the name in the request subject (`$JS.API.STREAM.CREATE.<name>`); a body naming
    another stream is refused, as nats-server does. Invariant 4: the same bytes are decoded once.
    """
    raw = bytes(raw)
    config = _parse_memo(raw, expected_name)
    return config, raw


@functools.lru_cache(maxsize=PARSE_MEMO_MAX)
def _parse_memo(raw: bytes, expected_name: str | None) -> StreamConfig:
    """Invariant 4: a pure function of its arguments, so its answers are kept (errors are not)."""
    try:
        data = json.loads(raw) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidJSON(f"invalid JSON: {error}") from None
    except RecursionError:  # nested deeper than the parser's stack: bad input, not a crash of the caller
        raise InvalidJSON("invalid JSON: nested too deeply") from None
    if expected_name is not None and isinstance(data, dict):
        data.setdefault("name", expected_name)
        if data["name"] != expected_name:
            raise InvalidConfig("stream name in subject does not match request")
    return StreamConfig.from_dict(data).with_defaults().validate()
