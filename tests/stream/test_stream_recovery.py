"""Restart: a replica restores its own snapshot, replays the WAL against a store that may be ahead of it.

Method: a two-replica group on FileStores commits a log; one replica "restarts" at a chosen point — its
store is closed and reopened from disk (a full scan, no index), and a new machine restores the snapshot it
took earlier with `recovering=True` and re-applies the log after it. Replayed entries whose messages the
store already holds must be verified, not appended; bounded PURGE/EXPIRE must not touch later messages;
a store still ahead at the end is truncated back (DESIGN §8), and a replayed message that differs from
the stored one is drift.
"""

from __future__ import annotations

from stream_kit import NOW, Group, make_machine, pub

from jsraft.stream import entries
from jsraft.stream.drift import FindingKind
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.results import Health


def _restart(maker, group: Group, name: str) -> StreamStateMachine:
    old = group.machines[name]
    store = maker.reopen(old.store)
    return StreamStateMachine(store, old.config, old.raw_config)


def _history(file_maker):
    group = Group({"a": make_machine(file_maker), "b": make_machine(file_maker)}, "a")
    group.publish_many(40, per_entry=10)
    snapshot_index = group.index
    snapshot = group.machines["b"].snapshot()
    group.commit(group.leader.propose_purge(None).entry)  # removes 1..40; replaying it must not touch 41..
    group.publish([pub("orders.x", b"after-purge-1"), pub("orders.y", b"after-purge-2")])
    group.commit(entries.encode_delete(41))
    group.commit(entries.encode_expire(NOW - 1, group.leader.last_seq + 1))  # nothing is that old
    group.publish([pub("orders.z", b"tail")])
    return group, snapshot, snapshot_index


def test_replay_against_a_store_that_is_ahead_verifies_instead_of_appending(file_maker):
    group, snapshot, snapshot_index = _history(file_maker)
    machine = _restart(file_maker, group, "b")
    assert machine.replaying
    plan = machine.restore(snapshot, recovering=True)
    assert plan.is_empty, plan  # head moved by a later purge: not judged before the replay
    for index in range(snapshot_index + 1, group.index + 1):
        result = machine.apply(index, group.log[index - 1])
        assert result.finding is None, result
    assert machine.finish_recovery() == []
    assert machine.health is Health.current and not machine.replaying
    assert machine.store.state().agreement_key() == group.machines["a"].store.state().agreement_key()
    assert machine.last_seq == 43 and machine.store.load(42).payload == b"after-purge-2"


def test_a_store_still_ahead_after_the_replay_is_truncated_back(file_maker):
    group, snapshot, snapshot_index = _history(file_maker)
    machine = _restart(file_maker, group, "b")
    machine.restore(snapshot, recovering=True)
    known = group.index - 1  # the last entry (seq 43) is not known committed after the restart
    for index in range(snapshot_index + 1, known + 1):
        machine.apply(index, group.log[index - 1])
    findings = machine.finish_recovery()
    assert [f.kind for f in findings] == [FindingKind.store_ahead] and findings[0].first == 43
    assert machine.store.state().last_seq == 42 and machine.health is Health.current
    result = machine.apply(group.index, group.log[-1])  # the log delivers it again
    assert result.finding is None and machine.store.load(43).payload == b"tail"
    assert machine.store.state().agreement_key() == group.machines["a"].store.state().agreement_key()


def test_a_replayed_message_that_differs_from_the_stored_one_is_drift(file_maker):
    group, snapshot, snapshot_index = _history(file_maker)
    machine = _restart(file_maker, group, "b")
    machine.restore(snapshot, recovering=True)
    for index in range(snapshot_index + 1, group.index):
        machine.apply(index, group.log[index - 1])
    forged = entries.encode_msgs(43, [(b"orders.z", b"", b"not the tail", NOW, b"", 0)])
    result = machine.apply(group.index, forged)
    assert result.finding.kind is FindingKind.content_mismatch and result.finding.first == 43
    assert machine.health is Health.drifted


def test_restart_with_a_store_behind_its_snapshot_plans_the_tail(file_maker):
    group = Group({"a": make_machine(file_maker), "b": make_machine(file_maker)}, "a")
    group.publish_many(30, per_entry=10)
    snapshot = group.machines["a"].snapshot()
    machine = _restart(file_maker, group, "b")
    machine.store.truncate(20)  # as if the last writes never reached the disk
    plan = machine.restore(snapshot, recovering=True)
    assert plan.fetch == ((21, 30),) and [f.kind for f in plan.findings] == [FindingKind.store_behind]
    assert machine.health is Health.repairing
