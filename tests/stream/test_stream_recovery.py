"""Restart: a replica restores its own snapshot, replays the WAL against a store that may be ahead of it.

Method: a two-replica group on FileStores commits a log; one replica "restarts" at a chosen point — its
store is closed and reopened from disk (a full scan, no index), and a new machine restores the snapshot it
took earlier with `recovering=True` and re-applies the log after it. Replayed entries whose messages the
store already holds must be verified, not appended; bounded PURGE/EXPIRE must not touch later messages;
a store still ahead at the end is truncated back (DESIGN §8), and a replayed message that differs from
the stored one is drift. Limits: opening a store applies none; a replayed CONFIG applies its limits only
to a store at its position, and the entry holding the store's last sequence applies its limits again (a
crash may have lost the tombstones they wrote) — checked against the group's store.
"""

from __future__ import annotations

from stream_kit import NOW, SMALL_BLOCK_BYTES, Group, config_json, make_machine, pub

from jsraft.disk import OsDisk
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.store.base import StoreConfig, StreamStore
from jsraft.store.filestore import FileStore
from jsraft.stream import entries, store_config_for
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


# --- Limits at a replay: applied at the entry's position, never to later entries' messages --------------


def _reopen_with(file_maker, store, config) -> StreamStore:
    """A restart whose store is opened with `config` (as the simulator opens it with its snapshot's)."""
    path = file_maker.paths.pop(id(store))
    store.close()
    reopened = FileStore.open(OsDisk(str(path)), config, use_index=False)
    file_maker.paths[id(reopened)] = path
    file_maker.opened.append(reopened)
    return reopened


def test_a_replayed_config_does_not_apply_its_limits_to_later_messages(file_maker):
    # Stream seeds 31, 37, 53, 63 (with limit changes): the store, opened with the snapshot's tighter
    # limits, and the replayed CONFIG both cut messages appended after it under the looser ones.
    limited = config_json(max_msgs_per_subject=2)
    group = Group({"a": make_machine(file_maker, limited), "b": make_machine(file_maker, limited)}, "a")
    group.publish([pub("orders.a", b"m%d" % n) for n in range(3)])  # the limit keeps 2 and 3
    snapshot, snapshot_index = group.machines["b"].snapshot(), group.index
    group.commit(entries.encode_config(config_json(), 1))  # unlimited from here on
    group.publish([pub("orders.a", b"m%d" % n) for n in range(3, 6)])
    old = group.machines["b"]
    config, raw = parse_stream_config(limited)
    store = _reopen_with(file_maker, old.store, store_config_for(config, old.store.config))
    assert store.subject_counts() == {"orders.a": 5}  # opening applies no limits
    machine = StreamStateMachine(store, config, raw)
    assert machine.restore(snapshot, recovering=True).is_empty
    for index in range(snapshot_index + 1, group.index + 1):
        assert machine.apply(index, group.log[index - 1]).finding is None
    assert machine.finish_recovery() == []
    assert store.state().agreement_key() == group.machines["a"].store.state().agreement_key()
    assert store.config.max_msgs_per_subject == -1


def test_a_replay_applies_the_limits_whose_tombstones_a_crash_lost(file_maker):
    # A crash kept the last entry's append but not the tombstone its per-subject limit wrote: the store
    # holds 1, 2, 3 where the group holds 2, 3. The replay of that entry applies the limit again.
    limited = config_json(max_msgs_per_subject=2)
    group = Group({"a": make_machine(file_maker, limited)}, "a")
    group.publish([pub("orders.a", b"m0"), pub("orders.a", b"m1")])
    group.publish([pub("orders.a", b"m2")])
    crashed = file_maker.make(StoreConfig(name="ORDERS", block_size=SMALL_BLOCK_BYTES))
    for entry in group.log:
        batch = entries.decode_entry(entry)
        crashed.append_batch([(batch.first_seq + i, m[0], m[1], m[2], m[3]) for i, m in enumerate(batch.msgs)])
    config, raw = parse_stream_config(limited)
    store = _reopen_with(file_maker, crashed, store_config_for(config, crashed.config))
    assert store.subject_counts() == {"orders.a": 3}
    machine = StreamStateMachine(store, config, raw)
    for index, entry in enumerate(group.log, 1):
        assert machine.apply(index, entry).finding is None
    assert machine.finish_recovery() == []
    assert store.state().agreement_key() == group.machines["a"].store.state().agreement_key()


# --- A power cut can damage records anywhere after the store's last fsync, on every replica -------------


def test_a_replay_rewrites_a_damaged_record_from_the_log(file_maker):
    """The store is not fsynced per batch (DESIGN §2): after a power cut a record the store lost (torn or
    zeroed page) may be damaged on every replica at once, so no peer can supply it; the WAL holds the
    committed entry and the replay rewrites the record from it. Fails if verify_run merely skips a
    damaged record (the replica then keeps a fault and its state differs from the leader's)."""
    import random

    from jsraft.testing.chaos import disk_faults

    group = Group({"a": make_machine(file_maker), "b": make_machine(file_maker)}, "a")
    group.publish_many(60, per_entry=10)
    old = group.machines["b"]
    path = file_maker.paths[id(old.store)]
    old.store.close()
    flipped = disk_faults.flip_bits(str(path), random.Random(7), 2, include_newest=True)
    store = FileStore.open(OsDisk(str(path)), old.store.config, use_index=False)
    file_maker.paths.pop(id(old.store))
    file_maker.paths[id(store)] = path
    file_maker.opened.append(store)
    damaged = flipped["seq"]
    assert [(f.first, f.last) for f in store.faults()] == [(damaged, damaged)]
    machine = StreamStateMachine(store, old.config, old.raw_config)
    for index in range(1, group.index + 1):
        result = machine.apply(index, group.log[index - 1])
        assert result.finding is None, result
    assert machine.finish_recovery() == []
    assert store.faults() == [] and machine.health is Health.current
    assert store.state().agreement_key() == group.machines["a"].store.state().agreement_key()
    assert store.load(damaged).payload == group.machines["a"].store.load(damaged).payload
