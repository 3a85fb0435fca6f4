"""The JetStream limits of an account, and the checks a stream config meets against them (layer L1).

Owns: `AccountLimits` (nats-server's `JetStreamAccountLimits`, with the JSON API's field names, as
`$JS.API.INFO` serves it under `limits`), the errors nats-server answers when a stream config breaks one,
and the pure checks `check_stream_config` (no state needed) and `check_reservation` (against what the
account's other streams reserve). `max_streams` is enforced by the meta leader (`meta.leader`), the
consumer limits by the API that creates consumers.

Invariants:
  1. -1 is "unlimited" for every number (nats-server's default for a field an account block leaves out);
     `max_ack_pending`, `max_streams` and `max_consumers` count only when positive, as nats-server's.
  2. The checks run in nats-server's order: `max_bytes_required`, then the per-stream byte limit of the
     stream's storage (`checkStreamCfg`), then (in the server, with the meta error 10026) the stream's
     `max_consumers` against the account's, then the account's memory or storage reservation
     (`checkLimits`). A stream without `max_bytes` reserves 1 byte there, as in nats-server.
  3. Un-tiered limits are flat: a stream of R replicas reserves R times its `max_bytes` (nats-server's
     `accountReservation` with no tier).

Imports: stdlib, attrs, L0 (`errors`). Reference: nats-server `server/jetstream.go` (`checkLimits`,
`checkBytesLimits`, `maxBytesLimits`), `server/stream.go` (`checkStreamCfg`), `server/opts.go`
(`parseJetStreamForAccount`), `server/errors.json`.
"""

from __future__ import annotations

from typing import Any

import attrs

from jsraft.errors import BadRequest, InvalidConfig


class StreamMaxBytesRequired(BadRequest):
    """JSStreamMaxBytesRequired: the account's `max_bytes_required` and a stream without `max_bytes`."""

    err_code = 10113
    default_description = "account requires a stream config to have max bytes set"


class StreamMaxStreamBytesExceeded(BadRequest):
    """JSStreamMaxStreamBytesExceeded: `max_bytes` above the account's per-stream limit for its storage."""

    err_code = 10122
    default_description = "stream max bytes exceeds account limit max stream bytes"


class MemoryResourcesExceeded(BadRequest):
    """JSMemoryResourcesExceededErr: the memory streams' reservations would pass the account's `max_memory`."""

    err_code = 10028
    default_description = "insufficient memory resources available"


class StorageResourcesExceeded(BadRequest):
    """JSStorageResourcesExceededErr: the file streams' reservations would pass the account's `max_storage`."""

    err_code = 10047
    default_description = "insufficient storage resources available"


def _at_least_unlimited(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise InvalidConfig(f"account limits: {attribute.name} must be -1 (unlimited) or a number >= 0")


@attrs.frozen(kw_only=True)
class AccountLimits:
    max_memory: int = attrs.field(default=-1, validator=_at_least_unlimited)
    max_storage: int = attrs.field(default=-1, validator=_at_least_unlimited)
    max_streams: int = attrs.field(default=-1, validator=_at_least_unlimited)
    max_consumers: int = attrs.field(default=-1, validator=_at_least_unlimited)
    max_ack_pending: int = attrs.field(default=-1, validator=_at_least_unlimited)
    memory_max_stream_bytes: int = attrs.field(default=-1, validator=_at_least_unlimited)
    storage_max_stream_bytes: int = attrs.field(default=-1, validator=_at_least_unlimited)
    max_bytes_required: bool = False

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
