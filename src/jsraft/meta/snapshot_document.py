"""The JSON document inside a meta snapshot: its schema, built from a `MetaState`, and checked on the way in.

Owns: the document's shape (`snapshot` owns the frame around it and what the records mean)::

    {"peers":   [{"cluster": str | null, "peer": str, "tags": [str]}],                  sorted by peer
     "servers": [{"peer": str, "removed": bool, "storage_uuid": str}],        version 2 only, by peer
     "streams": [{"config_index": int, "consumers": [{"created_index": int, "created_ns": int,
                  "name": str, "required_level": int}], "created_index": int, "created_ns": int,
                  "name": str, "peers": [str], "peers_index": int, "required_level": int}]}  by name

The attrs records below declare it, and strict structuring into them (`codec.structure`) is its reference
reader. A snapshot holds a record per stream and per consumer, though, and building thousands of frozen
records and running cattrs over them, each way, cost more than everything else in `encode_state` and
`decode_state` together (bench/meta_snapshot.py). So the encoder writes the JSON text straight from the
state, the decoder reads the parsed dicts, and the records only explain a document that is refused.

Invariants:
  1. `encode_document(state)` writes exactly `wire.canonical_json` of the converter's `unstructure` of the
     records `state` gives, for states whose fields hold their declared types, so snapshots are byte for
     byte those the record-based encoder wrote (tests/meta/test_meta_snapshot_format.py, against that encoder).
  2. `check_document` accepts exactly what strict structuring into the records accepts with every field
     present (the converter would fill in `config_index` and `peers_index`, and such a document is not
     canonical). An exact-shape check accepts; whatever it declines goes to the converter, which refuses
     it with the words it always used, so no document is judged by the fast check alone when refused.
  3. A document `check_document` accepted holds only JSON types of the declared kinds (`int` never a
     `bool`), so `snapshot` may read it as it would read the records.

Imports: L0, L1 (`codec`), attrs, stdlib `json`, `meta.state`, `meta.wire`. Reference: DESIGN.md §3, §5.
"""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

import attrs

from jsraft.codec import structure, unstructure
from jsraft.errors import JsraftError
from jsraft.meta import wire
from jsraft.meta.state import MetaState

Document = dict[str, Any]


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


RECORDS = {1: _Document, 2: _DocumentV2}  # format version -> the document's record


def _keys(record: type) -> frozenset[str]:
    return frozenset(field.name for field in attrs.fields(record))


_DOCUMENT_KEYS = {version: _keys(record) for version, record in RECORDS.items()}
_PEER_KEYS = _keys(_PeerRecord)
_SERVER_KEYS = _keys(_ServerRecord)
_STREAM_KEYS = _keys(_StreamRecord)
_CONSUMER_KEYS = _keys(_ConsumerRecord)
_STREAM_INTS = ("created_ns", "created_index", "required_level", "config_index", "peers_index")
_CONSUMER_INTS = ("created_ns", "created_index", "required_level")


# --- Encoding ----------------------------------------------------------------------------------------

# The canonical JSON of each record, written directly: keys sorted, no spaces, `%s` a value already in JSON
# (`_string`, `_strings`, "null", "true"), `%d` an int as `json.dumps` writes it. Building dicts for
# `json.dumps(sort_keys=True)` instead took two to three times as long (bench/meta_snapshot.py). Invariant
# 1 keeps these in step with the records; tests/meta/test_meta_snapshot_format.py holds them to it.
_CONSUMER_JSON = '{"created_index":%d,"created_ns":%d,"name":%s,"required_level":%d}'
_STREAM_JSON = ('{"config_index":%d,"consumers":[%s],"created_index":%d,"created_ns":%d,"name":%s,'
                '"peers":[%s],"peers_index":%d,"required_level":%d}')
_PEER_JSON = '{"cluster":%s,"peer":%s,"tags":[%s]}'
_SERVER_JSON = '{"peer":%s,"removed":%s,"storage_uuid":%s}'
# `json.dumps(ensure_ascii=True)` escapes every string with this function (the C one when available).
_string = encode_basestring_ascii


def _strings(values: tuple[str, ...]) -> str:
    return ",".join(map(_string, values))


