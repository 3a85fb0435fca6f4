"""The cross-field rules of a consumer config, with nats-server's err_codes (layer L1).

Owns: `ConsumerConfigError` (one class, the code per instance from the `_ERRORS` table: nats-server has
some forty codes for consumer configs) and `check_consumer_config`, which is `checkConsumerCfg` plus the
work-queue rules of `addConsumerWithAssignment` that depend only on the stream's config. Rules that
depend on the *other* consumers of the stream (one unfiltered / non-overlapping consumer per work queue)
are `consumer.ConsumerSet.check_create`'s, since only the stream's consumer set knows them.

Invariants:
  1. The rules run in nats-server's order, so a config breaking two rules is refused with the same code
     nats-server gives it.
  2. Every refusal is a `ConsumerConfigError` (an `InvalidConfig`), never a bare exception.

Imports: L0, L1 (`subjects`), stdlib. `config` is duck-typed (a `ConsumerConfig`) so that this module and
`consumer_config` do not import each other. Reference: nats-server `server/consumer.go`
(checkConsumerCfg), `server/jetstream_errors_generated.go`.
"""

from __future__ import annotations

from typing import Any

from jsraft import subjects as subjectlib
from jsraft.errors import InvalidConfig, InvalidSubject

DESCRIPTION_BYTES_MAX = 4 * 1024  # nats-server: JSMaxDescriptionLen
METADATA_BYTES_MAX = 128 * 1024  # nats-server: JSMaxMetadataLen
NAME_BYTES_MAX = 255  # nats-server: JSMaxNameLen
HEARTBEAT_MIN_NS = 100_000_000  # JSConsumerSmallHeartbeatErr: push heartbeats are at least 100 ms
MAX_EXPIRES_MIN_NS = 1_000_000  # JSConsumerMaxRequestExpiresTooSmall: at least 1 ms
_NAME_FORBIDDEN = frozenset(" \t\r\n\f\v.*>/\\")

# nats-server's conditions -> (err_code, http code, description template).
_ERRORS: dict[str, tuple[int, int, str]] = {
    "invalid": (10052, 500, "{err}"),  # JSStreamInvalidConfigF
    "replicas_exceed_stream": (10126, 400, "consumer config replica count exceeds parent stream"),
    "replicas_negative": (10133, 400, "replicas count cannot be negative"),
    "replicas_match_stream": (10134, 400,
                              "consumer config replicas must match interest retention stream's replicas"),
    "backoff_negative": (10184, 400, "consumer backoff needs to be positive"),
    "ack_wait_negative": (10183, 400, "consumer ack wait needs to be positive"),
    "max_deliver_backoff": (10116, 400, "max deliver is required to be > length of backoff values"),
    "description_too_long": (10107, 400, "consumer description is too long, maximum allowed is {max}"),
    "deliver_to_wildcards": (10079, 400, "consumer deliver subject has wildcards"),
    "invalid_deliver_subject": (10112, 400, "invalid push consumer deliver subject"),
    "deliver_cycle": (10081, 400, "consumer deliver subject forms a cycle"),
    "push_max_waiting": (10080, 400, "consumer in push mode can not set max waiting"),
    "max_pending_ack_policy": (10082, 400, "consumer requires ack policy for max ack pending"),
    "small_heartbeat": (10083, 400, "consumer idle heartbeat needs to be >= 100ms"),
    "pull_requires_ack": (10084, 400, "consumer in pull mode requires explicit ack policy on workqueue stream"),
    "pull_rate_limit": (10086, 400, "consumer in pull mode can not have rate limit set"),
    "max_waiting_negative": (10087, 400, "consumer max waiting needs to be positive"),
    "hb_requires_push": (10088, 400, "consumer idle heartbeat requires a push based consumer"),
    "fc_requires_push": (10089, 400, "consumer flow control requires a push based consumer"),
    "max_batch_negative": (10114, 400, "consumer max request batch needs to be > 0"),
    "max_expires_small": (10115, 400, "consumer max request expires needs to be >= 1ms"),
    "max_ack_pending_excess": (10121, 400, "consumer max ack pending exceeds system limit of {limit}"),
    "inactive_threshold_excess": (10153, 400, "consumer inactive threshold exceeds system limit of {limit}"),
    "direct_requires_push": (10090, 400, "consumer direct requires a push based consumer"),
    "direct_requires_ephemeral": (10091, 400, "consumer direct requires an ephemeral consumer"),
    "duplicate_filters": (10136, 400, "consumer cannot have both FilterSubject and FilterSubjects specified"),
    "empty_filter": (10139, 400, "consumer filter in FilterSubjects cannot be empty"),
    "overlapping_filters": (10138, 400, "consumer subject filters cannot overlap"),
    "invalid_policy": (10094, 400, "{err}"),
    "invalid_sampling": (10095, 400, "failed to parse consumer sampling configuration: {err}"),
    "fc_needs_heartbeats": (10108, 400, "consumer with flow control also needs heartbeats"),
    "durable_name_mismatch": (10132, 400, "Consumer Durable and Name have to be equal if both are provided"),
    "metadata_too_long": (10135, 400, "consumer metadata exceeds maximum size of {limit}"),
    "name_too_long": (10102, 400, "consumer name is too long, maximum allowed is {max}"),
    "wq_requires_explicit_ack": (10098, 400, "workqueue stream requires explicit ack"),
    "wq_not_deliver_all": (10101, 400, "consumer must be deliver all on workqueue stream"),
    "wq_multiple_unfiltered": (10099, 400, "multiple non-filtered consumers not allowed on workqueue stream"),
    "wq_not_unique": (10100, 400, "filtered consumer not unique on workqueue stream"),
}


