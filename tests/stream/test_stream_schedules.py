"""Message schedules (ADR-51 at nats-server 2.12): the `@at` parser, the publish checks, the fired message,
and the leader firing a schedule exactly once through the log.

Method: `parse_at` and `check_schedule` on tables of what nats-server 2.12 accepts and refuses (its
`getMessageSchedule` takes Go's RFC 3339 only, after `@at `); `fired_message` on a stored schedule's headers.
The firing is driven through a real `StreamLeader` over two replicas on both stores (`stream_kit.Group`):
a schedule is decided at an explicit time, `schedules_due(now)` is asked before and after it is due, before
and after the schedule itself applied, while its fired message is in flight, and by a new leader built over
the other replica; every entry is committed on both replicas, whose stores must end equal (the fired
message stored once, the schedule purged by the same entry). The answers of real nats-servers are checked
by tests/interop/test_oracle.py (`SCHEDULE_STEPS`) and, firing across a leader change on three nodes, by
tests/interop/test_schedules_cluster.py.
"""

from __future__ import annotations

import calendar
import json

import pytest
from stream_kit import NOW, Group, config_json, make_machine, pub

from jsraft.errors import InvalidConfig
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.meta.rules import check_update
from jsraft.stream import schedules
from jsraft.stream.entries import FLAG_SCHEDULE_PURGE, decode_entry
from jsraft.stream.leader import StreamLeader

SECOND = 1_000_000_000
EPOCH_2030 = calendar.timegm((2030, 1, 2, 3, 4, 5)) * SECOND


