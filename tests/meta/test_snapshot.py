"""Meta snapshots: canonical bytes, restore equality, digest stability, and strict decoding.

Method: Hypothesis drives a leader with random requests (creates, updates, deletes, consumers, peer
add/remove — many of them refused); every accepted entry is also applied to a follower. After the run
the leader's and follower's snapshots must be byte-identical, a machine restored from the snapshot must
answer every query the same and re-encode to the same bytes, and both must keep agreeing when more
entries are applied. Corrupt and non-canonical snapshots must be refused without touching the state.
"""

from __future__ import annotations

import struct

import hypothesis.strategies as st
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from meta_helpers import NODES5, commit, config, create, new_cluster

from jsraft.errors import JsraftError
from jsraft.meta import MalformedMetaSnapshot, MetaStateMachine
from jsraft.meta.wire import pack

STREAMS = ["A", "B", "C", "D"]
SUBJECTS = ["a", "b.*", "b.x", "c.>", "d"]

_creates = st.tuples(st.just("create"), st.sampled_from(STREAMS),
                     st.lists(st.sampled_from(SUBJECTS), max_size=2, unique=True), st.integers(1, 3))
ops = st.lists(st.one_of(
    _creates, _creates, _creates,  # weighted: most other requests need a stream to exist
    st.tuples(st.just("update"), st.sampled_from(STREAMS), st.lists(st.sampled_from(SUBJECTS), max_size=2,
                                                                     unique=True), st.integers(1, 5)),
    st.tuples(st.just("delete"), st.sampled_from(STREAMS)),
    st.tuples(st.just("consumer"), st.sampled_from(STREAMS), st.sampled_from(["c1", "c2"])),
    st.tuples(st.just("consumer"), st.sampled_from(STREAMS), st.sampled_from(["c1", "c2"])),
    st.tuples(st.just("unconsume"), st.sampled_from(STREAMS), st.sampled_from(["c1", "c2"])),
    st.tuples(st.just("peer_remove"), st.sampled_from(NODES5)),
    st.tuples(st.just("peer_add"), st.sampled_from(NODES5 + ("n6",))),
), max_size=25)


def _request(machine: MetaStateMachine, op: tuple, step: int):
    online = set(NODES5) | {"n6"}
    kind, *args = op
    if kind in ("create", "update"):
        name, subjects, replicas = args
        body = config(name, subjects=subjects, num_replicas=replicas) if subjects else config(name)
        if kind == "create":
            return machine.propose_create_stream(name, body, now_ns=step, online=online)
        return machine.propose_update_stream(name, body, online=online)
    if kind == "delete":
        return machine.propose_delete_stream(args[0])
    if kind == "consumer":
        return machine.propose_create_consumer(args[0], args[1], b'{"ack_policy":"explicit"}', now_ns=step)
    if kind == "unconsume":
        return machine.propose_delete_consumer(*args)
    if kind == "peer_remove":
        return machine.propose_peer_remove(args[0], online=online)
    return machine.propose_peer_add(args[0], tags=("t",))


def _run(script) -> tuple[MetaStateMachine, MetaStateMachine]:
    leader, follower = new_cluster(NODES5), new_cluster(NODES5)
    for step, op in enumerate(script):
        try:
            proposal = _request(leader, op, step)
        except JsraftError:
            continue
        if proposal.data is not None and not proposal.in_flight:
            index = leader.applied_index + 1
            assert leader.apply(index, proposal.data) == follower.apply(index, proposal.data)
    return leader, follower


def _queries(machine: MetaStateMachine):
    return (machine.streams(), machine.names(), machine.offline(), machine.peers(), machine.applied_index,
            [machine.consumers(name) for name in machine.names()])


@settings(max_examples=60, deadline=None)
@given(ops)
def test_replicas_agree_and_snapshots_restore_exactly(script):
    leader, follower = _run(script)
    snapshot = leader.snapshot()
    assert follower.snapshot() == snapshot and follower.digest() == leader.digest()
    restored = MetaStateMachine()
    restored.restore(snapshot)
    assert restored.snapshot() == snapshot and restored.digest() == leader.digest()
    assert _queries(restored) == _queries(leader)
    # The restored replica keeps agreeing with the one that applied the log.
    proposal = leader.propose_peer_add("n7")
    for machine in (leader, restored):
        commit(machine, proposal)
    assert restored.snapshot() == leader.snapshot()


