"""`StreamLeader`: the accept/reject decision for every header and limit, counting in-flight proposals.

Method: a leader over a real machine (MemStore: the decision does not depend on the store kind, which
`test_machine.py` covers) is asked to `decide` batches of publishes at explicit times. "In flight" means
decided but not yet committed: the test holds the entries back, decides more, and only then commits.
Each error is checked for nats-server's `err_code`, and every rejected publish for consuming no sequence.
"""

from __future__ import annotations

import pytest
from stream_kit import NOW, Group, config_json, make_machine, nats_headers, pub

from jsraft import limits
from jsraft.stream import entries
from jsraft.stream.drift import Finding, FindingKind
from jsraft.stream.entries import decode_entry
from jsraft.stream.headers import BadHeaders, parse_headers
from jsraft.stream.leader import StreamLeader
from jsraft.stream.outcomes import PubOutcome

SECOND = 1_000_000_000


def _group(mem_maker, **config) -> Group:
    raw = config_json(**config)
    return Group({"a": make_machine(mem_maker, raw), "b": make_machine(mem_maker, raw)}, "a")


def _codes(decision) -> list:
    return [o.error.err_code if o.error else o.seq for o in decision.outcomes]


def test_concurrent_publishes_coalesce_into_one_msgs_entry(mem_maker):
    group = _group(mem_maker)
    decision = group.leader.decide([pub(f"orders.{i}", bytes([i])) for i in range(50)], NOW)
    assert len(decision.entries) == 1 and _codes(decision) == list(range(1, 51))
    batch = decode_entry(decision.entries[0])
    assert (batch.first_seq, batch.last_seq) == (1, 50) and {m[3] for m in batch.msgs} == {NOW}
    assert decision.outcomes[0].to_api("ORDERS") == {"stream": "ORDERS", "seq": 1}


def test_batches_past_the_entry_bound_split_but_keep_contiguous_seqs(mem_maker, monkeypatch):
    monkeypatch.setattr(entries, "MSGS_PER_ENTRY_MAX", 8)
    group = _group(mem_maker)
    decision = group.leader.decide([pub("orders.a")] * 20, NOW)
    assert [decode_entry(e).first_seq for e in decision.entries] == [1, 9, 17]
    assert [len(decode_entry(e).msgs) for e in decision.entries] == [8, 8, 4]


def test_rejected_publishes_consume_no_sequence(mem_maker):
    group = _group(mem_maker, max_msg_size=10)
    decision = group.leader.decide([pub("orders.a", b"ok"), pub("orders.a", b"x" * 11), pub("orders.a", b"ok")], NOW)
    assert _codes(decision) == [1, 10054, 2]
    assert decision.outcomes[1].to_api("ORDERS")["error"]["description"] == "message size exceeds maximum allowed"


def test_duplicates_within_the_window_in_flight_and_applied(mem_maker):
    group = _group(mem_maker, duplicate_window=60 * SECOND)
    first = group.leader.decide([pub("orders.a", Nats_Msg_Id="m1"), pub("orders.a", Nats_Msg_Id="m1")], NOW)
    assert first.outcomes[1] == PubOutcome(1, duplicate=True, pending=True)
    again = group.leader.decide([pub("orders.a", Nats_Msg_Id="m1")], NOW)  # still in flight
    assert again.outcomes[0].pending and again.entries == []
    for entry in first.entries:
        group.commit(entry)
    applied = group.leader.decide([pub("orders.a", Nats_Msg_Id="m1")], NOW + SECOND)
    assert applied.outcomes[0].to_api("ORDERS") == {"stream": "ORDERS", "seq": 1, "duplicate": True}
    # A new leader (another replica) dedupes identically: the window comes from applied entries.
    follower_leader = StreamLeader(group.machines["b"])
    assert follower_leader.decide([pub("orders.a", Nats_Msg_Id="m1")], NOW + SECOND).outcomes[0].duplicate
    later = group.leader.decide([pub("orders.a", Nats_Msg_Id="m1")], NOW + 61 * SECOND)
    assert later.outcomes[0].seq == 2 and not later.outcomes[0].duplicate


