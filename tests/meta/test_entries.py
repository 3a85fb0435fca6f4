"""`jsraft.meta.entries`: every entry kind round-trips, and nothing malformed decodes.

Method: Hypothesis builds valid entries of every kind (names, peers, levels, raw config blobs of any
bytes) and checks both directions of the canonical round trip (entries invariant 1). Then the decoder
is attacked: random bytes, every single-byte mutation and truncation of valid entries, and hand-made
malformations (wrong version, unknown kind, trailing bytes, missing or extra fields and blobs,
non-canonical JSON, wrong JSON types, invalid names, duplicate peers, absurd nesting). The only
acceptable outcomes are `MalformedMetaEntry` or an entry that re-encodes to exactly the input.
"""

from __future__ import annotations

import json
import struct

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from jsraft.errors import InvariantViolation
from jsraft.meta import (
    CreateConsumer,
    CreateStream,
    DeleteConsumer,
    DeleteStream,
    EntryKind,
    MalformedMetaEntry,
    PeerAdd,
    PeerRemove,
    Replacement,
    UpdateStream,
    decode_entry,
    encode_entry,
)
from jsraft.meta.wire import pack

_NAME_CHARS = st.characters(min_codepoint=33, max_codepoint=0x2FF,
                            blacklist_characters=".*>/\\", blacklist_categories=("Cs", "Cc", "Zs"))
names = st.text(_NAME_CHARS, min_size=1, max_size=12)
labels = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_categories=("Cs", "Cc", "Zs")),
                 min_size=1, max_size=12)  # tags and cluster names: dots and colons allowed
peer_sets = st.lists(names, min_size=1, max_size=5, unique=True).map(tuple)
levels = st.integers(0, (1 << 31) - 1)
stamps = st.integers(0, (1 << 63) - 1)
blobs = st.binary(max_size=64)


def _replacements(draw_peer: str):
    return st.lists(
        st.builds(Replacement, stream=names, old_peers=peer_sets,
                  new_peers=peer_sets.filter(lambda peers: draw_peer not in peers)),
        max_size=3, unique_by=lambda r: r.stream,
    ).map(tuple)


entries = st.one_of(
    st.builds(CreateStream, name=names, peers=peer_sets, created_ns=stamps, required_level=levels, config=blobs),
    st.builds(UpdateStream, name=names, peers=peer_sets, required_level=levels, config=blobs),
    st.builds(DeleteStream, name=names),
    st.builds(CreateConsumer, stream=names, name=names, created_ns=stamps, required_level=levels, config=blobs),
    st.builds(DeleteConsumer, stream=names, name=names),
    st.builds(PeerAdd, peer=names, cluster=st.none() | labels, tags=st.lists(labels, max_size=3).map(tuple)),
    names.flatmap(lambda peer: st.builds(PeerRemove, peer=st.just(peer), replacements=_replacements(peer))),
)


@settings(max_examples=300)
@given(entries)
def test_every_entry_round_trips_canonically(entry):
    data = encode_entry(entry)
    decoded = decode_entry(data)
    assert decoded == entry
    assert getattr(decoded, "config", None) == getattr(entry, "config", None)  # config has eq, not repr
    assert encode_entry(decoded) == data
    assert data[0] == 1 and data[1] == entry.kind


def test_config_blob_is_carried_byte_for_byte():
    raw = b'{ "name" : "ORDERS",\n  "subjects": ["orders.>"], "x": 1.50 }'  # odd spacing, a float
    entry = CreateStream(name="ORDERS", peers=("n1",), created_ns=5, required_level=0, config=raw)
    assert decode_entry(encode_entry(entry)).config == raw


def _assert_rejected_or_canonical(data: bytes) -> None:
    try:
        entry = decode_entry(data)
    except MalformedMetaEntry as error:
        assert error.err_code == 20300 and error.description.startswith("meta entry")
        return
    assert encode_entry(entry) == data


@settings(max_examples=400)
@given(st.binary(max_size=200))
def test_random_bytes_never_escape_as_another_error(data):
    _assert_rejected_or_canonical(data)


@settings(max_examples=60)
@given(entries, st.data())
def test_mutations_and_truncations_of_valid_entries(entry, data):
    encoded = encode_entry(entry)
    position = data.draw(st.integers(0, len(encoded) - 1))
    flipped = bytearray(encoded)
    flipped[position] ^= data.draw(st.integers(1, 255))
    _assert_rejected_or_canonical(bytes(flipped))
    _assert_rejected_or_canonical(encoded[:position])
    with pytest.raises(MalformedMetaEntry, match="trailing"):
        decode_entry(encoded + b"\x00")


def _raw_entry(kind: int, doc: bytes | dict, blobs: list[bytes] = (), version: int = 1) -> bytes:
    """An entry built by hand, bypassing `encode_entry`'s checks."""
    body = doc if isinstance(doc, bytes) else json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    parts = [bytes((version, kind)), struct.pack("<I", len(body)), body, struct.pack("<I", len(blobs))]
    for blob in blobs:
        parts += [struct.pack("<I", len(blob)), blob]
    return b"".join(parts)