def test_digest_is_stable_and_follows_the_state():
    machine = new_cluster()
    create(machine, "S", subjects=["s"])
    digest = machine.digest()
    other = new_cluster()
    create(other, "S", subjects=["s"])
    assert other.digest() == digest  # same history, same digest: stable across machines and runs
    commit(machine, machine.propose_peer_add("n9"))
    assert machine.digest() != digest


def test_a_refused_entry_moves_the_index_not_the_digest():
    a, b = new_cluster(), new_cluster()
    create(a, "S", subjects=["s"])
    create(b, "S", subjects=["s"])
    # An entry from another leader that overlaps "s": refused when applied.
    stale = new_cluster().propose_create_stream("U", config("U", subjects=["*"]), now_ns=1, online=set(NODES5))
    assert commit(b, stale).error.err_code == 10065
    assert b.applied_index == a.applied_index + 1
    assert b.digest() == a.digest() and b.snapshot() != a.snapshot()


def test_empty_state_round_trips():
    machine = MetaStateMachine()
    restored = MetaStateMachine()
    restored.restore(machine.snapshot())
    assert restored.snapshot() == machine.snapshot() and restored.names() == []


def _frame(doc: dict, blobs: list[bytes], *, index: int = 9, version: int = 1, magic: bytes = b"JSMS") -> bytes:
    body = magic + bytes((version,)) + struct.pack("<Q", index) + pack(doc, blobs)
    return body + struct.pack("<I", crc32c(body))


_STREAM = {"name": "S", "peers": ["n1"], "created_ns": 0, "created_index": 3, "required_level": 0, "config_index": 3, "peers_index": 3,
           "consumers": []}


@pytest.mark.parametrize(("data", "why"), [
    (b"", "shorter than the frame"),
    (_frame({"peers": [], "streams": []}, [], magic=b"XXXX"), "bad magic"),
    (_frame({"peers": [], "streams": []}, [], version=3), "format version 3"),
    # Version 2 only when there are server records: an empty list is written as version 1.
    (_frame({"peers": [], "servers": [], "streams": []}, [], version=2), "canonical"),
    (_frame({"peers": [], "servers": [{"peer": "n1", "removed": False, "storage_uuid": ""}], "streams": []}, [],
            version=2), "storage uuid is required"),
    (_frame({"peers": [], "servers": [{"peer": "n1", "removed": False, "storage_uuid": "u"},
                                      {"peer": "n1", "removed": True, "storage_uuid": "u"}], "streams": []}, [],
            version=2), "listed both as a member and as removed"),
    (_frame({"peers": [], "streams": [_STREAM]}, []), "config blobs"),
    (_frame({"peers": [], "streams": [_STREAM, _STREAM]}, [b"{}", b"{}"]), "canonical order"),
    (_frame({"peers": [], "streams": [{**_STREAM, "name": "B"}, {**_STREAM, "name": "A"}]}, [b"{}", b"{}"]),
     "canonical order"),
    (_frame({"peers": [], "streams": [{**_STREAM, "created_index": 10}]}, [b"{}"]), "created_index"),
    (_frame({"peers": [], "streams": [{**_STREAM, "peers": ["n1", "n1"]}]}, [b"{}"]), "not distinct"),
    (_frame({"peers": [{"peer": "a b", "cluster": None, "tags": []}], "streams": []}, []), "peer id"),
    (_frame({"peers": [], "streams": [], "extra": 1}, []), "unknown field"),
    (_frame({"peers": []}, []), "streams"),
])
def test_malformed_snapshots_are_refused_and_change_nothing(data, why):
    machine = new_cluster()
    create(machine, "KEEP")
    before = machine.snapshot()
    with pytest.raises(MalformedMetaSnapshot, match=why):
        machine.restore(data)
    assert machine.snapshot() == before


def test_every_bit_flip_is_caught():
    machine = new_cluster()
    create(machine, "S", subjects=["s"])
    commit(machine, machine.propose_create_consumer("S", "c", b"{}", now_ns=1))
    snapshot = machine.snapshot()
    for position in range(0, len(snapshot), 7):
        flipped = bytearray(snapshot)
        flipped[position] ^= 0x10
        with pytest.raises(MalformedMetaSnapshot):
            MetaStateMachine().restore(bytes(flipped))


def test_hand_built_canonical_snapshot_restores():
    machine = MetaStateMachine()
    machine.restore(_frame({"peers": [], "streams": [_STREAM]}, [b'{"name":"S"}']))
    assert machine.stream("S").group == "S-S-3" and machine.applied_index == 9
