"""Counter streams (ADR-49): the `Nats-Incr` parser, the config rules, and the leader's running totals.

Method: `counters.increment` is checked on a table of header values Go's `big.Int.SetString(s, 10)`
accepts and refuses, and on nats-server's order of refusals. The config rules go through
`parse_stream_config` and `meta.rules.check_update`. The totals are driven through a real `StreamLeader`
over two replicas on both stores (`stream_kit.Group`): increments decided in one batch, in two batches
before either is applied (the in-flight chain, `stream.counters` invariant 2), after a purge, and by a
new leader built over the other replica (it finds the total in its store alone); every replica must hold
the same bodies. The answers of a real nats-server to the same publishes are the differential oracle's
(tests/interop/test_oracle.py, `COUNTER_STEPS`).
"""

from __future__ import annotations

import json

import pytest
from stream_kit import NOW, Group, config_json, make_machine, pub

from jsraft.errors import InvalidConfig
from jsraft.jsapi.stream_config import StreamConfig, parse_stream_config
from jsraft.meta.rules import check_update
from jsraft.stream import counters
from jsraft.stream.entries import decode_entry
from jsraft.stream.leader import StreamLeader


@pytest.mark.parametrize("value, expected", [
    ("1", 1), ("+2", 2), ("-5", -5), ("0", 0), ("+0", 0), ("-0", 0), ("007", 7),
    ("100000000000000000000000000000", 10**29), ("-100000000000000000000000000000", -10**29),
])
def test_increments_nats_server_accepts(value, expected):
    assert counters.increment({counters.INCR: value}, b"", True) == expected


@pytest.mark.parametrize("value", ["", "+", "-", "1.5", "1e3", "abc", "1_000", "0x10", "++1", "1 2", "٣",
                                   "9" * (counters.DIGITS_MAX + 1)])
def test_increments_nats_server_refuses(value):
    assert counters.increment({counters.INCR: value}, b"", True) == counters.increment_invalid()


def test_refusals_come_in_nats_servers_order():
    assert counters.increment({}, b"x", True) is None  # no increment: the missing check comes later
    assert counters.increment({counters.INCR: "x"}, b"", False).err_code == 10171  # invalid before disabled
    assert counters.increment({counters.INCR: "1"}, b"", False).err_code == 10168
    assert counters.increment({counters.INCR: "1"}, b"p", True).err_code == 10170
    for name in ("Nats-Rollup", "Nats-Expected-Stream", "Nats-Expected-Last-Msg-Id", "Nats-Expected-Last-Sequence",
                 "Nats-Expected-Last-Subject-Sequence", "Nats-Expected-Last-Subject-Sequence-Subject"):
        assert counters.increment({counters.INCR: "1", name: "x"}, b"", True).err_code == 10171, name
    assert counters.increment({counters.INCR: "1", "Nats-Msg-Id": "m"}, b"", True) == 1
    assert counters.increment({counters.INCR: "-" + "9" * counters.DIGITS_MAX}, b"", True) == -(10**counters.DIGITS_MAX - 1)


def _config(**fields) -> StreamConfig:
    return parse_stream_config(json.dumps({"name": "C", "subjects": ["c.>"], **fields}).encode())[0]


@pytest.mark.parametrize("fields, words", [
    ({"discard": "new"}, "counter stream cannot use discard new"),
    ({"allow_msg_ttl": True}, "counter stream cannot use message TTLs"),
    ({"retention": "interest"}, "counter stream can only use limits retention"),
    ({"subject_delete_marker_ttl": 60_000_000_000}, "counter stream cannot use message TTLs"),
])
def test_config_rules(fields, words):
    with pytest.raises(InvalidConfig) as raised:
        _config(allow_msg_counter=True, **fields)
    assert raised.value.err_code == 10052 and raised.value.description == words


def test_the_setting_round_trips_and_never_changes():
    on, off = _config(allow_msg_counter=True), _config()
    assert on.to_json()["allow_msg_counter"] is True and "allow_msg_counter" not in off.to_json()
    assert StreamConfig.from_dict(on.to_json()) == on
    for old, new in ((on, off), (off, on)):
        with pytest.raises(InvalidConfig, match="can not change message counter setting"):
            check_update(old, new)