def test_expected_stream(mem_maker):
    group = _group(mem_maker)
    decision = group.leader.decide([pub("orders.a", Nats_Expected_Stream="OTHER"),
                                    pub("orders.a", Nats_Expected_Stream="ORDERS")], NOW)
    assert _codes(decision) == [10060, 1]


def test_expected_last_sequence_counts_in_flight_proposals(mem_maker):
    group = _group(mem_maker)
    one = group.leader.decide([pub("orders.a", Nats_Expected_Last_Sequence="0")], NOW)
    two = group.leader.decide([pub("orders.a", Nats_Expected_Last_Sequence="0")], NOW)  # one not committed
    assert _codes(one) == [1] and _codes(two) == [10071]
    assert two.outcomes[0].error.description == "wrong last sequence: 1"
    three = group.leader.decide([pub("orders.a", Nats_Expected_Last_Sequence="1"),
                                 pub("orders.a", Nats_Expected_Last_Sequence="2")], NOW)
    assert _codes(three) == [2, 3]


def test_expected_last_subject_sequence_with_and_without_override(mem_maker):
    group = _group(mem_maker)
    group.publish([pub("orders.a"), pub("orders.b")])
    pending = group.leader.decide([pub("orders.a", Nats_Expected_Last_Subject_Sequence="1")], NOW)
    assert _codes(pending) == [3]
    decision = group.leader.decide([
        pub("orders.a", Nats_Expected_Last_Subject_Sequence="1"),  # 3 is in flight on orders.a
        pub("orders.a", Nats_Expected_Last_Subject_Sequence="3"),
        pub("orders.c", Nats_Expected_Last_Subject_Sequence="0"),  # no message on the subject yet
        pub("orders.z", Nats_Expected_Last_Subject_Sequence="2", Nats_Expected_Last_Subject_Sequence_Subject="orders.b"),
        pub("orders.z", Nats_Expected_Last_Subject_Sequence="4", Nats_Expected_Last_Subject_Sequence_Subject="orders.*"),
    ], NOW)
    assert _codes(decision) == [10071, 4, 5, 6, 10071]
    assert decision.outcomes[4].error.description == "wrong last sequence: 6"


def test_expected_last_msg_id_counts_in_flight(mem_maker):
    group = _group(mem_maker)
    group.publish([pub("orders.a", Nats_Msg_Id="x1")])
    decision = group.leader.decide([
        pub("orders.a", Nats_Msg_Id="x2", Nats_Expected_Last_Msg_Id="x1"),
        pub("orders.a", Nats_Msg_Id="x3", Nats_Expected_Last_Msg_Id="x1"),
        pub("orders.a", Nats_Expected_Last_Msg_Id="x2"),
    ], NOW)
    assert _codes(decision) == [2, 10070, 3]
    assert decision.outcomes[1].error.description == "wrong last msg ID: x2"


@pytest.mark.parametrize("config, publish, code", [
    ({"sealed": True}, pub("orders.a"), 10109),
    ({}, ("orders.a", b"", b"x" * (limits.payload_bytes_max + 1)), 10054),
    ({}, ("orders.a", b"NATS/1.0\r\n" + b"X: " + b"y" * limits.headers_bytes_max + b"\r\n\r\n", b""), 10097),
    ({}, ("orders..a", b"", b""), 10003),
    ({}, ("orders.a", b"HTTP/1.1\r\n\r\n", b""), 10003),
    ({}, pub("orders.a", Nats_Expected_Last_Sequence="minus one"), 10003),
    ({}, pub("orders.a", Nats_Rollup="sub"), 10111),
    ({"allow_rollup_hdrs": True}, pub("orders.a", Nats_Rollup="everything"), 10111),
    ({"allow_rollup_hdrs": True, "deny_purge": True}, pub("orders.a", Nats_Rollup="all"), 10111),
])
def test_refusals_carry_nats_server_codes(mem_maker, config, publish, code):
    group = _group(mem_maker, **config)
    assert _codes(group.leader.decide([publish], NOW)) == [code]