@pytest.mark.parametrize("value, ns", [
    ("@at 2030-01-02T03:04:05Z", EPOCH_2030),
    ("@at 2030-01-02T03:04:05.5Z", EPOCH_2030 + SECOND // 2),
    ("@at 2030-01-02T04:04:05+01:00", EPOCH_2030),
    ("@at 2030-01-02T02:34:05-00:30", EPOCH_2030),
    ("@at 2030-01-02T03:04:05,25Z", EPOCH_2030 + SECOND // 4),  # Go takes a comma before the fraction
    ("@at 0000-01-01T00:00:00Z", -62_167_219_200 * SECOND),  # year 0 (Go's proleptic Gregorian): no crash
    ("@at 0000-02-29T00:00:00Z", (-62_167_219_200 + 59 * 86_400) * SECOND),  # year 0 was a leap year
])
def test_at_values_accepted(value, ns):
    assert schedules.parse_at(value) == ns


@pytest.mark.parametrize("value", ["@at 2030-01-02 03:04:05Z", "@at 2030-01-02T03:04:05", "@at 2030-13-02T03:04:05Z",
                                   "@at 2030-02-30T03:04:05Z", "@at nope",
                                   "@at 0001-02-29T00:00:00Z", "@at 2030-01-02T03:04:05.Z",
                                   "@at 2030-01-02t03:04:05Z", "@every 1s", "@hourly", "0 * * * * *",
                                   "at 2030-01-02T03:04:05Z", "@at  2030-01-02T03:04:05Z"])
def test_patterns_refused_at_2_12(value):
    assert schedules.parse_at(value) is None


def _config(**fields):
    return parse_stream_config(json.dumps({"name": "S", "subjects": ["s.>"], **fields}).encode())[0]


SCHEDULED = _config(allow_msg_schedules=True)


@pytest.mark.parametrize("found, code", [
    ({"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "s.out"}, 10189),
    ({"Nats-Schedule": "@at 2030-01-02T03:04:05Z"}, 10190),
    ({"Nats-Schedule": "@at 2030-01-02T03:04:05Z", "Nats-Schedule-Target": "s.a"}, 10190),  # its own subject
    ({"Nats-Schedule": "@at 2030-01-02T03:04:05Z", "Nats-Schedule-Target": "other.out"}, 10190),
    ({"Nats-Schedule": "@at 2030-01-02T03:04:05Z", "Nats-Schedule-Target": "s.*"}, 10190),
    ({"Nats-Schedule": "@at 2030-01-02T03:04:05Z", "Nats-Schedule-Target": "s.out", "Nats-Schedule-TTL": "x"}, 10191),
    ({"Nats-Schedule": "@at 2030-01-02T03:04:05Z", "Nats-Schedule-Target": "s.out", "Nats-Schedule-TTL": "5s"}, 10166),
    ({"Nats-Schedule": "@at 2030-01-02T03:04:05Z", "Nats-Schedule-Target": "s.out", "Nats-Rollup": "all"}, 10192),
])
def test_publish_checks_in_nats_servers_order(found, code):
    assert schedules.check_schedule(found, "s.a", SCHEDULED).err_code == code


@pytest.mark.parametrize("value", ["@at 0001-01-01T00:00:00Z", "@at 0001-01-01T01:00:00+01:00"])
def test_go_zero_time_is_no_schedule(value):
    # nats-server 2.12: `getMessageSchedule` parses it and `schedule.IsZero()` skips every schedule check
    # (invariant 5): accepted as a plain message, on a stream with schedules or without.
    for config in (SCHEDULED, _config()):
        assert schedules.check_schedule({"Nats-Schedule": value}, "s.a", config) is None
    assert schedules.check_schedule({"Nats-Schedule": "@at 0001-01-01T00:00:01Z"}, "s.a", _config()).err_code == 10188


def test_a_stream_without_schedules_refuses_them():
    plain = _config()
    at = {"Nats-Schedule": "@at 2030-01-02T03:04:05Z", "Nats-Schedule-Target": "s.out"}
    assert schedules.check_schedule(at, "s.a", plain).err_code == 10188
    assert schedules.check_schedule({"Nats-Schedule": "@every 1s"}, "s.a", plain).err_code == 10188
    assert schedules.check_schedule({"Nats-Schedule-Next": "purge"}, "s.a", plain).err_code == 10188
    assert schedules.check_schedule(at, "s.a", SCHEDULED) == EPOCH_2030
    assert schedules.check_schedule({}, "s.a", plain) is None


def test_config_rules():
    assert (SCHEDULED.allow_rollup_hdrs, SCHEDULED.deny_purge) == (True, False)  # turned on, as nats-server
    assert SCHEDULED.to_json()["allow_msg_schedules"] is True and "allow_msg_schedules" not in _config().to_json()
    with pytest.raises(InvalidConfig, match="message scheduling cannot use discard new"):
        _config(allow_msg_schedules=True, discard="new")
    with pytest.raises(InvalidConfig, match="counter stream cannot use message schedules"):
        _config(allow_msg_schedules=True, allow_msg_counter=True)
    check_update(_config(), SCHEDULED)
    with pytest.raises(InvalidConfig, match="message schedules can not be disabled"):
        check_update(SCHEDULED, _config(allow_rollup_hdrs=True))


def test_the_fired_message_keeps_the_users_headers_only():
    headers = (b"NATS/1.0\r\nNats-Schedule: @at 2030-01-02T03:04:05Z\r\nNats-Schedule-Target: s.out\r\n"
               b"Nats-Schedule-TTL: 5m\r\nNats-Msg-Id: m\r\nNats-Expected-Stream: S\r\nNats-TTL: 1h\r\n"
               b"Nats-Rollup: sub\r\nX-Kept: yes\r\n\r\n")
    target, fired, payload = schedules.fired_message("s.a", headers, b"body")
    assert (target, payload) == ("s.out", b"body")
    assert fired == (b"NATS/1.0\r\nX-Kept: yes\r\nNats-Scheduler: s.a\r\nNats-Schedule-Next: purge\r\n"
                     b"Nats-TTL: 5m\r\n\r\n")
    assert schedules.fired_message("s.a", b"NATS/1.0\r\nX: y\r\n\r\n", b"") is None


def _group(maker) -> Group:
    raw = config_json("S", allow_msg_schedules=True)
    return Group({"a": make_machine(maker, raw), "b": make_machine(maker, raw)}, "a")


def _schedule(at_ns: int, subject: str = "s.a", target: str = "s.out", body: bytes = b"hi"):
    stamp = f"@at {_rfc3339(at_ns)}"
    return pub(subject, body, Nats_Schedule=stamp, Nats_Schedule_Target=target)


def _rfc3339(ns: int) -> str:
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns // SECOND))


def _stored(machine) -> list[tuple[int, str, bytes]]:
    state = machine.store.state()
    out = []
    for seq in range(state.first_seq, state.last_seq + 1) if state.msgs else ():
        try:
            msg = machine.store.load(seq)
        except Exception:
            continue
        out.append((seq, msg.subject, msg.payload))
    return out


def test_a_schedule_fires_once_and_is_purged_with_it(maker):
    group = _group(maker)
    due_ns = (NOW // SECOND + 10) * SECOND
    decision = group.leader.decide([_schedule(due_ns)], NOW)
    assert group.leader.schedules_due(due_ns) == []  # decided, not applied yet: it waits
    for entry in decision.entries:
        group.commit(entry)
    assert group.leader.schedules_due(due_ns - 1) == []  # not due yet
    fired = group.leader.schedules_due(due_ns)
    assert len(fired) == 1
    msgs = decode_entry(fired[0]).msgs
    assert msgs[0][0] == "s.out" and msgs[0][5] == FLAG_SCHEDULE_PURGE
    assert group.leader.schedules_due(due_ns + 5 * SECOND) == []  # in flight: not fired again
    group.commit(fired[0])
    assert _stored(group.machines["a"]) == _stored(group.machines["b"]) == [(2, "s.out", b"hi")]
    assert group.leader.schedules_due(due_ns + 60 * SECOND) == [] and len(group.leader.schedule_book) == 0


def test_a_new_leader_fires_what_the_old_one_had_not(maker):
    group = _group(maker)
    due_ns = (NOW // SECOND + 10) * SECOND
    for entry in group.leader.decide([_schedule(due_ns), _schedule(due_ns, "s.b", "s.out2", b"two")], NOW).entries:
        group.commit(entry)
    lost = group.leader.schedules_due(due_ns)  # fired by a leader whose proposals are lost
    assert len(lost) == 2
    group.leader, group.leader_name = StreamLeader(group.machines["b"]), "b"
    again = group.leader.schedules_due(due_ns + SECOND)
    assert len(again) == 2
    for entry in again:
        group.commit(entry)
    assert sorted(subject for _, subject, _ in _stored(group.machines["a"])) == ["s.out", "s.out2"]
    assert _stored(group.machines["a"]) == _stored(group.machines["b"])
    # A newer schedule on a subject replaces the older one (the implied `Nats-Rollup: sub`).
    later = due_ns + 100 * SECOND
    for entry in group.leader.decide([_schedule(later, body=b"v1"), _schedule(later + SECOND, body=b"v2")],
                                     NOW + 1).entries:
        group.commit(entry)
    fired = group.leader.schedules_due(later + 5 * SECOND)
    assert [decode_entry(entry).msgs[0][2] for entry in fired] == [b"v2"]
