"""The meta snapshot format, byte for byte: today's encoder and decoder against the record-based ones they
replaced (`snapshot_reference`, commit 8255a82's code).

Method: the old code is kept, not only golden bytes from it, so that Hypothesis can put any state through
both encoders — strings outside ASCII and lone surrogates (escaped as `json.dumps` escapes them), `None`
clusters, ints past 64 bits, a server both seen and removed — and any damaged document through both
decoders; golden bytes pin the format against the two drifting together. Then:
  1. random states: both encoders write the same bytes and the same digest;
  2. golden bytes written by that code (tests/meta/golden/, the histories in `_golden_machine`) decode and
     re-encode to themselves, and replaying the same history today writes them again;
  3. random damage to real snapshot documents (a field dropped, added or of another JSON kind, a record
     duplicated or moved, the version or the blob count changed), framed with a good CRC: `decode_state`
     and the reference both accept, with the same state, or both refuse, with the same message; and the
     document check's fast path accepts exactly what the converter accepts.
"""

from __future__ import annotations

import copy
import pathlib
import struct
from typing import Any

import hypothesis.strategies as st
import pytest
import snapshot_reference as reference
from crc32c import crc32c
from hypothesis import given, settings
from meta_helpers import NODES5, commit, config, create, new_cluster

from jsraft.jsapi import API_LEVEL
from jsraft.meta import CreateStream, MalformedMetaSnapshot, MetaStateMachine, encode_entry, snapshot_document, wire
from jsraft.meta.assignment import ConsumerAssignment, StreamAssignment
from jsraft.meta.placement import PeerInfo
from jsraft.meta.snapshot import decode_state, encode_state, state_digest
from jsraft.meta.state import MetaState

GOLDEN = pathlib.Path(__file__).parent / "golden"


# --- 1. Random states: the same bytes and digests ---------------------------------------------------------

_text = st.text(st.characters(exclude_categories=()), max_size=6)  # surrogates included
_ints = st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, 2**63 - 1, 2**64])


@st.composite
def _states(draw) -> MetaState:
    state = MetaState()
    for peer in draw(st.lists(_text, max_size=4, unique=True)):
        state.peers[peer] = PeerInfo(cluster=draw(st.none() | _text), tags=tuple(draw(st.lists(_text, max_size=3))))
    for name in draw(st.lists(_text, max_size=4, unique=True)):
        state.streams[name] = StreamAssignment(
            name=name, config_raw=draw(st.binary(max_size=12)), config=None, subjects=(),
            peers=tuple(draw(st.lists(_text, max_size=3))), group="g", created_ns=draw(_ints),
            created_index=draw(_ints), required_level=draw(_ints), config_index=draw(_ints),
            peers_index=draw(_ints))
        state.consumers[name] = {
            consumer: ConsumerAssignment(stream=name, name=consumer, config_raw=draw(st.binary(max_size=12)),
                                         created_ns=draw(_ints), created_index=draw(_ints),
                                         required_level=draw(_ints))
            for consumer in draw(st.lists(_text, max_size=3, unique=True))}
    state.storage_uuids = draw(st.dictionaries(_text, _text, max_size=3))
    state.removed_servers = draw(st.dictionaries(_text, _text, max_size=3))  # may share a peer: still encoded
    state.applied_index = draw(st.integers(0, 2**64 - 1))
    return state


@settings(max_examples=300)
@given(_states())
def test_random_states_encode_as_the_record_based_encoder_did(state):
    assert encode_state(state) == reference.encode_state(state)
    assert state_digest(state) == reference.state_digest(state)


# --- 2. Golden bytes from before the change --------------------------------------------------------------


