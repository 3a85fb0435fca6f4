"""The JetStream JSON API's request decoding, response values and errors, as nats-server spells them (L5).

Owns: the strict decoding of `$JS.API.*` request bodies (small request classes, and the stream config of
`STREAM.CREATE`/`STREAM.UPDATE`), the `type` of each response, the API errors that only the API raises
(`StreamMismatch`, `NotEmptyRequest`, `ClusterRequired`, `RaftGeneral`, `StreamNamePathSeparators`),
RFC 3339 timestamps, the stored-message JSON of `STREAM.MSG.GET`, and the header blocks of `DIRECT.GET`.

Invariants:
  1. A body that is not JSON, or whose JSON does not have the request's shape (unknown field, wrong
     type), fails with JSON error 10025 (`invalid JSON: ...`), as nats-server's strict decoder
     (`unmarshalRequest` with `DisallowUnknownFields`) answers; an unknown field is named in Go's words
     (`json: unknown field "x"`). Rules that relate fields to each other (`checkStreamCfg`) stay
     `InvalidConfig` (10052).
  2. Timestamps are Go's `time.RFC3339Nano` in UTC (trailing zeros of the fraction dropped); no time at
     all is Go's zero time, `0001-01-01T00:00:00Z`.
  3. Decoding never changes the bytes a config is stored as, except dropping the request-only `pedantic`
     flag (nats-server's `StreamConfigRequest`), which is not part of a stream's config.

Imports: stdlib, L0, L1 (`codec`, `jsapi`), attrs. Reference: nats-server `server/jetstream_api.go`
(request/response structs, `unmarshalRequest`, `isJSONObjectOrArray`, `isEmptyRequest`),
`server/stream.go` (`StoredMsg`, direct get headers), `server/errors.json`.
"""

from __future__ import annotations

import base64
import json
from typing import Any, TypeVar

import attrs

from jsraft.codec import structure
from jsraft.errors import BadRequest, InvalidConfig, InvalidJSON, JsraftError, UnknownConfigField
from jsraft.jsapi import StreamConfig
from jsraft.jsapi.consumer_config import ZERO_TIME, rfc3339  # the API's time format, served from here too

T = TypeVar("T")

TYPE_PREFIX = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024  # nats-server JSApiNamesLimit
LIST_LIMIT = 256  # nats-server JSApiListLimit
SUBJECT_DETAILS_MAX = 100_000  # nats-server JSMaxSubjectDetails


# --- Errors only the API raises (numbers from nats-server's server/errors.json) ---------------------


class StreamMismatch(BadRequest):
    """JSStreamMismatchErr: the stream name in the subject and in the request body differ."""

    err_code = 10056
    default_description = "stream name in subject does not match request"


class StreamNamePathSeparators(BadRequest):
    """JSStreamNameContainsPathSeparatorsErr."""

    err_code = 10128
    default_description = "Stream name can not contain path separators"


class NotEmptyRequest(BadRequest):
    """JSNotEmptyRequestErr: a request that takes no body (stream delete) came with one."""

    err_code = 10038
    default_description = "expected an empty request payload"


class ClusterRequired(JsraftError):
    """JSClusterRequiredErr: a leader stepdown asked of a node that is not clustered."""

    err_code = 10010
    http_code = 503
    default_description = "JetStream clustering support required"


class RaftGeneral(JsraftError):
    """JSRaftGeneralErrF: a Raft operation (a leadership transfer) did not happen."""

    err_code = 10041
    http_code = 500
    default_description = "raft error"


# --- Request bodies -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PagedRequest:
    """`STREAM.NAMES` and `STREAM.LIST`."""

    offset: int = 0
    subject: str = ""


@attrs.frozen(kw_only=True)
class PeerRemoveRequest:
    """`STREAM.PEER.REMOVE` (nats-server's `JSApiStreamRemovePeerRequest`): the server name to move off."""

    peer: str = ""


@attrs.frozen(kw_only=True)
class ServerRemoveRequest:
    """`SERVER.REMOVE` (nats-server's `JSApiMetaServerRemoveRequest`): the server by name, or by id (a
    jsraft node's server id is its name)."""

    peer: str = ""
    peer_id: str = ""


@attrs.frozen(kw_only=True)
class StreamInfoRequest:
    offset: int = 0
    deleted_details: bool = False
    subjects_filter: str = ""


@attrs.frozen(kw_only=True)
class PurgeRequest:
    seq: int = 0
    filter: str = ""
    keep: int = 0


@attrs.frozen(kw_only=True)
class MsgGetRequest:
    """`STREAM.MSG.GET` and `DIRECT.GET`: one message by `seq`, last on a subject, or next from `seq`.
    `batch`, `max_bytes`, `up_to_seq` and `multi_last` are a batched direct get's (`direct_batch`); MSG.GET
    refuses them, as nats-server's does."""

    seq: int = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: int = 0
    max_bytes: int = 0
    up_to_seq: int = 0
    multi_last: tuple[str, ...] = ()
    no_hdr: bool = False

    def conflicting(self) -> bool:
        """nats-server's check: exactly one of seq / last_by_subj / next_by_subj (next may take a seq)."""
        return ((self.seq > 0 and bool(self.last_by_subj))
                or (self.seq == 0 and not self.last_by_subj and not self.next_by_subj)
                or (bool(self.last_by_subj) and bool(self.next_by_subj)))

    def rpc_args(self) -> dict[str, Any]:
        return {"seq": self.seq, "last_by_subj": self.last_by_subj, "next_by_subj": self.next_by_subj}


