"""Per-message TTL (ADR-43): the `Nats-TTL` parser, the config rules, and the leader's TTL schedule.

Method: `parse_ttl` is checked on a table of values nats-server accepts and refuses. The config rules go
through `parse_stream_config` and `meta.rules.check_update` (the gateways a client's JSON passes). The
schedule is driven through a real `StreamLeader` over two replicas on both stores (`stream_kit.Group`):
publishes with `Nats-TTL` are decided at explicit times, `ttl_due(now)` is asked at explicit later
times, the DELETE entries it returns are committed on every replica, and the replicas' state tuples are
compared. A new leader built over a replica must find the same due messages from the store alone.
"""

from __future__ import annotations

import json

import pytest
from stream_kit import NOW, Group, config_json, make_machine, pub

from jsraft.errors import InvalidConfig
from jsraft.jsapi.stream_config import StreamConfig, parse_stream_config
from jsraft.meta.rules import check_update
from jsraft.stream.entries import DeleteEntry, decode_entry
from jsraft.stream.leader import StreamLeader
from jsraft.stream.ttl import TTL_NEVER, InvalidTtl, TtlSchedule, parse_ttl

SECOND = 1_000_000_000


@pytest.mark.parametrize("value, seconds", [
    ("1", 1), ("60", 60), ("5s", 5), ("1m", 60), ("1h30m", 5400), ("1.5s", 1), ("2500ms", 2),
    ("never", TTL_NEVER), (" 10 ", 10),
])
def test_ttl_values_nats_server_accepts(value, seconds):
    assert parse_ttl(value) == seconds


@pytest.mark.parametrize("value", ["0", "0s", "500ms", "-1", "-5s", "", "abc", "5x", "1.2.3s", "s", "never!"])
def test_ttl_values_nats_server_refuses(value):
    with pytest.raises(InvalidTtl):
        parse_ttl(value)


def _config(**fields) -> StreamConfig:
    return parse_stream_config(json.dumps({"name": "KV", "subjects": ["kv.>"], **fields}).encode())[0]


def test_allow_msg_ttl_is_shown_and_round_trips():
    config = _config(allow_msg_ttl=True)
    shown = config.to_json()
    assert shown["allow_msg_ttl"] is True and "subject_delete_marker_ttl" not in shown
    assert StreamConfig.from_dict(shown) == config
    assert _config().to_json()["allow_msg_ttl"] is False


@pytest.mark.parametrize("ttl_ns, words", [
    (-1, "subject delete marker TTL must not be negative"),
    (SECOND // 2, "subject delete marker TTL must be at least 1 second"),
])
def test_subject_delete_marker_ttl_rules(ttl_ns, words):
    with pytest.raises(InvalidConfig) as raised:
        _config(allow_msg_ttl=True, subject_delete_marker_ttl=ttl_ns)
    assert raised.value.err_code == 10052 and raised.value.description == words


def test_allow_msg_ttl_can_be_enabled_but_never_disabled():
    off, on = _config(), _config(allow_msg_ttl=True)
    check_update(off, on)
    with pytest.raises(InvalidConfig) as raised:
        check_update(on, off)
    assert raised.value.description == "message TTL status can not be disabled"


def _group(maker, **config) -> Group:
    raw = config_json(**config)
    return Group({"a": make_machine(maker, raw), "b": make_machine(maker, raw)}, "a")


def _codes(decision) -> list:
    return [o.error.err_code if o.error else o.seq for o in decision.outcomes]


def test_ttl_publishes_are_refused_where_nats_server_refuses_them(mem_maker):
    disabled = _group(mem_maker)
    assert _codes(disabled.leader.decide([pub("orders.a", Nats_TTL="5s")], NOW)) == [10166]
    enabled = _group(mem_maker, allow_msg_ttl=True)
    decision = enabled.leader.decide([pub("orders.a", Nats_TTL="0"), pub("orders.a", Nats_TTL="soon"),
                                      pub("orders.a", Nats_TTL="5s")], NOW)
    assert _codes(decision) == [10165, 10165, 1]  # a refused publish consumes no sequence
    assert decision.outcomes[0].error.description == "invalid per-message TTL"


def _state(machine):
    state = machine.store.state()
    return state.first_seq, state.last_seq, state.msgs, state.bytes, state.digest


def _expire(group: Group, now_ns: int) -> list[int]:
    seqs = []
    for entry in group.leader.ttl_due(now_ns):
        seqs.append(decode_entry(entry).seq)
        assert isinstance(decode_entry(entry), DeleteEntry)
        group.commit(entry)
    return seqs


def test_leader_deletes_each_message_when_its_ttl_passes_on_every_replica(maker):
    group = _group(maker, allow_msg_ttl=True, deny_delete=True)  # a KV bucket denies deletes
    group.publish([pub("orders.a", Nats_TTL="2s"), pub("orders.b", Nats_TTL="1m"), pub("orders.c"),
                   pub("orders.d", Nats_TTL="never"), pub("orders.e", Nats_TTL="1")], NOW)
    assert _expire(group, NOW + SECOND - 1) == []
    assert _expire(group, NOW + SECOND) == [5]
    assert _expire(group, NOW + 2 * SECOND) == [1]
    assert _expire(group, NOW + 59 * SECOND) == []
    assert _expire(group, NOW + 3600 * SECOND) == [2]  # never: 4 stays; 3 has no TTL
    a, b = group.machines["a"], group.machines["b"]
    assert a.store.state().msgs == 2 and _state(a) == _state(b)
    assert _expire(group, NOW + 10**6 * SECOND) == []


def test_a_new_leader_rebuilds_the_schedule_from_the_store(maker):
    group = _group(maker, allow_msg_ttl=True)
    group.publish([pub("orders.a", Nats_TTL="10s"), pub("orders.b", Nats_TTL="3s")], NOW)
    group.leader = StreamLeader(group.machines["b"])  # b takes over, knowing only its store
    group.leader_name = "b"
    assert len(group.leader.ttl_schedule) == 2
    assert _expire(group, NOW + 3 * SECOND) == [2]
    assert _expire(group, NOW + 10 * SECOND) == [1]
    assert _state(group.machines["a"]) == _state(group.machines["b"]) and group.machines["a"].store.state().msgs == 0


def test_a_due_delete_lost_with_its_proposal_is_offered_again_but_never_twice_once_applied(mem_maker):
    group = _group(mem_maker, allow_msg_ttl=True)
    group.publish([pub("orders.a", Nats_TTL="1s")], NOW)
    lost = group.leader.ttl_due(NOW + SECOND)
    assert len(lost) == 1  # handed out, but never committed (the proposal was lost)
    assert group.leader.ttl_due(NOW + 2 * SECOND) == []  # not again before the retry interval
    assert _expire(group, NOW + 7 * SECOND) == [1]
    assert group.leader.ttl_due(NOW + 20 * SECOND) == [] and len(group.leader.ttl_schedule) == 0


def test_a_reused_sequence_is_not_deleted_for_a_lost_message_ttl(mem_maker):
    """The schedule holds a seq whose MSGS entry was never committed; another message got that seq."""
    group = _group(mem_maker, allow_msg_ttl=True)
    schedule = TtlSchedule()
    group.publish([pub("orders.a")], NOW)  # seq 1 without a TTL
    schedule.add(1, NOW, 1)  # as if a lost publish with `Nats-TTL: 1` had been decided at seq 1
    assert schedule.due(group.machines["a"].store, NOW + 5 * SECOND) == []
