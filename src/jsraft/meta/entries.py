"""Meta log entries: what the meta leader proposes and every replica applies (DESIGN §5).

Owns: the entry kinds, their values, and their one binary encoding::

    version u8 (=1) | kind u8 | wire.pack(document, blobs)

The document is the entry's fields as canonical JSON; an entry that carries a config (create/update
stream, create consumer) has exactly one blob, the config's raw JSON bytes as the client sent them, so
they are re-emitted unchanged (DESIGN §9). Other kinds have no blob.

What an entry does *not* carry, because apply derives it deterministically: a stream's group name
(`S-<name>-<index of the create entry>`) and creation index; whether an asset is offline (that depends
on the applying node's API level, so a mixed-version cluster agrees on everything else).

Invariants:
  1. `decode_entry(encode_entry(e)) == e` and `encode_entry(decode_entry(b)) == b` for every `b` that
     decodes (canonical encoding, `wire` invariant 1).
  2. `decode_entry` raises only `MalformedMetaEntry`, naming the problem; a decoded entry has valid
     names, distinct non-empty peers and non-negative numbers, so apply never re-checks its shape.
  3. Kind numbers and field names are durable: never renumber or rename one; a new field needs a new
     format version.

Imports: L0, L1 (`codec`, `jsapi`), attrs, `meta.wire`, `meta.errors`. Reference: DESIGN.md §5, §9;
nats-server `server/jetstream_cluster.go` (entryOp, streamAssignment, consumerAssignment).
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import attrs

from jsraft.codec import structure, unstructure
from jsraft.errors import InvalidConfig, JsraftError, invariant
from jsraft.jsapi import validate_stream_name
from jsraft.jsapi.stream_config import REPLICAS_MAX
from jsraft.meta import wire
from jsraft.meta.errors import MalformedMetaEntry

ENTRY_FORMAT_VERSION = 1
# Peer ids and consumer names share the stream-name bound: they become directory and group names.
NAME_BYTES_MAX = 255
REQUIRED_LEVEL_MAX = 1 << 31
_NAME_FORBIDDEN = frozenset(" \t\r\n\f\v.*>/\\")


class EntryKind(enum.IntEnum):
    """Durable kind numbers (invariant 3)."""

    CREATE_STREAM = 1
    UPDATE_STREAM = 2
    DELETE_STREAM = 3
    CREATE_CONSUMER = 4
    DELETE_CONSUMER = 5
    PEER_ADD = 6
    PEER_REMOVE = 7
    PEER_SEEN = 8
    SERVER_READMIT = 9


@attrs.frozen(kw_only=True)
class CreateStream:
    """Assign a new stream: its peers (placed by the leader), creation time and required API level."""

    kind: ClassVar[EntryKind] = EntryKind.CREATE_STREAM
    name: str
    peers: tuple[str, ...]
    created_ns: int
    required_level: int
    config: bytes = attrs.field(default=b"", repr=False)  # the raw JSON as received (the blob)


@attrs.frozen(kw_only=True)
class UpdateStream:
    """Replace a stream's config; `peers` is the new peer set (changed by a replicas scale)."""

    kind: ClassVar[EntryKind] = EntryKind.UPDATE_STREAM
    name: str
    peers: tuple[str, ...]
    required_level: int
    config: bytes = attrs.field(default=b"", repr=False)


@attrs.frozen(kw_only=True)
class DeleteStream:
    """The only way a stream (and its consumers) stops being assigned (DESIGN §5)."""

    kind: ClassVar[EntryKind] = EntryKind.DELETE_STREAM
    name: str


@attrs.frozen(kw_only=True)
class CreateConsumer:
    """Assign a consumer to a stream. Its state is replicated in the stream's group (DESIGN §7)."""

    kind: ClassVar[EntryKind] = EntryKind.CREATE_CONSUMER
    stream: str
    name: str
    created_ns: int
    required_level: int
    config: bytes = attrs.field(default=b"", repr=False)


@attrs.frozen(kw_only=True)
class DeleteConsumer:
    kind: ClassVar[EntryKind] = EntryKind.DELETE_CONSUMER
    stream: str
    name: str


