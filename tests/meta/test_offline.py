"""Offline assets (DESIGN §9): loaded but not started, raw JSON kept, subjects guarded, deletable only.

Method: entries that a newer build would write — a create whose `required_level` is above this
build's `API_LEVEL`, or whose raw config has a field this build does not know — are applied directly
(as a follower applies a newer leader's entries). Each offline property is then checked through the
machine's queries, its leader-side validators, apply of further entries, and a snapshot round trip; a
node at a higher API level restoring the same snapshot must load the asset online.
"""

from __future__ import annotations

import json

import pytest
from meta_helpers import NODES5, commit, config, create, new_cluster

from jsraft.jsapi import API_LEVEL, REQUIRED_LEVEL_KEY, parse_stream_config, served_metadata
from jsraft.meta import (
    ConsumerOffline,
    CreateConsumer,
    CreateStream,
    MetaStateMachine,
    RequiredApiLevel,
    StreamOffline,
    StreamSubjectOverlap,
    UpdateStream,
    encode_entry,
    load_stream,
)

ONLINE = set(NODES5)
NEWER_RAW = b'{"name":"NEW",\n "subjects":["new.>"],  "allow_msg_ttl":true, "x_future":{"a":[1,2.5]}}'


def _apply(machine: MetaStateMachine, entry):
    return machine.apply(machine.applied_index + 1, encode_entry(entry))


def _with_offline(reason: str) -> MetaStateMachine:
    machine = new_cluster()
    if reason == "level":
        entry = CreateStream(name="NEW", peers=("n1",), created_ns=1, required_level=API_LEVEL + 1,
                             config=b'{"name":"NEW","subjects":["new.>"]}')
    else:
        entry = CreateStream(name="NEW", peers=("n1",), created_ns=1, required_level=API_LEVEL, config=NEWER_RAW)
    assert _apply(machine, entry).ok
    return machine


@pytest.fixture(params=["level", "unknown_field"])
def offline(request) -> MetaStateMachine:
    return _with_offline(request.param)


def test_loaded_offline_with_a_reason_and_listed(offline):
    stream = offline.stream("NEW")
    assert stream.offline and stream.config is None
    reason = offline.offline()["NEW"]
    assert reason.startswith("unsupported - ")
    assert ("required API level" in reason) or ("unknown field" in reason and "x_future" in reason)
    assert offline.names() == ["NEW"] and offline.missing() == ["NEW"]
    assert offline.assignments_for("n1") == [stream] and offline.names_for("n1") == {"NEW"}


def test_raw_json_is_re_emitted_byte_for_byte():
    machine = _with_offline("unknown_field")
    assert machine.stream("NEW").config_raw == NEWER_RAW
    snapshot = machine.snapshot()
    assert NEWER_RAW in snapshot
    restored = MetaStateMachine()
    restored.restore(snapshot)
    assert restored.stream("NEW").config_raw == NEWER_RAW and restored.snapshot() == snapshot


def test_subjects_stay_guarded(offline):
    with pytest.raises(StreamSubjectOverlap):
        offline.propose_create_stream("OTHER", config("OTHER", subjects=["new.x"]), now_ns=2, online=ONLINE)
    stale = new_cluster().propose_create_stream("OTHER", config("OTHER", subjects=["new.y"]), now_ns=2,
                                                online=ONLINE)
    assert commit(offline, stale).error.err_code == 10065
    create(offline, "OTHER", subjects=["old.>"])


def test_every_change_but_delete_is_refused_with_10194(offline):
    with pytest.raises(StreamOffline) as error:
        offline.propose_update_stream("NEW", config("NEW", subjects=["new.>"]), online=ONLINE)
    assert (error.value.err_code, error.value.http_code) == (10194, 500)
    assert error.value.description == f"stream is offline: {offline.offline()['NEW']}"
    with pytest.raises(StreamOffline):
        offline.propose_create_consumer("NEW", "c", b"{}", now_ns=1)
    assert offline.pending_count == 0
    assert commit(offline, offline.propose_delete_stream("NEW")).ok
    assert offline.names() == [] and offline.offline() == {}


