"""Operating errors of the server layer, with stable codes in jsraft's 206xx range (layer L5).

Owns: refusals at start (`IdentityMismatch`), the request/response layer's failures (`RpcTimeout`,
`RpcRefused`), answers relayed from another node (`RemoteError`, which keeps the remote error's
`err_code` and `code` so a forwarded request fails exactly as a local one would), and `NoLeader`.

Invariants:
  1. An `err_code` here is never reused or renumbered (jsraft.errors invariant 1); 20600–20699 belong
     to the server.
  2. `RemoteError` carries the remote error's numbers unchanged: forwarding never changes an answer.

Imports: L0 only.
"""

from __future__ import annotations

from jsraft.errors import JsraftError


class ServerError(JsraftError):
    err_code = 20600
    http_code = 500
    default_description = "server error"


class IdentityMismatch(ServerError):
    """The store directory belongs to another node or cluster: refuse to start rather than mix data."""

    err_code = 20601
    default_description = "store directory belongs to another node"


class RpcTimeout(ServerError):
    """No answer from the peer in time; the request may or may not have been carried out."""

    err_code = 20602
    http_code = 503
    default_description = "request to peer timed out"


class RpcLinkDown(RpcTimeout):
    """The link to the peer went down while the request waited for its reply: like a timeout, the request
    may or may not have been carried out — but the caller learns it at once, not after the whole timeout
    (a publish to a crashed stream leader is retried with its msg id as soon as a new leader is known)."""

    err_code = 20620
    http_code = 503
    default_description = "link to peer went down before its reply"


class RpcRefused(ServerError):
    """The request could not be sent (peer unknown or unreachable) or the peer is overloaded."""

    err_code = 20603
    http_code = 503
    default_description = "request to peer refused"


class NoLeader(ServerError):
    """No leader could be found for the group before the deadline."""

    err_code = 10008  # JSClusterNotAvailErr: what nats-server answers when a group has no leader
    http_code = 503
    default_description = "JetStream system temporarily unavailable"


class RemoteError(JsraftError):
    """An error answered by another node; `err_code` and `http_code` are the remote's (invariant 2)."""

    def __init__(self, code: int, err_code: int, description: str, kind: str = "") -> None:
        self.http_code = code
        self.err_code = err_code
        self.kind = kind  # the remote exception's class name, for logs and tests
        super().__init__(description)


class RestoreFailed(JsraftError):
    """A stream restore (`$JS.API.STREAM.RESTORE`) that cannot complete: nothing restored, or the stream
    made for it removed again. nats-server's "restore failed: ..." family (`JSStreamRestoreErrF`)."""

    err_code = 10062
    http_code = 500
    default_description = "restore failed"


class StreamRestoreRace(RestoreFailed):
    """The stream being restored was written to by someone else: its sequences are no longer the backup's."""


class AcceptLossRefused(ServerError):
    """`$JSRAFT.API.STREAM.ACCEPT_LOSS`: the request does not confirm the stream by name, names no replica,
    or names one that is not a repairing member of the stream's group. Nothing was changed."""

    err_code = 20621
    http_code = 400
    default_description = "accept data loss refused"
