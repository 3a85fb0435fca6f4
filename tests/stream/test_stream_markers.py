"""Subject delete markers (ADR-48, `subject_delete_marker_ttl`): what the stream leader proposes when
`Nats-TTL` or `max_age` removes a subject's last message, and what every replica stores.

Method: a real `StreamLeader` over two replicas on both stores (`stream_kit.Group`). Publishes are
decided at explicit times; `ttl_due(now)` / `expiry_due(now)` are asked at explicit later times and every
entry they return is committed on both replicas; then the stored messages (subjects, headers) are read
back and the replicas' state tuples compared. The markers' headers are compared byte for byte with the
set nats-server writes (`handleRemovalOrSdm`).
"""

from __future__ import annotations

import pytest
from stream_kit import NOW, Group, config_json, make_machine, pub

from jsraft.errors import NoMessageFound
from jsraft.stream import markers
from jsraft.stream.entries import DeleteEntry, ExpireEntry, MsgsBatch, decode_entry
from jsraft.stream.leader import StreamLeader

SECOND = 1_000_000_000
MARKER = b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 3s\r\nNats-Rollup: sub\r\n\r\n"


def _group(maker, **config) -> Group:
    raw = config_json(**config)
    return Group({"a": make_machine(maker, raw), "b": make_machine(maker, raw)}, "a")


def _commit_all(group: Group, due: list[bytes]) -> list[str]:
    kinds = []
    for entry in due:
        decoded = decode_entry(entry)
        kinds.append(type(decoded).__name__)
        group.commit(entry)
    return kinds


def _stored(machine) -> list[tuple[int, str, bytes]]:
    out, seq = [], 0
    while True:
        try:
            msg = machine.store.load_next(None, seq)
        except NoMessageFound:
            return out
        out.append((msg.seq, msg.subject, msg.headers))
        seq = msg.seq + 1


def _same(group: Group) -> None:
    a, b = group.machines["a"].store.state(), group.machines["b"].store.state()
    assert (a.first_seq, a.last_seq, a.msgs, a.bytes, a.digest) == (b.first_seq, b.last_seq, b.msgs, b.bytes, b.digest)


@pytest.mark.parametrize("seconds, text", [(1, "1s"), (3, "3s"), (60, "1m0s"), (61, "1m1s"), (3600, "1h0m0s"),
                                           (3723, "1h2m3s")])
def test_marker_ttl_is_written_as_go_writes_a_duration(seconds, text):
    assert markers.go_duration(seconds) == text


def test_what_counts_as_a_marker():
    assert markers.is_marker(MARKER)
    assert markers.is_marker(b"NATS/1.0\r\nKV-Operation: PURGE\r\n\r\n")
    assert not markers.is_marker(b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n")
    assert not markers.is_marker(b"NATS/1.0\r\nNats-TTL: 5\r\n\r\n") and not markers.is_marker(b"")


def test_a_ttl_expiry_of_a_subjects_last_message_leaves_a_marker_on_every_replica(maker):
    group = _group(maker, subject_delete_marker_ttl=3 * SECOND, max_msgs_per_subject=1)
    group.publish([pub("kv.age", Nats_TTL="1s"), pub("kv.other")], NOW)
    assert _commit_all(group, group.leader.ttl_due(NOW + SECOND)) == ["MsgsBatch"]
    assert _stored(group.machines["a"]) == [(2, "kv.other", b""), (3, "kv.age", MARKER)]
    _same(group)
    # The marker expires in turn after its own TTL, as a plain delete (no marker of a marker).
    assert group.leader.ttl_due(NOW + 3 * SECOND) == []
    later = group.machines["a"].store.load(3).timestamp_ns + 3 * SECOND
    due = group.leader.ttl_due(later)
    assert [type(decode_entry(e)) for e in due] == [DeleteEntry] and decode_entry(due[0]).seq == 3
    _commit_all(group, due)
    assert _stored(group.machines["b"]) == [(2, "kv.other", b"")]
    _same(group)


def test_a_message_that_is_not_its_subjects_last_is_just_deleted(maker):
    group = _group(maker, subject_delete_marker_ttl=3 * SECOND, max_msgs_per_subject=1)
    group.publish([pub("kv.age", Nats_TTL="1s")], NOW)
    group.publish([pub("kv.age")], NOW + SECOND // 2)  # replaces it: the TTL'd one is gone already
    assert group.leader.ttl_due(NOW + SECOND) == []
    group2 = _group(maker, subject_delete_marker_ttl=2 * SECOND)
    group2.publish([pub("kv.age", Nats_TTL="5s"), pub("kv.age")], NOW)
    due = group2.leader.ttl_due(NOW + 5 * SECOND)
    assert [type(decode_entry(e)) for e in due] == [DeleteEntry]


def test_a_ttl_below_the_marker_ttl_is_raised_to_it_unless_one_message_per_subject(maker):
    group = _group(maker, subject_delete_marker_ttl=3 * SECOND)
    group.publish([pub("kv.a", Nats_TTL="1s"), pub("kv.b", Nats_TTL="5s")], NOW)
    assert _stored(group.machines["a"])[0][2] == b"NATS/1.0\r\nNats-TTL: 3\r\n\r\n"
    assert group.leader.ttl_due(NOW + SECOND) == []  # raised to 3 s (nats-server processJetStreamMsg)
    single = _group(maker, subject_delete_marker_ttl=3 * SECOND, max_msgs_per_subject=1)
    single.publish([pub("kv.a", Nats_TTL="1s")], NOW)
    assert len(single.leader.ttl_due(NOW + SECOND)) == 1


def test_max_age_leaves_a_marker_for_each_subjects_last_message_then_expires_the_rest(maker):
    group = _group(maker, subject_delete_marker_ttl=5 * SECOND, max_age=10 * SECOND)
    group.publish([pub("o.a"), pub("o.b"), pub("o.a"), pub("o.b", b"y", **{"Nats-Marker-Reason": "MaxAge"})], NOW)
    group.publish([pub("o.c")], NOW + 8 * SECOND)
    due = group.leader.expiry_due(NOW + 10 * SECOND + 1)
    assert [type(decode_entry(e)) for e in due] == [MsgsBatch, ExpireEntry]  # o.b's last is a marker already
    assert group.leader.expiry_due(NOW + 10 * SECOND + 2) == []  # one EXPIRE in flight at a time
    _commit_all(group, due)
    stored = _stored(group.machines["a"])
    assert [(s, subj) for s, subj, _ in stored] == [(5, "o.c"), (6, "o.a")]
    assert stored[1][2] == MARKER.replace(b"3s", b"5s")
    _same(group)


def test_a_new_leader_finds_the_due_markers_from_the_store(maker):
    group = _group(maker, subject_delete_marker_ttl=3 * SECOND, max_msgs_per_subject=1)
    group.publish([pub("kv.age", Nats_TTL="2s")], NOW)
    group.leader, group.leader_name = StreamLeader(group.machines["b"]), "b"
    _commit_all(group, group.leader.ttl_due(NOW + 2 * SECOND))
    assert [(s, subj, h) for s, subj, h in _stored(group.machines["a"])] == [(2, "kv.age", MARKER)]
    _same(group)