def test_a_newer_leaders_changes_are_recorded_as_on_every_replica(offline):
    """Refusing is the leader's job: apply on this (older) replica records what a newer leader decided,
    exactly as the newer replicas do, or the replicated state would diverge between builds."""
    newer = MetaStateMachine(api_level=API_LEVEL + 1)
    newer.restore(offline.snapshot())
    raw = b'{"name":"NEW","subjects":["new.>"],"x_future":2}'
    update = UpdateStream(name="NEW", peers=("n1", "n2"), required_level=API_LEVEL + 1, config=raw)
    consumer = CreateConsumer(stream="NEW", name="c", created_ns=1, required_level=0, config=b"{}")
    for machine in (offline, newer):
        assert _apply(machine, update).ok and _apply(machine, consumer).ok
    assert offline.stream("NEW").config_raw == raw and offline.stream("NEW").offline
    assert offline.snapshot() == newer.snapshot() and offline.digest() == newer.digest()


def test_a_newer_node_loads_the_same_snapshot_online():
    snapshot = _with_offline("level").snapshot()
    newer = MetaStateMachine(api_level=API_LEVEL + 1)
    newer.restore(snapshot)
    assert not newer.stream("NEW").offline and newer.stream("NEW").config.subjects == ("new.>",)
    assert newer.snapshot() == snapshot  # offline-ness is not part of the replicated state


def test_an_offline_consumer_takes_its_stream_offline():
    machine = new_cluster()
    create(machine, "S", subjects=["s"])
    newer = CreateConsumer(stream="S", name="c", created_ns=1, required_level=API_LEVEL + 1, config=b"{}")
    assert _apply(machine, newer).ok
    assert machine.consumer("S", "c").offline
    assert machine.offline() == {"S": f"consumer 'c' is offline: {machine.consumer('S', 'c').offline_reason}"}
    with pytest.raises(ConsumerOffline) as error:
        machine.propose_create_consumer("S", "c", b"{}", now_ns=2)
    assert error.value.err_code == 10195
    assert commit(machine, machine.propose_delete_consumer("S", "c")).ok  # deletable
    assert machine.offline() == {}


def test_lenient_subjects_of_unreadable_configs():
    def load(raw: bytes):
        return load_stream("S", raw, peers=("n1",), group="S-S-1", created_ns=0, created_index=1,
                           required_level=0)

    assert load(b"{not json").subjects == ("S",)
    deep = load(b'{"name":"S","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert deep.offline and "nested too deeply" in deep.offline_reason and deep.subjects == ("S",)
    assert load(b'{"name":"S","mirror":{"name":"M"}}').subjects == ()
    assert load(b'{"name":"S","subjects":["a", 5, "b c", "d.>"],"zz":1}').subjects == ("a", "d.>")
    assert load(b'{"name":"S","zz":1}').subjects == ("S",)
    online = load(b'{"name":"S","subjects":["a"]}')
    assert not online.offline and online.subjects == ("a",)


def test_request_level_header_is_10185():
    machine = MetaStateMachine()
    machine.check_request_level(None)
    machine.check_request_level(str(API_LEVEL))
    for value in (str(API_LEVEL + 1), "abc", "-1", ""):
        with pytest.raises(RequiredApiLevel) as error:
            machine.check_request_level(value)
        assert (error.value.err_code, error.value.http_code) == (10185, 412)


def test_served_metadata_stamps_the_level_and_drops_client_stamps():
    raw = json.dumps({"name": "S", "metadata": {"team": "a", "_nats.req.level": "7", "_nats.ver": "9.9.9",
                                                "_nats.custom": "kept"}}).encode()
    config_, _ = parse_stream_config(raw)
    served = served_metadata(config_.metadata, required_level=0, api_level=0)
    # nats-server replaces the versioning keys only: any other `_nats.` key is the user's.
    assert served == {"team": "a", "_nats.custom": "kept", REQUIRED_LEVEL_KEY: "0", "_nats.ver": "2.10.0",
                      "_nats.level": "0"}
