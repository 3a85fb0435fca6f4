"""The JetStream limits of an account, and the checks a stream config meets against them (layer L1).

Owns: `AccountLimits` (nats-server's `JetStreamAccountLimits`, with the JSON API's field names, as
`$JS.API.INFO` serves it under `limits`), the errors nats-server answers when a stream config breaks one,
the pure checks `check_stream_config` (no state needed) and `check_reservation` (against what the
account's other streams reserve), and the consumer's: `consumers_max` (per stream, where the stream
leader creates consumers) and `consumer_with_account_limits` (`max_ack_pending`'s default and bound, where
the API node stores the request). `max_streams` is enforced by the meta leader (`meta.leader`).

Invariants:
  1. -1 is "unlimited" for every number (nats-server's default for a field an account block leaves out);
     `max_ack_pending`, `max_streams` and `max_consumers` count only when positive, as nats-server's.
  2. The checks run in nats-server's order: `max_bytes_required`, then the per-stream byte limit of the
     stream's storage (`checkStreamCfg`), then (in the server, with the meta error 10026) the stream's
     `max_consumers` against the account's, then the account's memory or storage reservation
     (`checkLimits`). A stream without `max_bytes` reserves 1 byte there, as in nats-server.
  3. Un-tiered limits are flat: a stream of R replicas reserves R times its `max_bytes` (nats-server's
     `accountReservation` with no tier).

Imports: stdlib, attrs, L0 (`errors`), `jsapi` siblings (`consumer_checks`, `consumer_config`).
Reference: nats-server `server/jetstream.go` (`checkLimits`,
`checkBytesLimits`, `maxBytesLimits`), `server/stream.go` (`checkStreamCfg`), `server/opts.go`
(`parseJetStreamForAccount`), `server/errors.json`.
"""

from __future__ import annotations

from typing import Any

import attrs

from jsraft.errors import BadRequest, InvalidConfig, JsraftError
from jsraft.jsapi.consumer_checks import ConsumerConfigError
from jsraft.jsapi.consumer_config import MAX_ACK_PENDING_DEFAULT


class StreamMaxBytesRequired(BadRequest):
    """JSStreamMaxBytesRequired: the account's `max_bytes_required` and a stream without `max_bytes`."""

    err_code = 10113
    default_description = "account requires a stream config to have max bytes set"


class StreamMaxStreamBytesExceeded(BadRequest):
    """JSStreamMaxStreamBytesExceeded: `max_bytes` above the account's per-stream limit for its storage."""

    err_code = 10122
    default_description = "stream max bytes exceeds account limit max stream bytes"


class MemoryResourcesExceeded(JsraftError):
    """JSMemoryResourcesExceededErr: the memory streams' reservations would pass the account's `max_memory`
    (nats-server answers it with code 500)."""

    err_code = 10028
    http_code = 500
    default_description = "insufficient memory resources available"


class StorageResourcesExceeded(JsraftError):
    """JSStorageResourcesExceededErr: the file streams' reservations would pass the account's `max_storage`
    (code 500, as nats-server's)."""

    err_code = 10047
    http_code = 500
    default_description = "insufficient storage resources available"


@attrs.frozen(kw_only=True)
class AccountLimits:
    max_memory: int = -1
    max_storage: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    memory_max_stream_bytes: int = -1
    storage_max_stream_bytes: int = -1
    max_bytes_required: bool = False

    def validate(self) -> "AccountLimits":
        """Invariant 1: every number is -1 (unlimited) or at least 0."""
        for field in attrs.fields(AccountLimits):
            value = getattr(self, field.name)
            if field.type in (int, "int") and (isinstance(value, bool) or value < -1):
                raise InvalidConfig(f"account limits: {field.name} must be -1 (unlimited) or a number >= 0")
        return self

    def to_json(self) -> dict[str, Any]:
        """The `limits` object of `$JS.API.INFO`, in nats-server's field order."""
        return attrs.asdict(self)

    def max_stream_bytes(self, storage: str) -> int:
        return self.memory_max_stream_bytes if storage == "memory" else self.storage_max_stream_bytes


def check_stream_config(limits: AccountLimits, config: Any) -> None:
    """Invariant 2, the checks a stream config meets alone (create and update)."""
    if limits.max_bytes_required and config.max_bytes <= 0:
        raise StreamMaxBytesRequired()
    limit = limits.max_stream_bytes(str(config.storage))
    if limit > 0 and config.max_bytes > limit:
        raise StreamMaxStreamBytesExceeded()


def reservation_bytes(config: Any) -> int:
    """What a stream reserves against the account (invariant 3): 0 without `max_bytes`."""
    return max(config.max_bytes, 0) * max(config.num_replicas, 1)


def check_reservation(limits: AccountLimits, config: Any, reserved_bytes: int) -> None:
    """Invariant 2's last step: `reserved_bytes` is what the account's other streams of the same storage
    reserve (`reservation_bytes`), this stream's old config excluded on an update."""
    wanted = reservation_bytes(config) or 1  # nats-server's `addBytes = 1` for a stream without max_bytes
    if config.storage == "memory":
        if limits.max_memory >= 0 and wanted > limits.max_memory - reserved_bytes:
            raise MemoryResourcesExceeded()
    elif limits.max_storage >= 0 and wanted > limits.max_storage - reserved_bytes:
        raise StorageResourcesExceeded()


def consumers_max(stream_max_consumers: int, limits: AccountLimits) -> int:
    """The consumers one stream may have: its own `max_consumers`, or the account's when that is lower or
    the stream sets none (nats-server `addConsumerWithAssignment`); 0 or less: no limit."""
    if stream_max_consumers <= 0 or 0 < limits.max_consumers < stream_max_consumers:
        return limits.max_consumers
    return stream_max_consumers


def consumer_with_account_limits(limits: AccountLimits, stored: dict[str, Any], config: Any,
                                 stream_ack_pending_max: int) -> dict[str, Any]:
    """A consumer create's stored config (`stored`, the request's JSON) with the account's part of
    nats-server's `setConsumerConfigDefaults` — a `max_ack_pending` the request and the stream's
    `consumer_limits` leave unset is the account's when that is below the default 1000 — then its part
    of `checkConsumerCfg`: a `max_ack_pending` above the account's is refused (10121). `config`: the
    parsed config with the stream's defaults applied."""
    limit = limits.max_ack_pending
    if limit <= 0:
        return stored
    if not stored.get("max_ack_pending") and stream_ack_pending_max <= 0 and config.ack_policy != "none" \
            and limit < MAX_ACK_PENDING_DEFAULT:
        return {**stored, "max_ack_pending": limit}
    if config.max_ack_pending > limit:
        raise ConsumerConfigError("max_ack_pending_excess", limit=limit)
    return stored