def encode_document(state: MetaState) -> tuple[int, bytes, list[bytes]]:
    """`(format version, canonical JSON of the document, config blobs in document order)` of `state`:
    exactly `wire.canonical_json(unstructure(records))` of the records `state` gives (invariant 1)."""
    blobs: list[bytes] = []
    streams = []
    for stream in state.all_streams():
        blobs.append(stream.config_raw)
        consumers = []
        for consumer in state.stream_consumers(stream.name):
            blobs.append(consumer.config_raw)
            consumers.append(_CONSUMER_JSON % (consumer.created_index, consumer.created_ns, _string(consumer.name),
                                               consumer.required_level))
        streams.append(_STREAM_JSON % (
            stream.config_index, ",".join(consumers), stream.created_index, stream.created_ns, _string(stream.name),
            _strings(stream.peers), stream.peers_index, stream.required_level))
    peers = []
    for peer in sorted(state.peers):
        cluster, tags = state.peers[peer].cluster, state.peers[peer].tags
        peers.append(_PEER_JSON % ("null" if cluster is None else _string(cluster), _string(peer), _strings(tags)))
    servers = _servers(state)
    parts = ['{"peers":[', ",".join(peers)]
    if servers:
        parts += ['],"servers":[', ",".join(servers)]
    parts += ['],"streams":[', ",".join(streams), "]}"]
    return (2 if servers else 1), "".join(parts).encode(), blobs


def _servers(state: MetaState) -> list[str]:
    """Members then removed servers, stably sorted by peer: a peer in both (which `MetaState` invariant 4
    forbids) still comes out in the order the record-based encoder wrote it."""
    records = [(p, False, u) for p, u in state.storage_uuids.items()]
    records += [(p, True, u) for p, u in state.removed_servers.items()]
    records.sort(key=lambda record: record[0])
    return [_SERVER_JSON % (_string(peer), "true" if removed else "false", _string(storage_uuid))
            for peer, removed, storage_uuid in records]


# --- Decoding ----------------------------------------------------------------------------------------


def check_document(doc: Document, version: int, fail: Callable[[str], JsraftError]) -> None:
    """Accept `doc` as a document of format `version`, or raise `fail(why)` (invariant 2)."""
    if _exact_shape(doc, version):
        return
    # Declined by the fast check: the converter says why, as it always did. Should it accept, the document
    # is exactly the records' unstructured form, so reading it as a dict is reading the records.
    try:
        records = structure(doc, RECORDS[version], where="meta snapshot")
    except JsraftError as error:
        raise fail(error.description) from None
    if wire.json_value(unstructure(records)) != doc:
        raise fail("document is not canonical (a field is missing)")


def _exact_shape(doc: Document, version: int) -> bool:
    """Every declared key and no other, each value of its JSON kind (`type(...) is int` refuses a bool,
    as the converter's strict hooks do)."""
    if doc.keys() != _DOCUMENT_KEYS[version]:
        return False
    peers, streams, servers = doc["peers"], doc["streams"], doc.get("servers", [])
    return (type(peers) is list and type(streams) is list and type(servers) is list
            and all(map(_is_peer, peers)) and all(map(_is_stream, streams)) and all(map(_is_server, servers)))


def _is_strings(value: Any) -> bool:
    return type(value) is list and all(type(item) is str for item in value)


def _is_peer(record: Any) -> bool:
    return (type(record) is dict and record.keys() == _PEER_KEYS and type(record["peer"]) is str
            and (record["cluster"] is None or type(record["cluster"]) is str) and _is_strings(record["tags"]))


def _is_server(record: Any) -> bool:
    return (type(record) is dict and record.keys() == _SERVER_KEYS and type(record["peer"]) is str
            and type(record["storage_uuid"]) is str and type(record["removed"]) is bool)


def _is_stream(record: Any) -> bool:
    return (type(record) is dict and record.keys() == _STREAM_KEYS and type(record["name"]) is str
            and _is_strings(record["peers"]) and all(type(record[key]) is int for key in _STREAM_INTS)
            and type(record["consumers"]) is list and all(map(_is_consumer, record["consumers"])))


def _is_consumer(record: Any) -> bool:
    return (type(record) is dict and record.keys() == _CONSUMER_KEYS and type(record["name"]) is str
            and all(type(record[key]) is int for key in _CONSUMER_INTS))
