"""`stream_lookup`: how a node answers a request for a stream it has no replica of open, and which stream
takes a subject — the parts the services get instead of `Node`.

Method: a real `MetaStateMachine` with one stream committed (a `CreateStream` entry applied at the next
index, as the meta log would deliver it); the replicas dict stands for the `StreamManager`'s, with a
plain object as the one open replica. No node, no trio: these are the synchronous rules alone.
"""

from __future__ import annotations

import pytest

from jsraft.errors import StreamNotFound
from jsraft.jsapi import API_LEVEL
from jsraft.meta import CreateStream, MetaStateMachine, encode_entry
from jsraft.raft import NotLeader
from jsraft.server.groups.stream_lookup import LocalStreams, require_stream, stream_for_subject


def _meta_with(name: str, subjects: list[str]) -> MetaStateMachine:
    machine = MetaStateMachine()
    raw = ('{"name": "%s", "subjects": [%s]}' % (name, ", ".join(f'"{s}"' for s in subjects))).encode()
    entry = CreateStream(name=name, peers=("n1",), created_ns=1, required_level=API_LEVEL, config=raw)
    assert machine.apply(machine.applied_index + 1, encode_entry(entry)).ok
    return machine


def test_an_unknown_stream_is_not_found_unless_the_caller_saw_it_at_a_later_meta_index():
    meta = _meta_with("ORDERS", ["orders.>"])
    with pytest.raises(StreamNotFound):
        require_stream(meta, "NOPE", {})
    with pytest.raises(StreamNotFound):
        require_stream(meta, "NOPE", {"meta_index": meta.applied_index})
    with pytest.raises(NotLeader):  # the caller's meta is ahead: the create is on its way here
        require_stream(meta, "NOPE", {"meta_index": meta.applied_index + 1})
    require_stream(meta, "ORDERS", {})  # exists: returns


def test_local_streams_finds_the_open_replica_and_sees_replicas_opened_later():
    meta = _meta_with("ORDERS", ["orders.>"])
    replicas: dict[str, object] = {}
    local = LocalStreams(name="n1", replicas=replicas, meta=meta)  # type: ignore[arg-type]
    with pytest.raises(NotLeader):  # exists, not open here yet
        local.replica("ORDERS", {})
    with pytest.raises(StreamNotFound):
        local.replica("NOPE", {})
    opened = object()
    replicas["ORDERS"] = opened  # the manager's own dict, not a copy (invariant 2)
    assert local.replica("ORDERS", {}) is opened


def test_stream_for_subject_matches_the_stream_subjects():
    meta = _meta_with("ORDERS", ["orders.>"])
    assert stream_for_subject(meta, "orders.new.1") == "ORDERS"
    with pytest.raises(StreamNotFound):
        stream_for_subject(meta, "other.x")
