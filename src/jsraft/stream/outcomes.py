"""What a stream answers: JetStream API errors with nats-server's codes, and publish outcomes (layer L3).

Owns: `ApiError` (the `{"code", "err_code", "description"}` object of the JetStream JSON API) with a
constructor per condition the stream layer reports, and `PubOutcome`, the leader's per-publish decision.

Invariants:
  1. Every `err_code` here is nats-server's number for the same condition (`server/errors.json`), so a
     client sees the same error from jsraft as from nats-server; `code` is its HTTP-like status.
  2. A rejected publish consumes no sequence (`PubOutcome.seq == 0` whenever `error` is set).

Imports: L0 (`errors`), attrs. Reference: nats-server `server/errors.json`, ADR-8 (`PubAck`).
"""

from __future__ import annotations

from typing import NamedTuple

import attrs

from jsraft.errors import JsraftError


@attrs.frozen
class ApiError:
    code: int
    err_code: int
    description: str

    def to_api(self) -> dict[str, object]:
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    @classmethod
    def from_error(cls, error: JsraftError) -> "ApiError":
        return cls(error.http_code, error.err_code, error.description)


def bad_request(description: str = "bad request") -> ApiError:
    return ApiError(400, 10003, description)


def wrong_last_sequence(last_seq: int) -> ApiError:
    return ApiError(400, 10071, f"wrong last sequence: {last_seq}")  # JSStreamWrongLastSequenceErrF


def stream_not_match() -> ApiError:
    return ApiError(400, 10060, "expected stream does not match")  # JSStreamNotMatchErr


def wrong_last_msg_id(last_msg_id: str) -> ApiError:
    return ApiError(400, 10070, f"wrong last msg ID: {last_msg_id}")  # JSStreamWrongLastMsgIDErrF


def message_too_large() -> ApiError:
    return ApiError(400, 10054, "message size exceeds maximum allowed")  # JSStreamMessageExceedsMaximumErr


def ttl_invalid() -> ApiError:
    return ApiError(400, 10165, "invalid per-message TTL")  # JSMessageTTLInvalidErr


def ttl_disabled() -> ApiError:
    return ApiError(400, 10166, "per-message TTL is disabled")  # JSMessageTTLDisabledErr


def header_too_large() -> ApiError:
    return ApiError(400, 10097, "header size exceeds maximum allowed")  # JSStreamHeaderExceedsMaximumErr


def store_failed(description: str) -> ApiError:
    return ApiError(503, 10077, description)  # JSStreamStoreFailedF (discard new limits)


def sealed() -> ApiError:
    return ApiError(400, 10109, "invalid operation on sealed stream")  # JSStreamSealedErr


def rollup_failed(description: str) -> ApiError:
    return ApiError(500, 10111, description)  # JSStreamRollupFailedF


def delete_failed(description: str) -> ApiError:
    return ApiError(500, 10057, description)  # JSStreamMsgDeleteFailedF


def purge_failed(description: str) -> ApiError:
    return ApiError(500, 10110, description)  # JSStreamPurgeFailedF


def not_available() -> ApiError:
    return ApiError(503, 10008, "JetStream system temporarily unavailable")  # JSClusterNotAvailErr


def update_failed(description: str) -> ApiError:
    return ApiError(500, 10069, description)  # JSStreamUpdateErrF


class PubOutcome(NamedTuple):
    """The leader's answer to one publish (a tuple: there is one per message, DESIGN §12).

    Accepted: `seq` assigned, answered once the entry carrying it is applied. Duplicate: `seq` is the
    original's; with `pending` the original is still in flight, so the runtime answers this publish
    when (and as) the original is answered. Rejected: `error` set and `seq == 0`.
    """

    seq: int
    duplicate: bool = False
    pending: bool = False
    error: ApiError | None = None
    value: str | None = None  # a counter stream's total after this increment (ADR-49): the PubAck's "val"
    batch: tuple[str, int] | None = None  # an atomic batch's commit (ADR-50): its id and message count
    staged: bool = False  # an atomic batch's message before its commit: answered with an empty message

    def to_api(self, stream: str) -> dict[str, object]:
        """The JetStream publish reply (`PubAck` or `{"error": ...}`)."""
        if self.error is not None:
            return {"error": self.error.to_api()}
        reply: dict[str, object] = {"stream": stream, "seq": self.seq}
        if self.duplicate:
            reply["duplicate"] = True
        if self.value is not None:
            reply["val"] = self.value
        if self.batch is not None:
            reply["batch"], reply["count"] = self.batch
        return reply


def rejected(error: ApiError) -> PubOutcome:
    return PubOutcome(0, error=error)
