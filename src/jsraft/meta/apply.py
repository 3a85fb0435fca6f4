"""Applying committed meta entries to `MetaState`, one handler per entry kind.

Owns: the only code that changes committed meta state from the log. The leader validated each entry
before proposing it (`leader`); apply re-checks only what is the same on every replica whatever its
build — the stream or consumer exists, the name is free, the subjects do not overlap, the peer is a
member — and refuses an entry that fails (it changes nothing and returns its error in `Applied`).

Why not more: offline-ness, parsed configs and the update rules depend on the node's API level and
build, so a check on them could refuse an entry on an old replica and accept it on a new one, and the
replicated state would diverge. Those are the leader's checks alone; the leader makes them exact by
counting its in-flight proposals and by proposing only after its term's no-op entry is applied, after
which no older leader's entry can still commit.

Invariants:
  1. Deterministic and build-independent: the new state (names, raw configs, peers, levels, indexes)
     depends only on the state before, the index and the entry bytes. Only each asset's offline flag,
     decided at load by the node's API level, differs between builds, and it is not replicated state.
  2. A stream stops being assigned only by an applied `DeleteStream` (DESIGN §5).
  3. A refused entry leaves the state unchanged (apart from `applied_index`).

Imports: L0, L1, `meta.*` value modules. Reference: DESIGN.md §5, §9; nats-server
`server/jetstream_cluster.go` (applyMetaEntries, processStreamAssignment).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from jsraft.errors import JsraftError
from jsraft.meta import entries as e
from jsraft.meta.assignment import (
    ConsumerAssignment,
    StreamAssignment,
    load_consumer,
    load_stream,
    same_consumer_config,
    same_stream_config,
)
from jsraft.meta.errors import (
    ClusterPeerNotMember,
    ConsumerAlreadyExists,
    ConsumerNotFound,
    ServerReadmitRefused,
    StreamNameExist,
)
from jsraft.meta.placement import PeerInfo
from jsraft.meta.rules import check_no_overlap
from jsraft.meta.state import MetaState


def _same_error(a: JsraftError | None, b: JsraftError | None) -> bool:
    """Errors compare by class and text (exceptions compare by identity), so replicas' results can."""
    return (a is None and b is None) or (
        a is not None and b is not None and type(a) is type(b) and a.description == b.description)


@attrs.frozen(kw_only=True)
class Applied:
    """The outcome of one applied entry, for the runtime (open/close groups) and the waiting client.

    `target` is the stream name (stream and consumer entries) or the peer id (peer entries). `stream` /
    `consumer` is the assignment now in force (for a delete: the one removed). `changed` lists the
    streams whose peer set a peer remove changed.
    """

    index: int
    kind: e.EntryKind
    target: str
    error: JsraftError | None = attrs.field(default=None, eq=attrs.cmp_using(eq=_same_error))
    stream: StreamAssignment | None = None
    consumer: ConsumerAssignment | None = None
    changed: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


def apply_entry(state: MetaState, index: int, entry: e.MetaEntry) -> Applied:
    handler = _HANDLERS[entry.kind]
    try:
        return handler(state, index, entry)
    except JsraftError as error:
        # Handlers raise only before they mutate (invariant 3), so the state is unchanged here.
        return Applied(index=index, kind=entry.kind, target=target_of(entry), error=error)


def target_of(entry: e.MetaEntry) -> str:
    """The stream an entry is about, or the peer for peer entries."""
    if isinstance(entry, (e.PeerAdd, e.PeerRemove, e.PeerSeen, e.ServerReadmit)):
        return entry.peer
    if isinstance(entry, (e.CreateConsumer, e.DeleteConsumer)):
        return entry.stream
    return entry.name


def _create_stream(state: MetaState, index: int, entry: e.CreateStream) -> Applied:
    new = load_stream(
        entry.name, entry.config, peers=entry.peers, group=e.group_name(entry.name, index),
        created_ns=entry.created_ns, created_index=index, required_level=entry.required_level,
        api_level=state.api_level,
    )
    existing = state.streams.get(entry.name)
    if existing is not None:
        # The verdict may differ between builds (a config offline here compares by bytes), but neither
        # verdict changes the state, so replicas stay identical.
        if not same_stream_config(existing, new.config, entry.config):
            raise StreamNameExist()
        return Applied(index=index, kind=entry.kind, target=entry.name, stream=existing)
    check_no_overlap(new.subjects, state.claims_meeting(new.subjects))
    state.streams[entry.name] = new
    state.consumers[entry.name] = {}
    return Applied(index=index, kind=entry.kind, target=entry.name, stream=new)


def _update_stream(state: MetaState, index: int, entry: e.UpdateStream) -> Applied:
    old = state.stream(entry.name)
    new = load_stream(
        entry.name, entry.config, peers=entry.peers, group=old.group, created_ns=old.created_ns,
        created_index=old.created_index, required_level=entry.required_level, api_level=state.api_level,
        config_index=index, peers_index=old.peers_index if tuple(entry.peers) == old.peers else index,
    )
    check_no_overlap(new.subjects, state.claims_meeting(new.subjects), exclude=entry.name)
    state.streams[entry.name] = new
    return Applied(index=index, kind=entry.kind, target=entry.name, stream=new)