@attrs.frozen(kw_only=True)
class PeerAdd:
    """A node joins the set placement may use (or updates its cluster and tags)."""

    kind: ClassVar[EntryKind] = EntryKind.PEER_ADD
    peer: str
    cluster: str | None = None
    tags: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Replacement:
    """One stream's peer set before and after a peer remove, as the leader decided it."""

    stream: str
    old_peers: tuple[str, ...]
    new_peers: tuple[str, ...]


@attrs.frozen(kw_only=True)
class PeerRemove:
    """A node leaves; `replacements` re-place the streams that had it (decided by the leader, which
    alone knows which peers are online, so apply stays deterministic)."""

    kind: ClassVar[EntryKind] = EntryKind.PEER_REMOVE
    peer: str
    replacements: tuple[Replacement, ...] = ()


@attrs.frozen(kw_only=True)
class PeerSeen:
    """The meta leader saw member `peer` online with this storage UUID (its HELLO): recorded so that, once
    the peer is removed, every replica knows which disk was removed (`server/groups/meta_members.py`)."""

    kind: ClassVar[EntryKind] = EntryKind.PEER_SEEN
    peer: str
    storage_uuid: str


@attrs.frozen(kw_only=True)
class ServerReadmit:
    """A removed server came back with another storage UUID (its directory wiped): it may be added to the
    meta group again (learner, then voter, then `PeerAdd`; `server/groups/meta_members.py`)."""

    kind: ClassVar[EntryKind] = EntryKind.SERVER_READMIT
    peer: str
    storage_uuid: str


MetaEntry = (CreateStream | UpdateStream | DeleteStream | CreateConsumer | DeleteConsumer | PeerAdd | PeerRemove
             | PeerSeen | ServerReadmit)
_CLASSES: dict[EntryKind, type] = {
    cls.kind: cls
    for cls in (CreateStream, UpdateStream, DeleteStream, CreateConsumer, DeleteConsumer, PeerAdd, PeerRemove,
                PeerSeen, ServerReadmit)
}
_WITH_CONFIG = frozenset({EntryKind.CREATE_STREAM, EntryKind.UPDATE_STREAM, EntryKind.CREATE_CONSUMER})


def group_name(stream: str, created_index: int) -> str:
    """The stream's Raft group name: unique even when a stream is deleted and created again."""
    return f"S-{stream}-{created_index}"


def name_problem(name: Any, what: str) -> str | None:
    """Why `name` is not a valid consumer name or peer id (stream names use `validate_stream_name`)."""
    if not isinstance(name, str) or not name:
        return f"{what} is required"
    if len(name.encode()) > NAME_BYTES_MAX:
        return f"{what} is longer than {NAME_BYTES_MAX} bytes"
    if _NAME_FORBIDDEN.intersection(name):
        return f"{what} can not contain whitespace, '.', '*', '>' or path separators"
    return None


def label_problem(label: Any, what: str) -> str | None:
    """Why a server tag or cluster name is not valid: they are never paths, so only whitespace is out."""
    if not isinstance(label, str) or not label:
        return f"{what} is required"
    if len(label.encode()) > NAME_BYTES_MAX:
        return f"{what} is longer than {NAME_BYTES_MAX} bytes"
    if any(char.isspace() for char in label):
        return f"{what} can not contain whitespace"
    return None


def _stream_name_problem(name: str) -> str | None:
    try:
        validate_stream_name(name)
    except InvalidConfig as error:
        return error.description
    return None


def _peers_problem(peers: tuple[str, ...], what: str) -> str | None:
    if not 1 <= len(peers) <= REPLICAS_MAX:
        return f"{what} must hold 1 to {REPLICAS_MAX} peers, not {len(peers)}"
    if len(set(peers)) != len(peers):
        return f"{what} are not distinct: {list(peers)}"
    return next((p for p in (name_problem(peer, "peer id") for peer in peers) if p), None)