GOOD_CREATE = {"name": "S", "peers": ["n1"], "created_ns": 1, "required_level": 0}


@pytest.mark.parametrize(("data", "why"), [
    (b"", "truncated"),
    (_raw_entry(1, GOOD_CREATE, [b"{}"], version=2), "format version 2"),
    (_raw_entry(99, {}, []), "unknown entry kind 99"),
    (_raw_entry(1, GOOD_CREATE, []), "config blob"),
    (_raw_entry(3, {"name": "S"}, [b"{}"]), "config blob"),
    (_raw_entry(1, {**GOOD_CREATE, "config": "x"}, [b"{}"]), "config blob"),
    (_raw_entry(1, b'{"name":"S", "peers":["n1"],"created_ns":1,"required_level":0}', [b"{}"]), "canonical"),
    (_raw_entry(1, b'{"name":"S","name":"S","peers":["n1"],"created_ns":1,"required_level":0}', [b"{}"]),
     "canonical"),
    (_raw_entry(1, b"[1,2]", [b"{}"]), "not an object"),
    (_raw_entry(1, b"\xff\xfe", [b"{}"]), "invalid JSON"),
    (_raw_entry(1, b"[" * 100_000 + b"]" * 100_000, [b"{}"]), "invalid JSON"),
    (_raw_entry(1, {k: v for k, v in GOOD_CREATE.items() if k != "created_ns"}, [b"{}"]), "created_ns"),
    (_raw_entry(1, {**GOOD_CREATE, "extra": 1}, [b"{}"]), "unknown field"),
    (_raw_entry(1, {**GOOD_CREATE, "created_ns": True}, [b"{}"]), "created_ns"),
    (_raw_entry(1, {**GOOD_CREATE, "created_ns": 1.0}, [b"{}"]), "created_ns"),
    (_raw_entry(1, {**GOOD_CREATE, "created_ns": -1}, [b"{}"]), "negative"),
    (_raw_entry(1, {**GOOD_CREATE, "required_level": 1 << 40}, [b"{}"]), "out of range"),
    (_raw_entry(1, {**GOOD_CREATE, "name": "a.b"}, [b"{}"]), "stream name"),
    (_raw_entry(1, {**GOOD_CREATE, "peers": []}, [b"{}"]), "1 to 5 peers"),
    (_raw_entry(1, {**GOOD_CREATE, "peers": ["n1", "n1"]}, [b"{}"]), "not distinct"),
    (_raw_entry(1, {**GOOD_CREATE, "peers": ["n1", ""]}, [b"{}"]), "peer id is required"),
    (_raw_entry(6, {"peer": "n1", "cluster": None}, []), "canonical"),
    (_raw_entry(5, {"stream": "S", "name": "c 1"}, []), "consumer name"),
    (_raw_entry(6, {"peer": "n1", "cluster": None, "tags": ["az:1", "a b"]}, []), "tag can not contain"),
    (_raw_entry(7, {"peer": "n1", "replacements": [
        {"stream": "S", "old_peers": ["n1"], "new_peers": ["n1"]}]}, []), "removed peer"),
    (_raw_entry(1, GOOD_CREATE, [b"{}"])[:-1], "truncated"),
])
def test_malformed_entries_are_named(data, why):
    with pytest.raises(MalformedMetaEntry, match=why):
        decode_entry(data)


def test_hand_built_canonical_entry_decodes():
    assert decode_entry(_raw_entry(1, GOOD_CREATE, [b"{}"])) == CreateStream(
        name="S", peers=("n1",), created_ns=1, required_level=0, config=b"{}")


def test_kind_numbers_are_durable():
    assert {k.name: int(k) for k in EntryKind} == {
        "CREATE_STREAM": 1, "UPDATE_STREAM": 2, "DELETE_STREAM": 3, "CREATE_CONSUMER": 4,
        "DELETE_CONSUMER": 5, "PEER_ADD": 6, "PEER_REMOVE": 7, "PEER_SEEN": 8, "SERVER_READMIT": 9}


def test_encoding_an_invalid_entry_is_a_bug():
    with pytest.raises(InvariantViolation):
        encode_entry(CreateStream(name="a b", peers=("n1",), created_ns=0, required_level=0))
    with pytest.raises(InvariantViolation):
        encode_entry(PeerRemove(peer="n1", replacements=(
            Replacement(stream="S", old_peers=("n1",), new_peers=("n2",)),
            Replacement(stream="S", old_peers=("n1",), new_peers=("n3",)))))


def test_wire_pack_is_the_documented_layout():
    document = b'{"a":[1,2],"b":1}'  # sorted keys, no spaces
    assert pack({"b": 1, "a": [1, 2]}, [b"xy"]) == (
        struct.pack("<I", len(document)) + document + struct.pack("<I", 1) + struct.pack("<I", 2) + b"xy")