def test_discard_new_limits_count_in_flight_messages(mem_maker):
    group = _group(mem_maker, discard="new", max_msgs=3)
    first = group.leader.decide([pub("orders.a"), pub("orders.b")], NOW)
    second = group.leader.decide([pub("orders.c"), pub("orders.d")], NOW)  # first is still in flight
    assert _codes(first) == [1, 2] and _codes(second) == [3, 10077]
    assert second.outcomes[1].error.description == "maximum messages exceeded"
    for entry in first.entries + second.entries:
        group.commit(entry)
    assert _codes(group.leader.decide([pub("orders.e")], NOW)) == [10077]


def test_discard_new_max_bytes_and_per_subject(mem_maker):
    size = 30 + len("orders.a") + 10  # msg_size of a 10-byte payload on orders.a, no headers
    group = _group(mem_maker, discard="new", max_bytes=2 * size)
    assert _codes(group.leader.decide([pub("orders.a", b"0" * 10)] * 3, NOW)) == [1, 2, 10077]
    per = _group(mem_maker, discard="new", max_msgs_per_subject=1, discard_new_per_subject=True)
    decision = per.leader.decide([pub("orders.a"), pub("orders.b"), pub("orders.a")], NOW)
    assert _codes(decision) == [1, 2, 10077]
    assert decision.outcomes[2].error.description == "maximum messages per subject exceeded"


def test_discard_new_credits_per_subject_evictions_like_a_kv_bucket(mem_maker):
    size = 30 + len("orders.k1") + 10
    group = _group(mem_maker, discard="new", max_msgs_per_subject=1, max_bytes=2 * size, max_msgs=2)
    group.publish([pub("orders.k1", b"a" * 10), pub("orders.k2", b"b" * 10)])
    update = group.leader.decide([pub("orders.k1", b"c" * 10), pub("orders.k1", b"d" * 10)], NOW)
    assert _codes(update) == [3, 4]  # each replaces the key's previous value: limits still hold
    assert _codes(group.leader.decide([pub("orders.k3", b"e" * 10)], NOW)) == [10077]
    for entry in update.entries:
        group.commit(entry)
    state = group.machines["b"].store.state()
    assert (state.msgs, state.bytes, state.first_seq) == (2, 2 * size, 2)


def test_timestamps_never_go_backwards(mem_maker):
    group = _group(mem_maker)
    group.publish([pub("orders.a")], NOW)
    decision, _ = group.publish([pub("orders.a")], NOW - 5 * SECOND)  # a new leader with a slower clock
    assert decode_entry(decision.entries[0]).msgs[0][3] == NOW


def test_expiry_is_proposed_from_max_age_once_at_a_time(mem_maker):
    group = _group(mem_maker, max_age=10 * SECOND)
    for i in range(5):
        group.publish([pub("orders.a", bytes([i]))], NOW + i * SECOND)
    assert group.leader.expire_due(NOW + 5 * SECOND) is None  # nothing older than max_age yet
    entry = group.leader.expire_due(NOW + 12 * SECOND + 1)
    assert decode_entry(entry).cutoff_ns == NOW + 2 * SECOND + 1 and decode_entry(entry).up_to_seq == 6
    assert group.leader.expire_due(NOW + 13 * SECOND) is None  # one EXPIRE in flight at a time
    group.commit(entry)
    assert group.machines["b"].store.state().first_seq == 4
    assert group.leader.expire_due(NOW + 14 * SECOND + 1) is not None


def test_audits_are_scheduled_by_interval_and_on_request(mem_maker):
    group = _group(mem_maker)
    first = group.leader.audit_due(NOW)
    assert decode_entry(first).audit_id == 1  # a new leader audits at once
    assert group.leader.audit_due(NOW + SECOND) is None
    # An interval later with nothing applied since: nothing new to compare, no entry (and no fsyncs).
    assert group.leader.audit_due(NOW + 6 * SECOND) is None
    group.publish([pub("orders.a")])
    assert group.leader.audit_due(NOW + 7 * SECOND) is None  # the interval counts from the skipped one
    assert decode_entry(group.leader.audit_due(NOW + 12 * SECOND)).audit_id == 2
    group.leader.request_audit()  # a requested audit runs even with nothing changed
    assert decode_entry(group.leader.audit_due(NOW + 13 * SECOND)).audit_id == 3


