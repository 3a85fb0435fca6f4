"""`stream_lookup`: how a node answers a request for a stream it has no replica of open, and which stream
takes a subject — the parts the services get instead of `Node`.

Method: a real `MetaStateMachine` with streams committed, replaced and deleted by `CreateStream`,
`UpdateStream` and `DeleteStream` entries applied at the next index, as the meta log would deliver them,
and its state replaced by `restore` from another machine's `snapshot()`; the replicas dict stands for the
`StreamManager`'s, with a plain object as the one open replica. No node, no trio: these are the
synchronous rules alone. The subject index (`StreamSubjects`, invariant 3) is compared with the scan it
replaces (`stream_for_subject_scan`): by example for each kind of change, wildcard patterns and
wildcard-token publish subjects, then by a Hypothesis property over random histories of changes to two
states, this node's and another's that a restore installs here, with lookups after every step (random
subjects over a small token alphabet with `*`, `>` and empty tokens, and subjects every pattern drawn so
far matches or just misses): every lookup must give the scan's answer or its error, word for word, and
`check()` must find the index holding exactly the meta state's subjects.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.errors import StreamNotFound
from jsraft.jsapi import API_LEVEL
from jsraft.meta import CreateStream, DeleteStream, MetaStateMachine, UpdateStream, encode_entry
from jsraft.meta import state as meta_state
from jsraft.raft import NotLeader
from jsraft.server.groups.stream_lookup import (LocalStreams, StreamSubjects, require_stream,
                                                stream_for_subject_scan)


def _raw(name: str, subjects: list[str]) -> bytes:
    return json.dumps({"name": name, "subjects": subjects}).encode()


def _create(machine: MetaStateMachine, name: str, subjects: list[str]) -> bool:
    entry = CreateStream(name=name, peers=("n1",), created_ns=1, required_level=API_LEVEL,
                         config=_raw(name, subjects))
    return machine.apply(machine.applied_index + 1, encode_entry(entry)).ok


def _update(machine: MetaStateMachine, name: str, subjects: list[str]) -> bool:
    entry = UpdateStream(name=name, peers=("n1",), required_level=API_LEVEL, config=_raw(name, subjects))
    return machine.apply(machine.applied_index + 1, encode_entry(entry)).ok


def _delete(machine: MetaStateMachine, name: str) -> bool:
    return machine.apply(machine.applied_index + 1, encode_entry(DeleteStream(name=name))).ok


def _meta_with(name: str, subjects: list[str]) -> MetaStateMachine:
    machine = MetaStateMachine()
    assert _create(machine, name, subjects)
    return machine


def _answer(find, subject: str) -> str:
    """The stream found, or the error's words: what a caller of either lookup sees."""
    try:
        return find(subject)
    except StreamNotFound as error:
        return f"StreamNotFound {error.err_code}: {error}"


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
    local = LocalStreams(name="n1", replicas={}, meta=meta)
    for find in (local.stream_for_subject, lambda subject: stream_for_subject_scan(meta, subject)):
        assert find("orders.new.1") == "ORDERS"
        with pytest.raises(StreamNotFound, match=r"^no stream matches subject 'other.x'$"):
            find("other.x")


def test_the_index_follows_creates_updates_and_deletes():
    meta = MetaStateMachine()
    index = StreamSubjects(meta)
    with pytest.raises(StreamNotFound):
        index.stream_for("orders.1")  # no stream yet
    assert _create(meta, "ORDERS", ["orders.*", "returns.>"])
    assert _create(meta, "ALL", ["all.>"])
    assert index.stream_for("orders.1") == "ORDERS"
    assert index.stream_for("returns.a.b.c") == "ORDERS"
    assert index.stream_for("all.x") == "ALL"
    for missing in ("orders", "orders.1.2", "returns", "all", "other.x"):  # `*` one token, `>` one or more
        with pytest.raises(StreamNotFound):
            index.stream_for(missing)
    assert index.stream_for("orders.1") == "ORDERS"  # a second sight: `Sublist` caches this subject now

    assert _update(meta, "ORDERS", ["invoices.>"])  # subjects changed: the cached answer must not survive
    with pytest.raises(StreamNotFound):
        index.stream_for("orders.1")
    assert index.stream_for("invoices.2024.1") == "ORDERS"
    assert _update(meta, "ORDERS", ["invoices.>"])  # the same subjects: nothing to change
    assert index.stream_for("invoices.2024.1") == "ORDERS"

    assert _delete(meta, "ORDERS")
    with pytest.raises(StreamNotFound):
        index.stream_for("invoices.2024.1")
    assert _create(meta, "INVOICES", ["invoices.*.*"])  # another stream takes the subjects
    assert index.stream_for("invoices.2024.1") == "INVOICES"
    index.check()


