"""The meta snapshot encoder and decoder as they were before they wrote JSON directly (commit 8255a82).

What for: tests/meta/test_meta_snapshot_format.py holds today's `meta.snapshot` to these, byte for byte and
refusal for refusal. This is `meta/snapshot.py` at 8255a82, trimmed: attrs records, the converter's
`unstructure`, `wire.json_value` and `wire.pack` to encode; strict structuring, the canonical-document
check, the entry rules, the created_index range and a re-encode to decode (the frame checks in front of
the document are unchanged today and not repeated here). Never change it to follow the code: it is the
format's record of what the bytes were.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
from crc32c import crc32c

from jsraft.codec import structure, unstructure
from jsraft.errors import JsraftError
from jsraft.jsapi import API_LEVEL
from jsraft.meta import CreateStream, MalformedMetaSnapshot, wire
from jsraft.meta.assignment import load_consumer, load_stream
from jsraft.meta.entries import CreateConsumer, PeerAdd, PeerSeen, entry_problem, group_name, name_problem
from jsraft.meta.placement import PeerInfo
from jsraft.meta.state import MetaState


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
    storage_uuid: str
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


def document(state: MetaState) -> tuple[dict[str, Any], list[bytes]]:
    blobs: list[bytes] = []
    streams = []
    for a in state.all_streams():
        blobs.append(a.config_raw)
        consumers = []
        for c in state.stream_consumers(a.name):
            blobs.append(c.config_raw)
            consumers.append(_ConsumerRecord(name=c.name, created_ns=c.created_ns, created_index=c.created_index,
                                             required_level=c.required_level))
        streams.append(_StreamRecord(name=a.name, peers=a.peers, created_ns=a.created_ns,
                                     created_index=a.created_index, required_level=a.required_level,
                                     consumers=tuple(consumers), config_index=a.config_index,
                                     peers_index=a.peers_index))
    peers = tuple(_PeerRecord(peer=p, cluster=state.peers[p].cluster, tags=state.peers[p].tags)
                  for p in sorted(state.peers))
    servers = [_ServerRecord(peer=p, storage_uuid=u, removed=False) for p, u in state.storage_uuids.items()]
    servers += [_ServerRecord(peer=p, storage_uuid=u, removed=True) for p, u in state.removed_servers.items()]
    servers.sort(key=lambda record: record.peer)
    document = (_DocumentV2(peers=peers, streams=tuple(streams), servers=tuple(servers)) if servers
                else _Document(peers=peers, streams=tuple(streams)))
    return wire.json_value(unstructure(document)), blobs


def encode_state(state: MetaState) -> bytes:
    doc, blobs = document(state)
    body = b"JSMS" + bytes((2 if "servers" in doc else 1,)) + state.applied_index.to_bytes(8, "little")
    body += wire.pack(doc, blobs)
    return body + crc32c(body).to_bytes(4, "little")


def state_digest(state: MetaState) -> int:
    doc, blobs = document(state)
    return int.from_bytes(hashlib.blake2b(wire.pack(doc, blobs), digest_size=8).digest(), "little")


def check_document(doc: dict[str, Any], version: int) -> str | None:
    """The document checks of `decode_state`: why they refuse `doc` (the full message), or None."""
    try:
        document = structure(doc, _Document if version == 1 else _DocumentV2, where="meta snapshot")
    except JsraftError as error:
        return f"meta snapshot: {error.description}"
    if wire.json_value(unstructure(document)) != doc:
        return "meta snapshot: document is not canonical (a field is missing)"
    return None


def decode_state(data: bytes) -> MetaState:
    """`decode_state` at 8255a82 (loading at `API_LEVEL`) from the document on."""
    reader = wire.Reader(data[:-4], MalformedMetaSnapshot, "meta snapshot")
    reader.take(4)
    version, applied_index = reader.u8(), reader.u64()
    doc, blobs = wire.unpack(reader)
    reader.done()
    if (why := check_document(doc, version)) is not None:
        raise MalformedMetaSnapshot(why)
    document = structure(doc, _Document if version == 1 else _DocumentV2, where="meta snapshot")

    def check(problem: str | None) -> None:
        if problem is not None:
            raise reader.fail(problem)

    expected = sum(1 + len(s.consumers) for s in document.streams)
    if len(blobs) != expected:
        raise reader.fail(f"{len(blobs)} config blobs for {expected} assets")
    state = MetaState(API_LEVEL)
    for record in document.peers:
        check(entry_problem(PeerAdd(peer=record.peer, cluster=record.cluster, tags=record.tags)))
        state.peers[record.peer] = PeerInfo(cluster=record.cluster, tags=record.tags)
    position = 0
    for s in document.streams:
        check(entry_problem(CreateStream(name=s.name, peers=s.peers, created_ns=s.created_ns,
                                         required_level=s.required_level)))
        state.streams[s.name] = load_stream(
            s.name, blobs[position], peers=s.peers, group=group_name(s.name, s.created_index),
            created_ns=s.created_ns, created_index=s.created_index, required_level=s.required_level,
            api_level=API_LEVEL, config_index=s.config_index, peers_index=s.peers_index)
        state.consumers[s.name] = {}
        position += 1
        for c in s.consumers:
            check(entry_problem(CreateConsumer(stream=s.name, name=c.name, created_ns=c.created_ns,
                                               required_level=c.required_level)))
            state.consumers[s.name][c.name] = load_consumer(
                s.name, c.name, blobs[position], created_ns=c.created_ns, created_index=c.created_index,
                required_level=c.required_level, api_level=API_LEVEL)
            position += 1
    for server in getattr(document, "servers", ()):
        if server.removed and not server.storage_uuid:
            check(name_problem(server.peer, "peer id"))
        else:
            check(entry_problem(PeerSeen(peer=server.peer, storage_uuid=server.storage_uuid)))
        (state.removed_servers if server.removed else state.storage_uuids)[server.peer] = server.storage_uuid
    state.applied_index = applied_index
    indexes = [a.created_index for a in state.streams.values()]
    indexes += [c.created_index for consumers in state.consumers.values() for c in consumers.values()]
    if any(not 0 < index <= applied_index for index in indexes):
        raise reader.fail(f"an asset's created_index is not in 1..{applied_index}")
    if encode_state(state) != data:
        raise reader.fail("not in canonical order (names unsorted or duplicated)")
    return state


FIELDS = sorted({f.name for r in (_StreamRecord, _ConsumerRecord, _PeerRecord, _ServerRecord, _DocumentV2)
                 for f in attrs.fields(r)})