class ConsumerConfigError(InvalidConfig):
    """A consumer config refused with one of nats-server's err_codes; `key` names the condition."""

    def __init__(self, key: str, **fields: Any) -> None:
        err_code, http_code, template = _ERRORS[key]
        self.key = key
        self.err_code = err_code
        self.http_code = http_code
        super().__init__(template.format(**fields))


def validate_consumer_name(name: str, *, durable: bool = False) -> str:
    """A consumer (or durable) name: non-empty, at most 255 bytes, no '.', '*', '>', path separators."""
    what = "consumer durable name" if durable else "consumer name"
    if not isinstance(name, str) or not name:
        raise ConsumerConfigError("invalid", err=f"{what} is required")
    if len(name.encode()) > NAME_BYTES_MAX:
        raise ConsumerConfigError("name_too_long", max=NAME_BYTES_MAX)
    if _NAME_FORBIDDEN.intersection(name):
        raise ConsumerConfigError("invalid", err=f"{what} can not contain '.', '*', '>', '\\', '/'")
    return name


def _valid_subject(subject: str, *, wildcards: bool) -> bool:
    try:
        subjectlib.validate(subject, wildcards=wildcards)
    except InvalidSubject:
        return False
    return True


def check_consumer_config(config: Any, stream: Any | None = None) -> None:
    """Raise `ConsumerConfigError` for the first rule `config` breaks (nats-server's order)."""
    if config.name is not None:
        validate_consumer_name(config.name)
    if config.durable_name is not None:
        validate_consumer_name(config.durable_name, durable=True)
    if stream is not None:
        _check_replicas(config, stream)
    elif config.num_replicas < 0:
        raise ConsumerConfigError("replicas_negative")
    if any(b < 0 for b in config.backoff):
        raise ConsumerConfigError("backoff_negative")
    if config.ack_wait < 0:
        raise ConsumerConfigError("ack_wait_negative")
    if config.backoff and config.max_deliver != -1 and len(config.backoff) > config.max_deliver:
        raise ConsumerConfigError("max_deliver_backoff")
    if config.description is not None and len(config.description.encode()) > DESCRIPTION_BYTES_MAX:
        raise ConsumerConfigError("description_too_long", max=DESCRIPTION_BYTES_MAX)
    if config.deliver_subject is not None:
        _check_push(config, stream)
    else:
        _check_pull(config, stream)
    _check_limits(config, stream)
    if config.direct and config.deliver_subject is None:
        raise ConsumerConfigError("direct_requires_push")
    if config.direct and config.durable_name is not None:
        raise ConsumerConfigError("direct_requires_ephemeral")
    _check_filters(config)
    _check_start(config)
    _check_misc(config)
    if stream is not None and stream.retention == "workqueue" and not config.direct:
        if config.ack_policy != "explicit":
            raise ConsumerConfigError("wq_requires_explicit_ack")
        if config.deliver_policy != "all":
            raise ConsumerConfigError("wq_not_deliver_all")


def _check_replicas(config: Any, stream: Any) -> None:
    if config.num_replicas > 0 and config.num_replicas > stream.num_replicas:
        raise ConsumerConfigError("replicas_exceed_stream")
    if config.num_replicas < 0:
        raise ConsumerConfigError("replicas_negative")
    if stream.retention in ("interest", "workqueue") and config.num_replicas not in (0, stream.num_replicas):
        raise ConsumerConfigError("replicas_match_stream")


def _check_push(config: Any, stream: Any | None) -> None:
    subject = config.deliver_subject
    if not subjectlib.is_literal(subject):
        raise ConsumerConfigError("deliver_to_wildcards")
    if not _valid_subject(subject, wildcards=False):
        raise ConsumerConfigError("invalid_deliver_subject")
    if stream is not None and any(subjectlib.matches(s, subject) for s in stream.subjects):
        raise ConsumerConfigError("deliver_cycle")
    if config.max_waiting != 0:
        raise ConsumerConfigError("push_max_waiting")
    if config.max_ack_pending > 0 and config.ack_policy == "none":
        raise ConsumerConfigError("max_pending_ack_policy")
    if 0 < config.idle_heartbeat < HEARTBEAT_MIN_NS:
        raise ConsumerConfigError("small_heartbeat")


