"""Finding a stream on this node: the narrow parts the services get instead of the whole `Node` (L5).

Owns: `require_stream` (how a request for a stream that has no replica open here is answered),
`stream_for_subject` (which stream takes a subject, from this node's meta state), `LocalStreams` (this
node's name, its open stream replicas and `require_stream` bound to its meta state: what a leader-side
endpoint needs to find the replica a request is for) and `CallMeta`, the signature of a request to the
meta leader; with `router.CallStream` and `stream_repair.CallPeer` (re-exported here) they are the
routes a request can take, which `Node` wires once.

Invariants:
  1. A request for a stream this node does not know is `StreamNotFound` only when the caller found the
     stream at a meta index this node has applied too; otherwise `NotLeader(None)`, which the caller's
     router retries (the create is on its way here).
  2. `LocalStreams.replicas` is the `StreamManager`'s own dict, not a copy: a replica opened or closed
     after the wiring is seen at once.

Imports: stdlib, attrs, L0, L1 (`raft` errors, `subjects`), L3 (`meta`), siblings (`router`, `stream_repair`
for the call signatures). Must not import `server.node`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from jsraft import subjects
from jsraft.errors import StreamNotFound
from jsraft.meta import MetaStateMachine
from jsraft.raft.errors import NotLeader
from jsraft.server.groups.router import CallStream
from jsraft.server.groups.stream_repair import CallPeer

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica

Reply = tuple[Any, list[bytes]]


class CallMeta(Protocol):
    """`Node.call_meta`: a request carried to the meta leader (the router finds it)."""

    async def __call__(self, method: str, args: dict[str, Any], blobs: Sequence[bytes] = ...) -> Reply: ...


def require_stream(meta: MetaStateMachine, name: str, args: dict[str, Any]) -> None:
    """A request for stream `name` came here (this node has no replica of it open): `StreamNotFound`
    when the stream does not exist here, unless the caller saw it at a meta index this node has not
    applied yet — then `NotLeader(None)`, which the caller's router retries: the create is on its way
    (invariant 1). Returns when the stream exists (the caller then says it is not open here)."""
    try:
        meta.stream(name)
    except StreamNotFound:
        if int(args.get("meta_index", 0)) > meta.applied_index:
            raise NotLeader(None) from None
        raise


def stream_for_subject(meta: MetaStateMachine, subject: str) -> str:
    for assignment in meta.streams():
        if any(subjects.matches(pattern, subject) for pattern in assignment.subjects):
            return assignment.name
    raise StreamNotFound(f"no stream matches subject {subject!r}")


@attrs.frozen(kw_only=True)
class LocalStreams:
    """This node's stream replicas, and how a request for one not open here is answered."""

    name: str  # this node's
    replicas: dict[str, StreamReplica]  # invariant 2
    meta: MetaStateMachine

    def require_stream(self, name: str, args: dict[str, Any]) -> None:
        require_stream(self.meta, name, args)

    def replica(self, name: str, args: dict[str, Any]) -> StreamReplica:
        """The replica of stream `name` open here; else `StreamNotFound` when the stream does not exist
        (invariant 1), or `NotLeader(None)` when it exists but is not (yet) open here."""
        replica = self.replicas.get(name)
        if replica is None:
            self.require_stream(name, args)
            raise NotLeader(None)
        return replica


# The callable form, for services that take `require_stream` alone.
RequireStream = Callable[[str, dict[str, Any]], None]

__all__ = ["CallMeta", "CallPeer", "CallStream", "LocalStreams", "RequireStream", "require_stream",
           "stream_for_subject"]
