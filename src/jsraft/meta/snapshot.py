"""Meta snapshots: the committed meta state as canonical bytes, and its digest.

Owns: the snapshot format::

    magic "JSMS" | version u8 (1 or 2) | applied_index u64 | wire.pack(document, configs) | crc32c u32

The CRC covers every byte before it. The document lists peers (by id), streams (by name) and each
stream's consumers (by name), all sorted; version 2 adds `servers`: the storage UUID of each server seen
or removed (`MetaState.storage_uuids` / `removed_servers`), sorted by name. A state without such records
is written as version 1, byte for byte as before, so version 1 snapshots keep their encoding. The blobs
are the raw configs in document order (each stream's config, then its consumers'). Group names are not
stored: they are `entries.group_name(name, created_index)`. Offline-ness is not stored: it is decided
again by the loading node's API level.

Invariants:
  1. Canonical: equal states encode to equal bytes, and `encode_state(decode_state(b)) == b`.
  2. `decode_state` raises only `MalformedMetaSnapshot`; a state it returns satisfies `MetaState`'s
     invariants (unique sorted names, a consumer map per stream, valid names and peers).
  3. `state_digest` covers everything but `applied_index`, so two replicas that applied the same
     effective changes agree even if one also applied a refused entry; it is what the chaos checker
     compares across replicas.

Imports: L0, L1 (`codec`), crc32c, attrs, `meta.*`. Reference: DESIGN.md §3 (formats), §5.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
from crc32c import crc32c

from jsraft.codec import structure, unstructure
from jsraft.errors import JsraftError
from jsraft.meta import wire
from jsraft.meta.assignment import load_consumer, load_stream
from jsraft.meta.entries import (
    CreateConsumer,
    CreateStream,
    PeerAdd,
    PeerSeen,
    entry_problem,
    group_name,
    name_problem,
)
from jsraft.meta.errors import MalformedMetaSnapshot
from jsraft.meta.placement import PeerInfo
from jsraft.meta.state import MetaState

MAGIC = b"JSMS"
SNAPSHOT_FORMAT_VERSION = 2  # the newest; 1 is still read and written (no server records)
_VERSIONS = (1, 2)
_CRC_BYTES = 4


@attrs.frozen(kw_only=True)
class _ConsumerRecord:
    name: str
    created_ns: int
    created_index: int
    required_level: int


@attrs.frozen(kw_only=True)
class _StreamRecord:
    name: str
    peers: tuple[str, ...]
    created_ns: int
    created_index: int
    required_level: int
    consumers: tuple[_ConsumerRecord, ...]
    config_index: int = 0
    peers_index: int = 0


@attrs.frozen(kw_only=True)
class _PeerRecord:
    peer: str
    cluster: str | None
    tags: tuple[str, ...]


@attrs.frozen(kw_only=True)
class _ServerRecord:
    peer: str
    storage_uuid: str  # "" only for a removed server whose storage was never seen
    removed: bool


@attrs.frozen(kw_only=True)
class _Document:
    peers: tuple[_PeerRecord, ...]
    streams: tuple[_StreamRecord, ...]


@attrs.frozen(kw_only=True)
class _DocumentV2:
    peers: tuple[_PeerRecord, ...]
    streams: tuple[_StreamRecord, ...]
    servers: tuple[_ServerRecord, ...]


def _servers(state: MetaState) -> tuple[_ServerRecord, ...]:
    records = [_ServerRecord(peer=p, storage_uuid=u, removed=False) for p, u in state.storage_uuids.items()]
    records += [_ServerRecord(peer=p, storage_uuid=u, removed=True) for p, u in state.removed_servers.items()]
    return tuple(sorted(records, key=lambda record: record.peer))


def _document(state: MetaState) -> tuple[dict[str, Any], list[bytes]]:
    blobs: list[bytes] = []
    streams: list[_StreamRecord] = []
    for assignment in state.all_streams():
        blobs.append(assignment.config_raw)
        consumers = []
        for consumer in state.stream_consumers(assignment.name):
            blobs.append(consumer.config_raw)
            consumers.append(_ConsumerRecord(
                name=consumer.name, created_ns=consumer.created_ns, created_index=consumer.created_index,
                required_level=consumer.required_level))
        streams.append(_StreamRecord(
            name=assignment.name, peers=assignment.peers, created_ns=assignment.created_ns,
            created_index=assignment.created_index, required_level=assignment.required_level,
            consumers=tuple(consumers), config_index=assignment.config_index,
            peers_index=assignment.peers_index))
    peers = tuple(_PeerRecord(peer=p, cluster=state.peers[p].cluster, tags=state.peers[p].tags)
                  for p in sorted(state.peers))
    servers = _servers(state)
    document = (_DocumentV2(peers=peers, streams=tuple(streams), servers=servers) if servers
                else _Document(peers=peers, streams=tuple(streams)))
    return wire.json_value(unstructure(document)), blobs


def encode_state(state: MetaState) -> bytes:
    doc, blobs = _document(state)
    version = 2 if "servers" in doc else 1
    body = MAGIC + bytes((version,)) + state.applied_index.to_bytes(8, "little")
    body += wire.pack(doc, blobs)
    return body + crc32c(body).to_bytes(_CRC_BYTES, "little")


def state_digest(state: MetaState) -> int:
    """A 64-bit digest of the state without `applied_index` (invariant 3)."""
    doc, blobs = _document(state)
    return int.from_bytes(hashlib.blake2b(wire.pack(doc, blobs), digest_size=8).digest(), "little")


def decode_state(data: bytes | memoryview, *, api_level: int) -> MetaState:
    """Strictly decode a snapshot into a fresh `MetaState` whose assets are loaded at `api_level`."""
    data = bytes(data)
    reader = wire.Reader(data, MalformedMetaSnapshot, "meta snapshot")
    if len(data) < len(MAGIC) + 1 + 8 + _CRC_BYTES:
        raise reader.fail(f"{len(data)} bytes is shorter than the frame")
    if int.from_bytes(data[-_CRC_BYTES:], "little") != crc32c(data[:-_CRC_BYTES]):
        raise reader.fail("checksum mismatch")
    reader = wire.Reader(data[:-_CRC_BYTES], MalformedMetaSnapshot, "meta snapshot")
    if reader.take(len(MAGIC)) != MAGIC:
        raise reader.fail("bad magic")
    if (version := reader.u8()) not in _VERSIONS:
        raise reader.fail(f"format version {version} is not one of {_VERSIONS}")
    applied_index = reader.u64()
    doc, blobs = wire.unpack(reader)
    reader.done()
    try:
        document = structure(doc, _Document if version == 1 else _DocumentV2, where="meta snapshot")
    except JsraftError as error:
        raise reader.fail(error.description) from None
    if wire.json_value(unstructure(document)) != doc:
        raise reader.fail("document is not canonical (a field is missing)")
    state = _build(document, blobs, reader, api_level)
    state.applied_index = applied_index
    if any(not 0 < index <= applied_index for index in _created_indexes(state)):
        raise reader.fail(f"an asset's created_index is not in 1..{applied_index}")
    if encode_state(state) != data:
        raise reader.fail("not in canonical order (names unsorted or duplicated)")
    return state


def _created_indexes(state: MetaState) -> list[int]:
    indexes = [a.created_index for a in state.streams.values()]
    return indexes + [c.created_index for consumers in state.consumers.values() for c in consumers.values()]


def _build(document: _Document | _DocumentV2, blobs: list[bytes], reader: wire.Reader, api_level: int) -> MetaState:
    """Check every record with the entry rules, then fill a state whose assets load at `api_level`."""
    expected = sum(1 + len(s.consumers) for s in document.streams)
    if len(blobs) != expected:
        raise reader.fail(f"{len(blobs)} config blobs for {expected} assets")
    state = MetaState(api_level)
    for record in document.peers:
        _check(PeerAdd(peer=record.peer, cluster=record.cluster, tags=record.tags), reader)
        state.peers[record.peer] = PeerInfo(cluster=record.cluster, tags=record.tags)
    position = 0
    for s in document.streams:
        _check(CreateStream(name=s.name, peers=s.peers, created_ns=s.created_ns,
                            required_level=s.required_level), reader)
        state.streams[s.name] = load_stream(
            s.name, blobs[position], peers=s.peers, group=group_name(s.name, s.created_index),
            created_ns=s.created_ns, created_index=s.created_index, required_level=s.required_level,
            api_level=api_level, config_index=s.config_index, peers_index=s.peers_index)
        state.consumers[s.name] = {}
        position += 1
        for c in s.consumers:
            _check(CreateConsumer(stream=s.name, name=c.name, created_ns=c.created_ns,
                                  required_level=c.required_level), reader)
            state.consumers[s.name][c.name] = load_consumer(
                s.name, c.name, blobs[position], created_ns=c.created_ns, created_index=c.created_index,
                required_level=c.required_level, api_level=api_level)
            position += 1
    for server in getattr(document, "servers", ()):
        _check_server(server, reader)
        (state.removed_servers if server.removed else state.storage_uuids)[server.peer] = server.storage_uuid
    return state


def _check_server(server: _ServerRecord, reader: wire.Reader) -> None:
    if server.removed and not server.storage_uuid:
        problem = name_problem(server.peer, "peer id")  # removed before its storage was ever seen
    else:
        problem = entry_problem(PeerSeen(peer=server.peer, storage_uuid=server.storage_uuid))
    if problem is not None:
        raise reader.fail(problem)


def _check(record: Any, reader: wire.Reader) -> None:
    if (problem := entry_problem(record)) is not None:
        raise reader.fail(problem)