def _golden_machine(version: int) -> MetaStateMachine:
    """The history behind tests/meta/golden/meta_snapshot_v<version>.bin (written at commit 8255a82)."""
    online = set(NODES5)
    machine = new_cluster(NODES5, tags={"n1": ("ssd", "eu-west"), "n2": ("ssd",), "n4": ("ñ",)},
                          clusters={"n1": "east", "n2": "east", "n3": "wëst"})
    if version == 2:
        for peer in NODES5:
            commit(machine, machine.propose_peer_seen(peer, f"uuid-{peer}"))
    create(machine, "ORDERS", subjects=["orders.>"], num_replicas=3)
    create(machine, "Ström", subjects=["ström.*"], num_replicas=1)
    create(machine, "KV_cfg", subjects=["$KV.cfg.>"], num_replicas=3, max_msgs_per_subject=1,
           allow_rollup_hdrs=True, deny_delete=True, allow_direct=True)
    create(machine, "COUNT", subjects=["count.>"], allow_msg_counter=True)
    commit(machine, machine.propose_update_stream(
        "ORDERS", config("ORDERS", subjects=["orders.>", "returns.>"], num_replicas=3), online=online))
    for stream, name in (("ORDERS", "worker"), ("ORDERS", "audit"), ("Ström", "ç"), ("KV_cfg", "w")):
        body = b'{"durable_name":"%s","ack_policy":"explicit"}' % name.encode()
        assert commit(machine, machine.propose_create_consumer(stream, name, body, now_ns=7)).ok
    peer = machine.stream("KV_cfg").peers[1]
    assert commit(machine, machine.propose_stream_peer_remove("KV_cfg", peer, online=online)).ok
    offline = CreateStream(name="NEW", peers=("n2",), created_ns=1, required_level=API_LEVEL + 1,
                           config=b'{"name":"NEW",\n "subjects":["new.>"], "x_future":{"a":[1,2.5]}}')
    assert machine.apply(machine.applied_index + 1, encode_entry(offline)).ok
    if version == 2:
        assert commit(machine, machine.propose_peer_remove("n5", online=online)).ok
        commit(machine, machine.propose_peer_add("n6"))
        assert commit(machine, machine.propose_peer_remove("n6", online=online)).ok  # never seen: ""
    return machine


@pytest.mark.parametrize("version", [1, 2])
def test_golden_snapshots_decode_and_are_written_again(version):
    golden = (GOLDEN / f"meta_snapshot_v{version}.bin").read_bytes()
    assert golden[4] == version
    restored = MetaStateMachine()
    restored.restore(golden)
    assert restored.snapshot() == golden
    machine = _golden_machine(version)
    assert machine.snapshot() == golden and machine.digest() == restored.digest()


# --- 3. Damaged documents: refused as before, in the same words -----------------------------------------


def _frame(version: int, doc: dict[str, Any], blobs: list[bytes], applied_index: int) -> bytes:
    body = b"JSMS" + bytes((version,)) + struct.pack("<Q", applied_index) + wire.pack(doc, blobs)
    return body + struct.pack("<I", crc32c(body))


def _unframe(data: bytes) -> tuple[int, dict[str, Any], list[bytes], int]:
    reader = wire.Reader(data[:-4], MalformedMetaSnapshot, "meta snapshot")
    reader.take(4)
    version, applied_index = reader.u8(), reader.u64()
    doc, blobs = wire.unpack(reader)
    return version, doc, blobs, applied_index


_BASES = [_unframe((GOLDEN / f"meta_snapshot_v{v}.bin").read_bytes()) for v in (1, 2)]
_BASES.append((1, {"peers": [], "streams": []}, [], 0))
_FIELDS = ["extra", *reference.FIELDS]
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**64) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=3) | st.sampled_from(["n1", "n2", "S", "ç", "", "a b"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(_FIELDS), inner, max_size=2),
    max_leaves=4)


def _like(value: Any) -> st.SearchStrategy:
    """Another value of `value`'s JSON kind, often one a document check must look at twice: a negative,
    zero, or past-`applied_index` number, an empty, invalid or repeated name, a list reordered or cut."""
    if isinstance(value, bool) or value is None:
        return st.booleans() | st.none()
    if isinstance(value, int):
        return st.integers(-2, 30) | st.just(2**64)
    if isinstance(value, str):
        return st.sampled_from(["", "a b", "a.b", "n1", "n2", "n6", "C", "KV_cfg", "ORDERS", "ç", "z" * 256])
    if isinstance(value, list):
        return st.permutations(value) | st.lists(st.sampled_from(value), max_size=3) if value else st.just([])
    return _json_values


