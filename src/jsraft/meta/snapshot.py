"""Meta snapshots: the committed meta state as canonical bytes, and its digest.

Owns: the snapshot format::

    magic "JSMS" | version u8 (1 or 2) | applied_index u64 | wire.pack(document, configs) | crc32c u32

The CRC covers every byte before it. The document lists peers (by id), streams (by name) and each
stream's consumers (by name), all sorted; version 2 adds `servers`: the storage UUID of each server seen
or removed (`MetaState.storage_uuids` / `removed_servers`), sorted by name. A state without such records
is written as version 1, byte for byte as before, so version 1 snapshots keep their encoding. The blobs
are the raw configs in document order (each stream's config, then its consumers'). Group names are not
stored: they are `entries.group_name(name, created_index)`. Offline-ness is not stored: it is decided
again by the loading node's API level. The document's schema, its encoding and its shape check are
`snapshot_document`'s; this module owns the frame and what the records mean.

Decoding checks, in this order: the frame and CRC; the JSON is canonical (`wire.unpack`); the document has
exactly the declared fields and kinds (`snapshot_document.check_document`); every record passes the entry
rules; one blob per asset; no server both a member and removed; every created_index in 1..applied_index;
and last, the state re-encodes to the very bytes given, which is what refuses unsorted or repeated names,
a version 2 without servers, and any other second spelling of a state (invariant 1). That re-encode
writes JSON directly, so it costs about as much as one `encode_state`.

Invariants:
  1. Canonical: equal states encode to equal bytes, and `encode_state(decode_state(b)) == b`.
  2. `decode_state` raises only `MalformedMetaSnapshot`; a state it returns satisfies `MetaState`'s
     invariants (unique sorted names, a consumer map per stream, valid names and peers).
  3. `state_digest` covers everything but `applied_index`, so two replicas that applied the same
     effective changes agree even if one also applied a refused entry; it is what the chaos checker
     compares across replicas.

Imports: L0, crc32c, `meta.*`. Reference: DESIGN.md §3 (formats), §5.
"""

from __future__ import annotations

import hashlib
from typing import Any

from crc32c import crc32c

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
from jsraft.meta.snapshot_document import Document, check_document, encode_document
from jsraft.meta.state import MetaState

MAGIC = b"JSMS"
SNAPSHOT_FORMAT_VERSION = 2  # the newest; 1 is still read and written (no server records)
_VERSIONS = (1, 2)
_CRC_BYTES = 4


def _payload(state: MetaState) -> tuple[int, bytes]:
    """The format version `state` is written in and its packed document and blobs."""
    version, body, blobs = encode_document(state)
    return version, wire.pack_canonical(body, blobs)


def encode_state(state: MetaState) -> bytes:
    version, payload = _payload(state)
    body = MAGIC + bytes((version,)) + state.applied_index.to_bytes(8, "little") + payload
    return body + crc32c(body).to_bytes(_CRC_BYTES, "little")


def state_digest(state: MetaState) -> int:
    """A 64-bit digest of the state without `applied_index` (invariant 3)."""
    _, payload = _payload(state)
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little")


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
    check_document(doc, version, reader.fail)
    state = _build(doc, blobs, reader, api_level)
    state.applied_index = applied_index
    if any(not 0 < index <= applied_index for index in _created_indexes(state)):
        raise reader.fail(f"an asset's created_index is not in 1..{applied_index}")
    if encode_state(state) != data:
        raise reader.fail("not in canonical order (names unsorted or duplicated)")
    return state


def _created_indexes(state: MetaState) -> list[int]:
    indexes = [a.created_index for a in state.streams.values()]
    return indexes + [c.created_index for consumers in state.consumers.values() for c in consumers.values()]


def _build(doc: Document, blobs: list[bytes], reader: wire.Reader, api_level: int) -> MetaState:
    """Check every record with the entry rules, then fill a state whose assets load at `api_level`.
    `doc` passed `check_document`: every field is there and of its declared JSON kind."""
    expected = sum(1 + len(s["consumers"]) for s in doc["streams"])
    if len(blobs) != expected:
        raise reader.fail(f"{len(blobs)} config blobs for {expected} assets")
    state = MetaState(api_level)
    for record in doc["peers"]:
        peer, cluster, tags = record["peer"], record["cluster"], tuple(record["tags"])
        _check(PeerAdd(peer=peer, cluster=cluster, tags=tags), reader)
        state.peers[peer] = PeerInfo(cluster=cluster, tags=tags)
    position = 0
    for s in doc["streams"]:
        name, peers, created_ns, created_index = s["name"], tuple(s["peers"]), s["created_ns"], s["created_index"]
        _check(CreateStream(name=name, peers=peers, created_ns=created_ns, required_level=s["required_level"]),
               reader)
        state.streams[name] = load_stream(
            name, blobs[position], peers=peers, group=group_name(name, created_index), created_ns=created_ns,
            created_index=created_index, required_level=s["required_level"], api_level=api_level,
            config_index=s["config_index"], peers_index=s["peers_index"])
        state.consumers[name] = consumers = {}
        position += 1
        for c in s["consumers"]:
            _check(CreateConsumer(stream=name, name=c["name"], created_ns=c["created_ns"],
                                  required_level=c["required_level"]), reader)
            consumers[c["name"]] = load_consumer(
                name, c["name"], blobs[position], created_ns=c["created_ns"], created_index=c["created_index"],
                required_level=c["required_level"], api_level=api_level)
            position += 1
    for server in doc.get("servers", ()):
        _check_server(server, reader)
        peer, removed = server["peer"], server["removed"]
        if peer in (state.storage_uuids if removed else state.removed_servers):
            # The final re-encode cannot see this one (members sort before removed servers of the same name),
            # and `MetaState` invariant 4 forbids it: `MetaStateMachine.restore` would crash on its check.
            raise reader.fail(f"server {peer!r} is listed both as a member and as removed")
        (state.removed_servers if removed else state.storage_uuids)[peer] = server["storage_uuid"]
    return state


def _check_server(server: Document, reader: wire.Reader) -> None:
    peer, storage_uuid = server["peer"], server["storage_uuid"]
    if server["removed"] and not storage_uuid:
        problem = name_problem(peer, "peer id")  # removed before its storage was ever seen
    else:
        problem = entry_problem(PeerSeen(peer=peer, storage_uuid=storage_uuid))
    if problem is not None:
        raise reader.fail(problem)


def _check(record: Any, reader: wire.Reader) -> None:
    if (problem := entry_problem(record)) is not None:
        raise reader.fail(problem)

