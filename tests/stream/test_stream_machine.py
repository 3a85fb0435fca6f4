"""`StreamStateMachine`: every entry kind applied to both stores, the last-sequence check, replay.

Method: a `Group` of replicas (real machines on real MemStores or FileStores, parametrized) commits
entries by applying them in index order; each test compares what the stores hold afterwards with what
the entries say, and every replica's state tuple with every other's. Drift is made by giving one
replica a store that disagrees with the log, never by reaching into the machine.
"""

from __future__ import annotations

import pytest
from stream_kit import NOW, Group, config_json, make_machine, pub

from jsraft.errors import InvariantViolation, NoMessageFound
from jsraft.store.base import StoreConfig
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore
from jsraft.stream import entries
from jsraft.stream.drift import FindingKind
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.errors import StaleSnapshot, StreamNotHealthy
from jsraft.stream.results import Health

SECOND = 1_000_000_000


def _group(maker, raw: bytes | None = None, names=("a", "b")) -> Group:
    return Group({name: make_machine(maker, raw) for name in names}, names[0])


def _keys(group: Group) -> set:
    return {m.store.state().agreement_key() for m in group.machines.values()}


def _seqs(machine: StreamStateMachine) -> list[int]:
    found, seq = [], 0
    while True:
        try:
            msg = machine.store.load_next(None, seq)
        except NoMessageFound:
            return found
        found.append(msg.seq)
        seq = msg.seq + 1


def test_msgs_entries_append_with_explicit_seqs_on_every_replica(maker):
    group = _group(maker)
    decision, results = group.publish([pub("orders.a", b"1"), pub("orders.b", b"2"), pub("orders.a", b"3")])
    assert [o.seq for o in decision.outcomes] == [1, 2, 3] and len(decision.entries) == 1
    result = results[0]["b"]
    assert (result.kind, result.first_seq, result.last_seq, result.refused) == (entries.EntryKind.MSGS, 1, 3, None)
    msg = group.machines["b"].store.load(3)
    assert (msg.subject, msg.payload, msg.timestamp_ns) == ("orders.a", b"3", NOW)
    assert len(_keys(group)) == 1
    assert group.machines["b"].last_seq == 3 and group.machines["b"].applied_index == 1


def test_delete_erase_purge_and_expire_apply_identically(maker):
    group = _group(maker)
    for i in range(20):
        group.publish([pub(f"orders.{i % 3}", f"m{i}".encode())], NOW + i * SECOND)
    assert group.commit(entries.encode_delete(4))["a"].removed == 1
    assert group.commit(entries.encode_delete(5, erase=True))["b"].removed == 1
    missing = group.commit(entries.encode_delete(4))["a"]  # inside the live range, deleted before
    assert missing.removed == 0 and missing.error.to_api() == {"code": 400, "err_code": 10043,
                                                               "description": "sequence 4 not found"}
    assert group.commit(group.leader.propose_purge("orders.0", keep=2).entry)["a"].removed == 4
    assert group.commit(group.leader.propose_purge(None, seq=8).entry)["a"].removed == 3
    below = group.commit(entries.encode_delete(2))["b"]  # below first_seq (8): nats-server's other answer
    assert below.removed == 0 and below.error.to_api() == {"code": 500, "err_code": 10057,
                                                           "description": "no message found"}
    machine = group.machines["b"]
    assert _seqs(machine) == [8, 9, 11, 12, 14, 15, 16, 17, 18, 19, 20]
    cutoff = NOW + 12 * SECOND  # messages 1..12 were published before it
    group.commit(entries.encode_expire(cutoff, group.leader.last_seq + 1))
    assert _seqs(machine)[0] == 14
    group.commit(group.leader.propose_purge().entry)
    state = machine.store.state()
    assert (state.msgs, state.first_seq, state.last_seq) == (0, 21, 20)
    assert len(_keys(group)) == 1


def test_expire_never_removes_at_or_above_its_bound(maker):
    group = _group(maker)
    group.publish_many(10, start_ns=NOW, per_entry=1)
    group.commit(entries.encode_expire(NOW + 100 * SECOND, 6))  # everything is older, but the bound is 6
    assert _seqs(group.machines["a"]) == [6, 7, 8, 9, 10]


def test_config_entry_applies_new_limits_and_window(maker):
    group = _group(maker)
    group.publish_many(10)
    result = group.commit(entries.encode_config(config_json(max_msgs=4, duplicate_window=5 * SECOND)))
    assert result["a"].error is None
    for machine in group.machines.values():
        assert machine.config.max_msgs == 4 and machine.store.config.max_msgs == 4
        assert machine.dedupe.window_ns == 5 * SECOND
        assert _seqs(machine) == [7, 8, 9, 10]
    bad = group.commit(entries.encode_config(b'{"name": "OTHER"}'))["a"]
    assert bad.error.err_code == 10069 and group.machines["a"].config.max_msgs == 4