def _check_pull(config: Any, stream: Any | None) -> None:
    if config.ack_policy == "none" and stream is not None and stream.retention == "workqueue":
        raise ConsumerConfigError("pull_requires_ack")
    if config.rate_limit_bps > 0:
        raise ConsumerConfigError("pull_rate_limit")
    if config.max_waiting < 0:
        raise ConsumerConfigError("max_waiting_negative")
    if config.idle_heartbeat > 0:
        raise ConsumerConfigError("hb_requires_push")
    if config.flow_control:
        raise ConsumerConfigError("fc_requires_push")
    if config.max_batch < 0:
        raise ConsumerConfigError("max_batch_negative")
    if config.max_expires != 0 and config.max_expires < MAX_EXPIRES_MIN_NS:
        raise ConsumerConfigError("max_expires_small")


def _check_limits(config: Any, stream: Any | None) -> None:
    limits = stream.consumer_limits if stream is not None else None
    if limits is None:
        return
    if limits.max_ack_pending > 0 and config.max_ack_pending > limits.max_ack_pending:
        raise ConsumerConfigError("max_ack_pending_excess", limit=limits.max_ack_pending)
    if limits.inactive_threshold > 0 and config.inactive_threshold > limits.inactive_threshold:
        raise ConsumerConfigError("inactive_threshold_excess", limit=limits.inactive_threshold)


def _check_filters(config: Any) -> None:
    if config.filter_subject is not None and config.filter_subjects:
        raise ConsumerConfigError("duplicate_filters")
    if config.filter_subject is not None and not _valid_subject(config.filter_subject, wildcards=True):
        raise ConsumerConfigError("invalid", err="invalid subject")
    if any(f == "" for f in config.filter_subjects):
        raise ConsumerConfigError("empty_filter")
    filters = config.filters
    for outer, subject in enumerate(filters):
        if not _valid_subject(subject, wildcards=True):
            raise ConsumerConfigError("invalid", err="invalid subject")
        for inner, other in enumerate(filters):
            if inner != outer and subjectlib.is_subset(subject, other):
                raise ConsumerConfigError("overlapping_filters")


_POLICY_TEXT = {"all": "all", "last": "last", "last_per_subject": "last per subject", "new": "new",
                "by_start_sequence": "by start sequence", "by_start_time": "by start time"}


def _check_start(config: Any) -> None:
    policy = str(config.deliver_policy)
    text = _POLICY_TEXT[policy]

    def bad_start(start: str) -> ConsumerConfigError:
        return ConsumerConfigError(
            "invalid_policy", err=f"consumer delivery policy is deliver {text}, but optional start {start} is also set")

    def not_set(what: str) -> ConsumerConfigError:
        return ConsumerConfigError(
            "invalid_policy", err=f"consumer delivery policy is deliver {text}, but optional {what} is not set")

    if policy in ("all", "last", "last_per_subject", "new"):
        if config.opt_start_seq > 0:
            raise bad_start("sequence")
        if config.opt_start_time is not None:
            raise bad_start("time")
        if policy == "last_per_subject" and not config.filters:
            raise not_set("filter subject")
    elif policy == "by_start_sequence":
        if config.opt_start_seq == 0:
            raise not_set("start sequence")
        if config.opt_start_time is not None:
            raise bad_start("time")
    elif policy == "by_start_time":
        if config.opt_start_time is None:
            raise not_set("start time")
        if config.opt_start_seq != 0:
            raise bad_start("start sequence")


def sample_percent(sample_freq: str | None) -> int:
    """`"30%"` or `"30"` -> 30 (0 when unset); ValueError when it is not a non-negative integer."""
    if sample_freq is None:
        return 0
    text = sample_freq.removesuffix("%")
    if not text.isdigit():  # Go's Atoi also refuses a sign-less empty string and accepts no spaces
        raise ValueError(f'strconv.Atoi: parsing "{text}": invalid syntax')
    return int(text)


def _check_misc(config: Any) -> None:
    try:
        sample_percent(config.sample_freq)
    except ValueError as error:
        raise ConsumerConfigError("invalid_sampling", err=str(error)) from None
    if config.flow_control and config.idle_heartbeat == 0:
        raise ConsumerConfigError("fc_needs_heartbeats")
    if config.durable_name is not None and config.name is not None and config.name != config.durable_name:
        raise ConsumerConfigError("durable_name_mismatch")
    if sum(len(k) + len(v) for k, v in config.metadata) > METADATA_BYTES_MAX:
        raise ConsumerConfigError("metadata_too_long", limit=f"{METADATA_BYTES_MAX // 1024}KB")