def entry_problem(entry: MetaEntry) -> str | None:
    """Why `entry`'s fields are not valid, or None (invariant 2)."""
    problems: list[str | None] = []
    if isinstance(entry, (CreateStream, UpdateStream, DeleteStream)):
        problems.append(_stream_name_problem(entry.name))
    if isinstance(entry, (CreateStream, UpdateStream)):
        problems.append(_peers_problem(entry.peers, "peers"))
    if isinstance(entry, (CreateConsumer, DeleteConsumer)):
        problems += [_stream_name_problem(entry.stream), name_problem(entry.name, "consumer name")]
    if isinstance(entry, (CreateStream, CreateConsumer)) and entry.created_ns < 0:
        problems.append("created_ns can not be negative")
    if isinstance(entry, (CreateStream, UpdateStream, CreateConsumer)):
        if not 0 <= entry.required_level < REQUIRED_LEVEL_MAX:
            problems.append(f"required_level {entry.required_level} is out of range")
    if isinstance(entry, (PeerAdd, PeerRemove, PeerSeen, ServerReadmit)):
        problems.append(name_problem(entry.peer, "peer id"))
    if isinstance(entry, (PeerSeen, ServerReadmit)):
        problems.append(label_problem(entry.storage_uuid, "storage uuid"))
    if isinstance(entry, PeerAdd):
        problems += [label_problem(tag, "tag") for tag in entry.tags]
        if entry.cluster is not None:
            problems.append(label_problem(entry.cluster, "cluster name"))
    if isinstance(entry, PeerRemove):
        problems += [_replacement_problem(r, entry.peer) for r in entry.replacements]
        if len({r.stream for r in entry.replacements}) != len(entry.replacements):
            problems.append("a stream is replaced twice")
    return next((p for p in problems if p), None)


def _replacement_problem(replacement: Replacement, removed: str) -> str | None:
    problem = (_stream_name_problem(replacement.stream) or _peers_problem(replacement.old_peers, "old_peers")
               or _peers_problem(replacement.new_peers, "new_peers"))
    if problem is None and removed in replacement.new_peers:
        problem = f"the removed peer {removed} is in new_peers of {replacement.stream}"
    return problem


def _document(entry: MetaEntry) -> dict[str, Any]:
    """The entry's JSON document: every field but the config blob, as JSON values."""
    doc = unstructure(entry)
    doc.pop("config", None)
    return wire.json_value(doc)


def encode_entry(entry: MetaEntry) -> bytes:
    """The entry's bytes for `RaftNode.propose`. Encoding an invalid entry is a bug (invariant 2)."""
    problem = entry_problem(entry)
    invariant(problem is None, f"encoding an invalid meta entry: {problem}")
    doc = _document(entry)
    blobs = [entry.config] if entry.kind in _WITH_CONFIG else []
    header = bytes((ENTRY_FORMAT_VERSION, entry.kind))
    return header + wire.pack(doc, blobs)


def decode_entry(data: bytes | memoryview) -> MetaEntry:
    """Strictly decode one meta entry; raise `MalformedMetaEntry` naming what is wrong."""
    reader = wire.Reader(data, MalformedMetaEntry, "meta entry")
    version = reader.u8()
    if version != ENTRY_FORMAT_VERSION:
        raise reader.fail(f"format version {version} is not {ENTRY_FORMAT_VERSION} "
                          "(written by another jsraft version?)")
    raw_kind = reader.u8()
    if raw_kind not in _CLASSES:
        raise reader.fail(f"unknown entry kind {raw_kind}")
    kind = EntryKind(raw_kind)
    doc, blobs = wire.unpack(reader)
    reader.done()
    expected_blobs = 1 if kind in _WITH_CONFIG else 0
    if len(blobs) != expected_blobs or "config" in doc:
        raise reader.fail(f"{kind.name} carries {expected_blobs} config blob(s), found {len(blobs)}")
    try:
        entry = structure(doc, _CLASSES[kind], where=f"meta entry {kind.name}")
    except JsraftError as error:
        raise reader.fail(error.description) from None
    if _document(entry) != doc:
        # Missing fields took their defaults: refuse, so one entry has exactly one encoding (invariant 1).
        raise reader.fail(f"{kind.name}: document is not canonical (a field is missing)")
    if blobs:
        entry = attrs.evolve(entry, config=blobs[0])
    if (problem := entry_problem(entry)) is not None:
        raise reader.fail(f"{kind.name}: {problem}")
    return entry