def test_config_entries_are_versioned_by_meta_index_and_never_go_back(maker):
    """A CONFIG proposed by a later leader for an older meta update (or replayed) changes nothing."""
    group = _group(maker)
    assert group.commit(entries.encode_config(config_json(max_msgs=5), meta_index=9))["a"].error is None
    assert group.commit(entries.encode_config(config_json(max_msgs=3), meta_index=7))["a"].error is None
    for machine in group.machines.values():
        assert machine.config.max_msgs == 5 and machine.config_meta_index == 9
    group.commit(entries.encode_config(config_json(max_msgs=6), meta_index=12))
    restored = group.machines["a"]
    assert restored.config.max_msgs == 6
    clone = StreamStateMachine(maker.make(restored.store.config), restored.config, restored.raw_config)
    clone.restore(restored.snapshot())  # the version travels in the snapshot
    assert clone.config_meta_index == 12


def test_audit_reports_the_state_tuple_at_exactly_its_index(maker):
    group = _group(maker)
    group.publish_many(5)
    reports = group.commit(entries.encode_audit(7))
    group.publish_many(5)
    report = group.machines["b"].audit_report(group.index - 1)
    assert report == reports["b"].audit and (report.audit_id, report.last_seq, report.msgs) == (7, 5, 5)
    assert report.agreement_key() == reports["a"].audit.agreement_key()
    assert group.machines["b"].last_audit_id == 7
    with pytest.raises(InvariantViolation):
        group.machines["b"].audit_report(1)


def test_consumer_entries_pass_through_and_malformed_entries_do_not_crash(maker):
    group = _group(maker)
    assert group.commit(entries.encode_consumer(b"ack 5"))["a"].consumer_body == b"ack 5"
    bad = group.commit(b"\x01\x63junk")["a"]
    assert bad.error is not None and bad.error.err_code == 20500
    assert group.machines["a"].applied_index == 2 and group.machines["a"].health is Health.current


def test_entries_at_or_below_the_applied_index_are_skipped_and_gaps_are_bugs(maker):
    machine = make_machine(maker)
    entry = entries.encode_msgs(1, [(b"orders.a", b"", b"x", NOW, b"", 0)])
    machine.apply(1, entry)
    assert machine.apply(1, entry).kind is None and machine.store.state().msgs == 1
    with pytest.raises(InvariantViolation):
        machine.apply(3, entry)


def test_last_sequence_check_marks_a_store_behind_or_ahead_as_drifted(maker):
    group = _group(maker, names=("a", "b", "c"))
    group.publish_many(3)
    group.machines["b"].store.append(4, "orders.rogue", b"", b"?", NOW)  # ahead: not from the log
    group.machines["b"].store_moved()
    group.publish_many(2, start_ns=NOW + 10)
    b = group.machines["b"]
    assert b.health is Health.drifted and b.findings[-1].kind is FindingKind.store_ahead
    assert b.store.state().last_seq == 4  # left alone: never appended at another sequence
    assert b.last_seq == 5  # the group position still follows the log
    group.commit(entries.encode_delete(1))
    assert b.store.state().msgs == 4  # a drifted store is not mutated by entries
    with pytest.raises(StreamNotHealthy):
        b.snapshot()
    assert not b.can_lead


def test_a_store_behind_the_log_is_drift_not_a_silent_append(maker):
    machine = make_machine(maker)
    result = machine.apply(1, entries.encode_msgs(1, [(b"orders.a", b"", b"x", NOW, b"", 0)]))
    assert result.finding is None
    machine.last_seq = 5  # the log says 5 (e.g. an installed snapshot), the store holds 1
    result = machine.apply(2, entries.encode_msgs(6, [(b"orders.a", b"", b"y", NOW, b"", 0)]))
    assert result.finding.kind is FindingKind.store_behind and machine.store.state().last_seq == 1


def test_store_refusal_at_apply_consumes_the_sequence_everywhere(maker):
    group = _group(maker, raw=config_json(discard="new", max_msgs=2))
    # Entries written directly (as an old leader with another config might have): the store refuses the
    # third message, every replica skips its sequence alike and answers it with the store's error.
    msgs = [(f"orders.{i}".encode(), b"", b"x", NOW, b"", 0) for i in range(4)]
    results = group.commit(entries.encode_msgs(1, msgs))
    assert sorted(results["a"].refused) == [3, 4] and results["a"].refused[3].err_code == 10077
    for machine in group.machines.values():
        state = machine.store.state()
        assert (state.msgs, state.last_seq) == (2, 4) and machine.health is Health.current
    group.publish([pub("orders.x")])  # the leader's next seq is 5; nothing drifted
    assert len(_keys(group)) == 1 and group.machines["b"].store.state().last_seq == 4