def test_a_lone_voter_over_a_stream_never_written_proposes_no_audit(mem_maker):
    """`leader` invariant 6: the only voter of its group (no learner) would judge an audit of an
    untouched stream with itself as the majority; none is proposed, requested or not, while the caller
    says the group is `alone`. Periodic audits come an interval after the first change; with other
    replicas (a member added since), or once written to, a leader audits as before."""
    group = _group(mem_maker)
    leader = group.leader
    assert leader.audit_due(NOW, alone=True) is None and leader.audit_due(NOW + 6 * SECOND, alone=True) is None
    assert not leader.audit_owed()
    leader.request_audit()  # as after the replay of the new group's empty log
    assert leader.audit_due(NOW + 7 * SECOND, alone=True) is None and not leader.audit_owed()
    leader.request_audit()
    assert decode_entry(leader.audit_due(NOW + 8 * SECOND)).audit_id == 1  # not alone any more: at once
    fresh = StreamLeader(group.machines["a"])
    assert fresh.audit_due(NOW, alone=True) is None  # its task's first turn: the interval starts
    group.leader = fresh
    group.publish([pub("orders.a")])
    assert fresh.audit_owed() and fresh.audit_due(NOW + SECOND, alone=True) is None
    assert decode_entry(fresh.audit_due(NOW + 6 * SECOND, alone=True)).audit_id == 1  # periodic, after the change
    assert decode_entry(StreamLeader(group.machines["a"]).audit_due(NOW, alone=True)).audit_id == 1  # written: at once


def test_delete_and_purge_proposals_respect_deny_and_sealed(mem_maker):
    denied = _group(mem_maker, deny_delete=True, deny_purge=True)
    denied.publish([pub("orders.a")])
    assert denied.leader.propose_delete(1).error.err_code == 10057
    assert denied.leader.propose_purge().error.err_code == 10110
    group = _group(mem_maker)
    group.publish([pub("orders.a")] * 3)
    assert group.leader.propose_delete(9).error.description == "no message found"
    assert group.leader.propose_purge(None, seq=2, keep=1).error.err_code == 10003
    purge = decode_entry(group.leader.propose_purge("orders.>", keep=1).entry)
    assert (purge.subject, purge.keep, purge.last_seq) == ("orders.>", 1, 3)
    moved = group.leader.propose_purge(None, seq=10)
    assert _codes(group.leader.decide([pub("orders.a")], NOW)) == [10]  # numbered past the purge
    group.commit(moved.entry)
    assert group.machines["b"].last_seq == 9 and group.machines["b"].store.state().last_seq == 9


def test_header_parser():
    assert parse_headers(b"") == {}
    assert parse_headers(b"NATS/1.0\r\nFoo: bar\r\n\r\n") == {}
    found = parse_headers(nats_headers(Nats_Msg_Id=" one ", Other="x") + b"")
    assert found == {"Nats-Msg-Id": "one"}
    twice = b"NATS/1.0 503\r\nNats-Msg-Id: a\r\nNats-Msg-Id: b\r\nnats-msg-id: c\r\n\r\n"
    assert parse_headers(twice) == {"Nats-Msg-Id": "a"}  # first wins; names are case-sensitive
    for bad in (b"NATS/1.0\r\nNats-Msg-Id: a\r\n", b"NATS/1.0\r\nNats-Msg-Id a\r\n\r\n", b"Nats-Msg-Id: a\r\n\r\n"):
        with pytest.raises(BadHeaders):
            parse_headers(bad)


def test_a_replica_that_is_not_current_accepts_no_publish(mem_maker):
    group = _group(mem_maker)
    group.machines["a"].mark_drifted(Finding(kind=FindingKind.audit_mismatch))
    decision = group.leader.decide([pub("orders.a")], NOW)
    assert _codes(decision) == [10008] and decision.entries == []
