"""Operating errors of the consumer layer, with stable codes in jsraft's 209xx block (layer L3).

Owns: the `JsraftError` subclasses `consumer` raises. Codes are jsraft's own (DESIGN: 20000 and up;
`raft` 201xx, `runtime` 202xx, `meta` 203xx, `transport` 204xx, `stream` 205xx, `server` 206xx,
`protocol` 207xx, `client` 208xx, `consumer` 209xx). Refusals of a consumer *config* carry nats-server's
codes and live with the config (`jsapi.consumer_checks.ConsumerConfigError`).

Invariants:
  1. A code is never reused for another condition.
  2. Damaged bytes (an op batch, a snapshot) are `CorruptRecord`s: the runtime must stop applying the
     stream log at a malformed CONSUMER entry (skipping it would make this replica differ from the
     others), and drop a malformed snapshot and ask again.

Imports: L0 (`errors`).
"""

from __future__ import annotations

from jsraft.errors import CorruptRecord, JsraftError


class MalformedConsumerOps(CorruptRecord):
    """A CONSUMER entry body that does not decode: a writer bug, or damage the WAL CRC did not catch."""

    err_code = 20900
    default_description = "malformed consumer ops"


class MalformedConsumerSnapshot(CorruptRecord):
    err_code = 20901
    default_description = "malformed consumer snapshot"


class BadPullRequest(JsraftError):
    """A pull request body nats-server answers with `400 Bad Request - <reason>`."""

    err_code = 20902
    http_code = 400
    default_description = "bad pull request"