def _containers(value: Any, path: tuple = ()) -> list[tuple]:
    """The path of every dict and list inside `value` (itself included)."""
    found = [path] if isinstance(value, (dict, list)) else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found += _containers(item, path + (key,))
    return found


def _at(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def _damage(data, doc: dict[str, Any]) -> None:
    """One random change at a random place of `doc`, in place."""
    target = _at(doc, data.draw(st.sampled_from(_containers(doc))))
    keys = list(target) if isinstance(target, dict) else list(range(len(target)))
    kind = data.draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "copy", "swap"]))
    if isinstance(target, dict) and kind in ("copy", "swap"):
        kind = "replace"
    if kind == "add" or not keys:
        key = data.draw(st.sampled_from(_FIELDS)) if isinstance(target, dict) else len(target)
        if isinstance(target, dict):
            target[key] = data.draw(_json_values)
        else:
            target.append(data.draw(_json_values))
        return
    key = data.draw(st.sampled_from(keys))
    if kind == "replace":
        target[key] = data.draw(_like(target[key]) | _json_values)
    elif kind == "delete":
        del target[key]
    elif kind == "copy":
        target.insert(data.draw(st.integers(0, len(target))), target[key])
    else:
        other = data.draw(st.sampled_from(keys))
        target[key], target[other] = target[other], target[key]


# One value of every JSON kind, and the ones a lax check confuses: a bool for an int, 1.0 for 1, "1".
_EVERY_KIND = [None, True, False, 0, 1, -1, 1.0, "", "1", [], ["n1"], [1], {}, {"name": "n1"}]


def test_every_field_dropped_retyped_or_joined_by_another_is_judged_as_the_converter_judges_it():
    """Exhaustive over the golden documents' records: `check_document` against the reference's checks."""
    for version, base, _, _ in _BASES:
        for path in _containers(base):
            if not isinstance(_at(base, path), dict):
                continue
            variants = [("extra", 1)] + [(key, value) for key in _at(base, path) for value in [..., *_EVERY_KIND]]
            for key, value in variants:
                doc = copy.deepcopy(base)
                if value is ...:
                    del _at(doc, path)[key]
                else:
                    _at(doc, path)[key] = value
                expected = reference.check_document(doc, version)
                assert snapshot_document._exact_shape(doc, version) == (expected is None), (path, key, value)
                assert _check_document(doc, version) == expected, (path, key, value)


def _check_document(doc: dict[str, Any], version: int) -> str | None:
    try:
        snapshot_document.check_document(doc, version, wire.Reader(b"", MalformedMetaSnapshot, "meta snapshot").fail)
    except MalformedMetaSnapshot as error:
        return str(error)
    return None


def _outcome(decode, data: bytes) -> tuple[str, Any]:
    try:
        state = decode(data)
    except MalformedMetaSnapshot as error:
        return "refused", str(error)
    return "accepted", (encode_state(state), dict(state.streams), state.consumers, state.peers, state.storage_uuids,
                        state.removed_servers, state.applied_index)


def _reference_outcome(data: bytes) -> tuple[str, Any]:
    """The reference's verdict, but for the one document it let through that `MetaState.check` then crashed
    on (a server listed as a member and as removed), which `decode_state` now refuses."""
    verdict, state = _outcome(reference.decode_state, data)
    twice = sorted(set(state[4]) & set(state[5])) if verdict == "accepted" else []
    if twice:
        return "refused", f"meta snapshot: server {twice[0]!r} is listed both as a member and as removed"
    return verdict, state


@settings(max_examples=400)
@given(st.data())
def test_damaged_documents_are_judged_as_the_reference_judged_them(data):
    version, doc, blobs, applied_index = copy.deepcopy(data.draw(st.sampled_from(_BASES)))
    for _ in range(data.draw(st.integers(1, 3))):
        _damage(data, doc)
    if data.draw(st.integers(0, 9)) == 0:
        version = 3 - version
    if blobs and data.draw(st.integers(0, 9)) == 0:
        blobs.pop()
    assert snapshot_document._exact_shape(doc, version) == (reference.check_document(doc, version) is None), doc
    frame = _frame(version, doc, blobs, applied_index)
    assert _outcome(lambda b: decode_state(b, api_level=API_LEVEL), frame) == _reference_outcome(frame)