def _group(maker) -> Group:
    raw = config_json("C", allow_msg_counter=True)
    return Group({"a": make_machine(maker, raw), "b": make_machine(maker, raw)}, "a")


def _incr(subject: str, value: str):
    return pub(subject, b"", Nats_Incr=value)


def _bodies(machine) -> list[bytes]:
    state = machine.store.state()
    return [machine.store.load(seq).payload for seq in range(state.first_seq, state.last_seq + 1)]


def test_totals_chain_through_batches_in_flight_and_a_new_leader(maker):
    group = _group(maker)
    one = group.leader.decide([_incr("c.a", "+2"), _incr("c.b", "5"), _incr("c.a", "-7")], NOW)
    assert [(o.seq, o.value) for o in one.outcomes] == [(1, "2"), (2, "5"), (3, "-5")]
    two = group.leader.decide([_incr("c.a", "+10")], NOW + 1)  # decided before `one` applied
    assert [(o.seq, o.value) for o in two.outcomes] == [(4, "5")]
    for entry in one.entries + two.entries:
        group.commit(entry)
    expected = [b'{"val":"2"}', b'{"val":"5"}', b'{"val":"-5"}', b'{"val":"5"}']
    assert _bodies(group.machines["a"]) == _bodies(group.machines["b"]) == expected
    stored = group.machines["b"].store.load(4)
    assert b"Nats-Incr: +10" in stored.headers  # the increment is kept as sent (ADR-49 "Recounts")
    # A new leader over b finds each subject's total in its store.
    group.leader, group.leader_name = StreamLeader(group.machines["b"]), "b"
    three = group.leader.decide([_incr("c.a", "1"), _incr("c.b", "-1"), _incr("c.new", "0")], NOW + 2)
    assert [o.value for o in three.outcomes] == ["6", "4", "0"]


def test_a_total_past_the_digits_limit_is_refused_not_stored(maker):
    group = _group(maker)
    near = "9" * counters.DIGITS_MAX
    decision, _ = group.publish([_incr("c.a", near), _incr("c.a", "1"), _incr("c.a", "-1")])
    assert [o.value if o.error is None else o.error.err_code for o in decision.outcomes] == [near, 10171, near[:-1] + "8"]


def test_refusals_and_a_purge_reset(maker):
    group = _group(maker)
    decision, _ = group.publish([pub("c.a", b""), _incr("c.a", "1"), _incr("c.a", "1.0"), pub("c.a", b"x", Nats_Incr="1")])
    assert [o.error.err_code if o.error else o.value for o in decision.outcomes] == [10169, "1", 10171, 10170]
    purge = group.leader.propose_purge(subject="c.a")
    group.commit(purge.entry)
    decision, _ = group.publish([_incr("c.a", "+4")], NOW + 1)
    assert decision.outcomes[0].value == "4"  # a purged subject starts again from 0


def test_a_body_that_is_not_a_counter_is_broken(maker):
    group = _group(maker)
    entries = group.leader.decide([_incr("c.a", "1")], NOW).entries
    msgs = decode_entry(entries[0])
    assert msgs.msgs[0][2] == b'{"val":"1"}'
    # The subject's last message as another writer left it (not a counter value): refused, not guessed.
    assert counters.read_last(lambda subject: (b"", b'{"val":1}'), "c.a") == counters.counter_broken()
    assert counters.read_last(lambda subject: (b"", b"garbage"), "c.a") == counters.counter_broken()
    sources = b'NATS/1.0\r\nNats-Counter-Sources: {"S":{"c.a":"3"}}\r\n\r\n'
    last = counters.read_last(lambda subject: (sources, b'{"val":"3"}'), "c.a")
    assert (last.total, last.sources) == (3, '{"S":{"c.a":"3"}}')
    kept = counters.with_sources(b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", last.sources)
    assert kept == b'NATS/1.0\r\nNats-Incr: 1\r\nNats-Counter-Sources: {"S":{"c.a":"3"}}\r\n\r\n'