def test_rollup_messages_purge_after_they_are_stored(maker):
    group = _group(maker, raw=config_json(allow_rollup_hdrs=True))
    group.publish([pub("orders.a", b"1"), pub("orders.a", b"2"), pub("orders.b", b"3")])
    group.publish([pub("orders.a", b"4", Nats_Rollup="sub"), pub("orders.a", b"5")])
    assert _seqs(group.machines["b"]) == [3, 4, 5]
    group.publish([pub("orders.c", b"6", Nats_Rollup="all"), pub("orders.c", b"7")])
    assert _seqs(group.machines["b"]) == [6, 7] and len(_keys(group)) == 1


def test_first_seq_config_numbers_the_stream_from_it(maker):
    group = _group(maker, raw=config_json(first_seq=100))
    decision, _ = group.publish([pub("orders.a")])
    assert decision.outcomes[0].seq == 100
    state = group.machines["b"].store.state()
    assert (state.first_seq, state.last_seq, state.msgs) == (100, 100, 1)


def test_dedupe_window_is_maintained_from_applied_entries(maker):
    group = _group(maker, raw=config_json(duplicate_window=10 * SECOND))
    group.publish([pub("orders.a", Nats_Msg_Id="one")], NOW)
    group.publish([pub("orders.a", Nats_Msg_Id="two")], NOW + 5 * SECOND)
    group.publish([pub("orders.a", Nats_Msg_Id="three")], NOW + 12 * SECOND)
    for machine in group.machines.values():
        assert machine.dedupe.get("one") is None  # aged out by the applied timestamps, not a clock
        assert machine.dedupe.get("two") == (2, NOW + 5 * SECOND)
        assert machine.last_msg_id == "three"


def test_snapshot_restore_round_trip_carries_the_window_and_positions(maker):
    group = _group(maker)
    group.publish([pub("orders.a", Nats_Msg_Id="k1"), pub("orders.b")])
    group.commit(entries.encode_delete(1))
    data = group.machines["a"].snapshot(extra=b"consumers")
    twin = StreamStateMachine(MemStore(StoreConfig(name="ORDERS")), group.machines["a"].config)
    twin.store.append_batch([(1, "orders.a", b"", b"x", NOW), (2, "orders.b", b"", b"x", NOW)])
    twin.store.delete(1)
    plan = twin.restore(data)
    assert plan.is_empty and twin.health is Health.current
    assert (twin.applied_index, twin.last_seq, twin.last_msg_id) == (2, 2, "")
    assert twin.dedupe.get("k1") == (1, NOW) and twin.snapshot_extra == b"consumers"
    assert twin.snapshot(extra=b"consumers") == data


def test_a_snapshot_older_than_the_replica_is_refused_not_installed(maker):
    group = _group(maker)
    group.publish_many(5)
    old = group.machines["a"].snapshot()
    group.publish_many(5)
    with pytest.raises(StaleSnapshot):
        group.machines["b"].restore(old)
    assert group.machines["b"].applied_index == group.index


def test_a_store_whose_last_sequence_left_the_log_cannot_be_snapshotted(maker):
    group = _group(maker)
    group.publish_many(5)
    machine = group.machines["b"]
    machine.store.truncate(3)  # behind the machine's back
    with pytest.raises(StreamNotHealthy):
        machine.snapshot()
    assert machine.health is Health.drifted and machine.findings[-1].kind is FindingKind.sequence_mismatch


def test_a_store_that_copies_payloads_gets_them_as_views_and_holds_the_same_bytes(maker):
    """`FileStore.copies_payloads`: the apply hands it views of the entry; a MemStore, which keeps what it
    is given, gets bytes. Either way the stored messages are the published ones, after a reopen too."""
    group = _group(maker)
    appended: list = []
    store = group.machines["b"].store
    original = store.append_batch
    store.append_batch = lambda msgs: (appended.extend(m[3] for m in msgs), original(msgs))[1]
    group.publish([pub("orders.a", b"p" * 5000), pub("orders.b", b"q")])
    assert [type(p) for p in appended] == [memoryview if isinstance(store, FileStore) else bytes] * 2
    assert [group.machines["b"].store.load(seq).payload for seq in (1, 2)] == [b"p" * 5000, b"q"]
    assert len(_keys(group)) == 1
