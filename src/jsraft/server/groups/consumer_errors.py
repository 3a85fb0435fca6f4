"""The JetStream API's consumer errors, with nats-server's `code`, `err_code` and description (layer L5).

Owns: the errors the consumer endpoints and the consumer leader raise that have no home lower down (the
refusals of a consumer *config* are `jsapi.consumer_checks.ConsumerConfigError`). The ones the meta
state machine raises too — `ConsumerNotFound`, `ConsumerAlreadyExists`, `ConsumerOffline`,
`MaximumConsumersLimit` — are defined once, in `meta.errors`, and re-exported here: `$rpc` rebuilds a
relayed error by class name (rpc.py), so a twin class would be caught by one handler and not the other.
Every `JsraftError` class name is unique across the package (tests/test_errors_unique.py).

Invariants:
  1. Each class is exactly one of nats-server's `jetstream_errors_generated.go` entries: same numbers,
     same words (`{err}` templates filled by the raiser).

Imports: L0 (`errors`), L3 (`meta.errors`). Reference: nats-server `server/jetstream_errors_generated.go`.
"""

from __future__ import annotations

from jsraft.errors import BadRequest, JsraftError
from jsraft.meta.errors import ConsumerAlreadyExists, ConsumerNotFound, ConsumerOffline, MaximumConsumersLimit

__all__ = [
    "ConsumerAlreadyExists", "ConsumerCreateFailed", "ConsumerDoesNotExist", "ConsumerNamePathSeparators",
    "ConsumerNotFound", "ConsumerOffline", "DurableNameNotInSubject", "DurableNameNotMatchSubject",
    "DurableNameNotSet", "EphemeralWithDurableName", "FilterSubjectMismatch", "MaximumConsumersLimit",
    "MultipleFiltersNotAllowed",
]



class ConsumerCreateFailed(JsraftError):
    """JSConsumerCreateErrF: `{err}` — what nats-server answers for an update it does not allow."""

    err_code = 10012
    http_code = 500
    default_description = "consumer create failed"



class ConsumerDoesNotExist(BadRequest):
    """JSConsumerDoesNotExist: action `update` for a consumer that does not exist."""

    err_code = 10149
    default_description = "consumer does not exist"


class DurableNameNotInSubject(BadRequest):
    err_code = 10016
    default_description = "consumer expected to be durable but no durable name set in subject"


class DurableNameNotMatchSubject(BadRequest):
    err_code = 10017
    default_description = "consumer name in subject does not match durable name in request"


class DurableNameNotSet(BadRequest):
    err_code = 10018
    default_description = "consumer expected to be durable but a durable name was not set"


class EphemeralWithDurableName(BadRequest):
    err_code = 10020
    default_description = "consumer expected to be ephemeral but a durable name was set in request"


class FilterSubjectMismatch(BadRequest):
    err_code = 10131
    default_description = "Consumer create request did not match filtered subject from create subject"


class MultipleFiltersNotAllowed(BadRequest):
    err_code = 10137
    default_description = "consumer with multiple subject filters cannot use subject based API"


class ConsumerNamePathSeparators(BadRequest):
    err_code = 10127
    default_description = "Consumer name can not contain path separators"