def _delete_stream(state: MetaState, index: int, entry: e.DeleteStream) -> Applied:
    removed = state.stream(entry.name)
    del state.streams[entry.name]
    del state.consumers[entry.name]
    return Applied(index=index, kind=entry.kind, target=entry.name, stream=removed)


def _create_consumer(state: MetaState, index: int, entry: e.CreateConsumer) -> Applied:
    # `max_consumers` and offline-ness are the leader's checks: they read the parsed config, which a
    # replica of another build may not have (module docstring).
    stream = state.stream(entry.stream)
    consumers = state.consumers[entry.stream]
    existing = consumers.get(entry.name)
    if existing is not None:
        if not same_consumer_config(existing, entry.config):
            raise ConsumerAlreadyExists()
        return Applied(index=index, kind=entry.kind, target=entry.stream, stream=stream, consumer=existing)
    new = load_consumer(
        entry.stream, entry.name, entry.config, created_ns=entry.created_ns, created_index=index,
        required_level=entry.required_level, api_level=state.api_level,
    )
    consumers[entry.name] = new
    return Applied(index=index, kind=entry.kind, target=entry.stream, stream=stream, consumer=new)


def _delete_consumer(state: MetaState, index: int, entry: e.DeleteConsumer) -> Applied:
    stream = state.stream(entry.stream)
    removed = state.consumers[entry.stream].pop(entry.name, None)
    if removed is None:
        raise ConsumerNotFound()
    return Applied(index=index, kind=entry.kind, target=entry.stream, stream=stream, consumer=removed)


def _peer_add(state: MetaState, index: int, entry: e.PeerAdd) -> Applied:
    state.peers[entry.peer] = PeerInfo(cluster=entry.cluster, tags=entry.tags)
    return Applied(index=index, kind=entry.kind, target=entry.peer)


def _peer_remove(state: MetaState, index: int, entry: e.PeerRemove) -> Applied:
    """Forget the peer and re-place every stream that had it.

    The leader's replacement is used when the stream's peers are still what the leader saw; otherwise
    (another entry changed them in between) the removed peer is simply dropped, and a stream whose only
    peer it was keeps it, so the assignment — and its data elsewhere — is never lost by a peer remove.
    """
    if entry.peer not in state.peers:
        raise ClusterPeerNotMember()
    del state.peers[entry.peer]
    # Remember which disk was removed: that disk may not rejoin, a wiped one may (`_server_readmit`).
    state.removed_servers[entry.peer] = state.storage_uuids.pop(entry.peer, "")
    decided = {r.stream: r for r in entry.replacements}
    changed: list[str] = []
    for name in sorted(state.streams):
        assignment = state.streams[name]
        if entry.peer not in assignment.peers:
            continue
        replacement = decided.get(name)
        if replacement is not None and replacement.old_peers == assignment.peers:
            peers = replacement.new_peers
        elif len(assignment.peers) > 1:
            peers = tuple(p for p in assignment.peers if p != entry.peer)
        else:
            continue
        state.streams[name] = attrs.evolve(assignment, peers=peers, peers_index=index)
        changed.append(name)
    return Applied(index=index, kind=entry.kind, target=entry.peer, changed=tuple(changed))


def _peer_seen(state: MetaState, index: int, entry: e.PeerSeen) -> Applied:
    """Record a member's storage UUID; refused for a removed server (its removal record stands)."""
    if entry.peer in state.removed_servers:
        raise ClusterPeerNotMember(f"server {entry.peer} was removed")
    state.storage_uuids[entry.peer] = entry.storage_uuid
    return Applied(index=index, kind=entry.kind, target=entry.peer)


def _server_readmit(state: MetaState, index: int, entry: e.ServerReadmit) -> Applied:
    """A server that is not a peer comes back with a storage UUID other than the removed one: forget the
    removal. Refused for a peer, and for the very disk that was removed (it must be wiped to rejoin)."""
    if entry.peer in state.peers:
        raise ServerReadmitRefused(f"server {entry.peer} is a peer, not removed")
    if state.removed_servers.get(entry.peer) == entry.storage_uuid:
        raise ServerReadmitRefused(f"server {entry.peer} returned with the storage it was removed with")
    state.removed_servers.pop(entry.peer, None)
    state.storage_uuids[entry.peer] = entry.storage_uuid
    return Applied(index=index, kind=entry.kind, target=entry.peer)


_HANDLERS: dict[e.EntryKind, Callable[[MetaState, int, e.MetaEntry], Applied]] = {
    e.EntryKind.CREATE_STREAM: _create_stream,
    e.EntryKind.UPDATE_STREAM: _update_stream,
    e.EntryKind.DELETE_STREAM: _delete_stream,
    e.EntryKind.CREATE_CONSUMER: _create_consumer,
    e.EntryKind.DELETE_CONSUMER: _delete_consumer,
    e.EntryKind.PEER_ADD: _peer_add,
    e.EntryKind.PEER_REMOVE: _peer_remove,
    e.EntryKind.PEER_SEEN: _peer_seen,
    e.EntryKind.SERVER_READMIT: _server_readmit,
}