@attrs.frozen(kw_only=True)
class MsgDeleteRequest:
    seq: int = 0
    no_erase: bool = False


@attrs.frozen(kw_only=True)
class StepdownPlacement:
    cluster: str = ""
    tags: tuple[str, ...] = ()
    preferred: str = ""


@attrs.frozen(kw_only=True)
class StepdownRequest:
    placement: StepdownPlacement | None = None


def is_json_object_or_array(raw: bytes) -> bool:
    """nats-server `isJSONObjectOrArray`: whether an optional body is there to be decoded at all."""
    stripped = raw.lstrip(b" \t\r\n")
    return stripped[:1] in (b"{", b"[")


def is_empty_request(raw: bytes) -> bool:
    """nats-server `isEmptyRequest`: no body, or an empty JSON object."""
    if not raw.strip():
        return True
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return value == {}


def _json_error(error: InvalidConfig) -> InvalidJSON:
    """A structuring failure as the JSON error nats-server's strict decoder gives (invariant 1)."""
    if isinstance(error, UnknownConfigField) and error.fields:
        return InvalidJSON(f'invalid JSON: json: unknown field "{error.fields[0]}"')
    return InvalidJSON(f"invalid JSON: {error.description}")


def load_json(raw: bytes) -> Any:
    """The JSON value of a body; an empty body is `{}` (Go decodes nothing into a zero struct)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidJSON(f"invalid JSON: {error}") from None
    except RecursionError:  # nesting deeper than the parser's stack: refused, never a crash of the node
        raise InvalidJSON("invalid JSON: nested too deeply") from None
    return {} if value is None else value


def decode_request(raw: bytes, cls: type[T]) -> T:
    """Strictly decode a request body into `cls` (invariant 1)."""
    try:
        return structure(load_json(raw), cls, where="request")
    except InvalidJSON:
        raise
    except InvalidConfig as error:
        raise _json_error(error) from None


def decode_stream_config(raw: bytes) -> tuple[StreamConfig, bytes]:
    """`(config as sent — no defaults, not validated; the bytes to store)` of a create or update body
    (invariants 1 and 3). `pedantic` is accepted and dropped, not honoured: `StreamConfig.validate`
    refuses out-of-range limits as pedantic mode does, but `with_defaults` still caps a default
    `duplicate_window` at `max_age` where pedantic nats-server would refuse."""
    data = load_json(raw)
    if isinstance(data, dict) and "pedantic" in data:
        if not isinstance(data.pop("pedantic"), bool):
            raise InvalidJSON("invalid JSON: json: cannot unmarshal pedantic: expected a boolean")
        raw = json.dumps(data).encode()
    if isinstance(data, dict) and "name" not in data:
        # Decoded as naming "": nats-server then answers the name mismatch (create) or "stream name is
        # required" (update), not a decoding error. The stored bytes are never these: both refuse.
        data = {**data, "name": ""}
    try:
        config = StreamConfig.from_dict(data)
    except InvalidConfig as error:
        raise _json_error(error) from None
    return config, bytes(raw)


# --- Responses ------------------------------------------------------------------------------------


def response_type(kind: str) -> str:
    return TYPE_PREFIX + kind


def stored_msg_json(subject: str, seq: int, headers: bytes, payload: bytes, timestamp_ns: int) -> dict[str, Any]:
    """nats-server `StoredMsg`: `hdrs` and `data` base64, left out when empty."""
    msg: dict[str, Any] = {"subject": subject, "seq": seq}
    if headers:
        msg["hdrs"] = base64.b64encode(headers).decode()
    if payload:
        msg["data"] = base64.b64encode(payload).decode()
    msg["time"] = rfc3339(timestamp_ns)
    return msg


def direct_headers(stream: str, subject: str, seq: int, timestamp_ns: int, headers: bytes) -> bytes:
    """The header block of a direct get reply: the message's own headers, then Nats-Stream, Nats-Subject,
    Nats-Sequence and Nats-Time-Stamp (nats-server `getDirectRequest`)."""
    lines = (f"Nats-Stream: {stream}\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n"
             f"Nats-Time-Stamp: {rfc3339(timestamp_ns)}\r\n").encode()
    if headers.startswith(b"NATS/1.0") and headers.endswith(b"\r\n\r\n"):
        return headers[:-2] + lines + b"\r\n"
    return b"NATS/1.0\r\n" + lines + b"\r\n"


def status_headers(code: int, text: str) -> bytes:
    """A status-only header block (`NATS/1.0 404 Message Not Found`); `text` kept to one line."""
    line = " ".join(text.split())[:120]
    return f"NATS/1.0 {code} {line}\r\n\r\n".encode()


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