def test_wildcard_tokens_in_a_publish_subject_are_taken_as_the_scan_takes_them():
    """`publish("a.*")` was routed to the stream of `a.*` (its patterns match the literal token `*`) and
    stored there; `*.x` reached no stream. The index keeps both answers."""
    meta = MetaStateMachine()
    assert _create(meta, "STAR", ["a.*"])
    assert _create(meta, "FULL", ["b.>"])
    index = StreamSubjects(meta)
    for subject in ("a.*", "a.>", "b.*", "b.>", "b.*.>", "*.x", ">", "*", "a..", "", "a.*.c"):
        assert _answer(index.stream_for, subject) == _answer(lambda s: stream_for_subject_scan(meta, s), subject)
    assert index.stream_for("a.*") == "STAR" and index.stream_for("b.>") == "FULL"


def test_the_index_follows_a_snapshot_restore():
    meta = MetaStateMachine()
    assert _create(meta, "OLD", ["old.>"])
    assert _create(meta, "KEPT", ["kept.*"])
    index = StreamSubjects(meta)
    assert index.stream_for("old.x") == "OLD"  # built before the restore

    other = MetaStateMachine()  # the leader's state: OLD deleted, KEPT changed, NEW created
    assert _create(other, "KEPT", ["kept.>"])
    assert _create(other, "NEW", ["old.>"])
    meta.restore(other.snapshot())
    assert index.stream_for("old.x") == "NEW"
    assert index.stream_for("kept.a.b") == "KEPT"
    index.check()
    meta.restore(MetaStateMachine().snapshot())  # an empty state
    with pytest.raises(StreamNotFound):
        index.stream_for("kept.a")
    index.check()


def test_a_lookup_further_behind_than_the_journal_looks_at_every_stream(monkeypatch):
    monkeypatch.setattr(meta_state, "JOURNAL_KEPT", 2)
    meta = MetaStateMachine()
    index = StreamSubjects(meta)
    index.check()
    for i in range(10):  # far more changes than the journal keeps
        assert _create(meta, f"S{i}", [f"s{i}.>"])
    assert _delete(meta, "S3")
    assert _update(meta, "S4", ["s3.>"])
    assert index.stream_for("s3.x") == "S4"
    with pytest.raises(StreamNotFound):
        index.stream_for("s4.x")
    index.check()


# --- The index agrees with the scan: a property -----------------------------------------------------

_PATTERN_TOKENS = st.sampled_from(["a", "b", "c", "*"])
_PATTERN = st.builds(lambda tokens, tail: ".".join(tokens + ([">"] if tail else [])),
                     st.lists(_PATTERN_TOKENS, min_size=1, max_size=3), st.booleans())
_SUBJECT = st.lists(st.sampled_from(["a", "b", "c", "d", "*", ">", ""]), min_size=1, max_size=4).map(".".join)
_NAME = st.sampled_from(["S0", "S1", "S2", "S3", "S4"])
_ON = st.sampled_from(["here", "elsewhere"])  # this node's state, or the one a snapshot will bring
_STEP = st.one_of(
    st.tuples(st.just("create"), _ON, _NAME, st.lists(_PATTERN, min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("update"), _ON, _NAME, st.lists(_PATTERN, min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("delete"), _ON, _NAME, st.just([])),
    st.tuples(st.just("restore"), st.just("here"), st.just(""), st.just([])),  # elsewhere's state, here
    st.tuples(st.just("lookup"), st.just("here"), st.just(""), st.lists(_SUBJECT, min_size=1, max_size=4)),
)


def _instances(pattern: str) -> list[str]:
    """Subjects `pattern` matches, and one it just misses: random subjects alone rarely hit a stream."""
    literal = pattern.replace("*", "d").replace(">", "d.a")
    return [literal, literal + ".x", pattern]


@settings(max_examples=300, deadline=None)
@given(history=st.lists(_STEP, max_size=30), probes=st.lists(_SUBJECT, max_size=8))
def test_the_index_answers_what_the_scan_answers(history, probes):
    meta = MetaStateMachine()
    machines = {"here": meta, "elsewhere": MetaStateMachine()}
    index = StreamSubjects(meta)
    seen: dict[str, None] = {}  # a subject of every pattern drawn so far, in or out of the state now

    def agree(subject: str) -> None:
        assert _answer(index.stream_for, subject) == _answer(lambda s: stream_for_subject_scan(meta, s), subject)

    for op, on, name, values in history:
        if op == "create":
            _create(machines[on], name, values)  # refused (an overlap, an existing name) changes nothing
        elif op == "update":
            _update(machines[on], name, values)
        elif op == "delete":
            _delete(machines[on], name)
        elif op == "restore":
            meta.restore(machines["elsewhere"].snapshot())
        if op in ("create", "update"):
            seen.update(dict.fromkeys(subject for pattern in values for subject in _instances(pattern)))
        for subject in values if op == "lookup" else [*probes[:2], *seen]:
            agree(subject)
    index.check()
    for subject in probes:
        agree(subject)
