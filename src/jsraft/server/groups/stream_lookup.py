"""Finding a stream on this node: the narrow parts the services get instead of the whole `Node` (L5).

Owns: `require_stream` (how a request for a stream that has no replica open here is answered),
`StreamSubjects` (which stream takes a publish subject, from this node's meta state, in time proportional
to the subject's tokens: a `Sublist` of every stream's subjects, as the client port routes a PUB) and
`stream_for_subject_scan` (the same answer by looking at every stream: the reference it is checked
against), `LocalStreams` (this node's name, its open stream replicas, `require_stream` and
`StreamSubjects` bound to its meta state: what a leader-side endpoint or the embedded API needs to find
the stream a request is for) and `CallMeta`, the signature of a request to the meta leader; with
`router.CallStream` and `stream_repair.CallPeer` (re-exported here) they are the routes a request can
take, which `Node` wires once.

Invariants:
  1. A request for a stream this node does not know is `StreamNotFound` only when the caller found the
     stream at a meta index this node has applied too; otherwise `NotLeader(None)`, which the caller's
     router retries (the create is on its way here).
  2. `LocalStreams.replicas` is the `StreamManager`'s own dict, not a copy: a replica opened or closed
     after the wiring is seen at once.
  3. `StreamSubjects.stream_for(s)` answers what `stream_for_subject_scan(meta, s)` answers at that
     moment, for any `s` (a subject with `*` or `>` tokens too: both take them as literal tokens, which
     the stream's own patterns may match, so `publish("a.*")` is stored in the stream of `a.*` as
     before): before each lookup its `Sublist` is brought in line with the streams the meta state
     assigned, replaced or deleted since the last one (`MetaStateMachine.stream_changes`, the journal
     the client port's subscriptions follow), and with every stream after a snapshot restore. The meta
     state is the one source of truth; a stream found is checked against its subjects there.

Imports: stdlib, attrs, L0, L1 (`raft` errors, `subjects`), L3 (`meta`), siblings (`router`, `stream_repair`
for the call signatures), `server.nats.sublist` (the client port's subject trie). Must not import
`server.node`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from jsraft import subjects
from jsraft.errors import StreamNotFound, invariant
from jsraft.meta import MetaStateMachine
from jsraft.raft.errors import NotLeader
from jsraft.server.groups.router import CallStream
from jsraft.server.groups.stream_repair import CallPeer
from jsraft.server.nats.sublist import Sublist

if TYPE_CHECKING:
    from jsraft.meta.machine import StreamCursor
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


def stream_for_subject_scan(meta: MetaStateMachine, subject: str) -> str:
    """The stream whose subjects match `subject`, found by looking at every stream: O(streams), the
    reference `StreamSubjects` is checked against (invariant 3), not for a per-message path. Streams'
    subjects never overlap (meta state invariant 2), so at most one matches."""
    for assignment in meta.streams():
        if any(subjects.matches(pattern, subject) for pattern in assignment.subjects):
            return assignment.name
    raise _not_found(subject)


def _not_found(subject: str) -> StreamNotFound:
    return StreamNotFound(f"no stream matches subject {subject!r}")


class _Claim:
    """One subject pattern of one stream, as a `Sublist` entry (a plain one: no queue; hashed by identity)."""

    __slots__ = ("stream", "subject")
    queue = None

    def __init__(self, stream: str, subject: str) -> None:
        self.stream, self.subject = stream, subject


class StreamSubjects:
    """Which stream takes a publish subject, in time proportional to its tokens (invariant 3)."""

    def __init__(self, meta: MetaStateMachine) -> None:
        self._meta = meta
        self._sublist = Sublist()
        self._claims: dict[str, tuple[_Claim, ...]] = {}  # stream -> its subjects in the sublist
        self._cursor: StreamCursor | None = None  # where `_refresh` is in the meta state's stream changes

    def stream_for(self, subject: str) -> str:
        """The stream whose subjects match `subject`; `StreamNotFound` when none does."""
        self._refresh()
        found = self._sublist.match(subject).plain
        if not found:
            raise _not_found(subject)
        # Two streams never both match (meta state invariant 2); were they to, the scan's pick is the first
        # by name, and so is this one.
        name = found[0].stream if len(found) == 1 else min(claim.stream for claim in found)
        invariant(any(subjects.matches(pattern, subject) for pattern in self._meta.stream(name).subjects),
                  f"stream subject index: {name!r} found for {subject!r} but its subjects do not match")
        return name

    def _refresh(self) -> None:
        """Invariant 3: the streams changed since the last lookup (every stream the first time, after a
        restore, or when the journal no longer reaches back) looked at again."""
        meta = self._meta
        names, self._cursor = meta.stream_changes(self._cursor)
        if names is None:
            names = set(meta.names()) | self._claims.keys()
        for name in names:
            wanted = tuple(dict.fromkeys(meta.stream(name).subjects)) if meta.has_stream(name) else ()
            held = self._claims.get(name, ())
            if tuple(claim.subject for claim in held) == wanted:
                continue  # an update that kept the subjects: the sublist (and its cache) stays as it is
            for claim in held:
                self._sublist.remove(claim)
            claims = tuple(_Claim(name, subject) for subject in wanted)
            for claim in claims:
                self._sublist.insert(claim)
            if claims:
                self._claims[name] = claims
            else:
                self._claims.pop(name, None)

    def check(self) -> None:
        """Invariant 3 whole, O(streams) (for tests): after a refresh, the sublist holds exactly every
        stream's subjects in the meta state."""
        self._refresh()
        held = {name: tuple(claim.subject for claim in claims) for name, claims in self._claims.items()}
        wanted = {a.name: tuple(dict.fromkeys(a.subjects)) for a in self._meta.streams() if a.subjects}
        invariant(held == wanted, "stream subject index: the sublist holds every stream's subjects, no other")
        invariant(len(self._sublist) == sum(map(len, wanted.values())), "stream subject index: no stray entry")


@attrs.frozen(kw_only=True)
class LocalStreams:
    """This node's stream replicas, and how a request for one not open here is answered."""

    name: str  # this node's
    replicas: dict[str, StreamReplica]  # invariant 2
    meta: MetaStateMachine
    subjects: StreamSubjects = attrs.field(init=False, default=attrs.Factory(
        lambda self: StreamSubjects(self.meta), takes_self=True))  # invariant 3

    def require_stream(self, name: str, args: dict[str, Any]) -> None:
        require_stream(self.meta, name, args)

    def stream_for_subject(self, subject: str) -> str:
        """The stream that takes a publish on `subject` (invariant 3); `StreamNotFound` when none."""
        return self.subjects.stream_for(subject)

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

__all__ = ["CallMeta", "CallPeer", "CallStream", "LocalStreams", "RequireStream", "StreamSubjects",
           "require_stream", "stream_for_subject_scan"]
