"""`--app stream`: the simulator runs the real stream state machine; a fixed seed list passes, a replica that
silently diverges is caught by the audit checker, and the production bugs the stream simulator found are
pinned here.

Method: `run_batch` over `SEEDS` with `app="stream"` (even seeds 3 nodes, odd 5; every fault kind), in two
worker processes: every node runs production's `StreamAdapter` around a `StreamStateMachine` on a
`FileStore` on its own `SimDisk`, the workload publishes (with msg-ids and duplicates), deletes, purges,
updates the config and expires, the leader audits, snapshots go through the adapter and a restored plan
is carried out by production's repair decisions (`jsraft.replica.stream_repair`) against the stream leader. The mutant `stream-skip-delete` makes `n1` skip every DELETE; it must
be caught as `stream-audit` and the honest code must pass the same seed.

The production bugs the stream simulator found, each pinned by a small deterministic reproduction (all
fixed now; every path they were found on is on in the simulator by default — `discard: new`, per-subject
limit changes by CONFIG, read-time bit flips reaching the store):
  1. FileStore: a record found damaged on read (`detach(readable=False)`) and then `repair()`ed was
     counted twice: `bytes`, its subject's count and its range digest stayed wrong.
  2. CatchupSession: the fetched tail was appended before the messages the group deleted were removed
     from the local store, so a `discard: new` store at `max_msgs` refused it: `CatchupFailed` on every
     try. A session now lifts the store's limits until `finish_repair` (catchup invariant 5).
  3. A CONFIG entry that changes the store's limits, replayed after a restart against a store that already
     holds later entries' messages, enforced its limits against those messages: the replica removed
     messages the group keeps (seeds 31, 37, 53, 63 of an early run with limit changes; stream-audit).
     A replayed CONFIG now applies its limits only to a store at its position, opening a store applies
     none, and the entry holding the store's last sequence applies its limits again
     (tests/stream/test_stream_recovery.py).
  4. FileStore `erase` overwrote an older block in place and synced only that block: a torn crash kept
     the erase and lost an earlier, unsynced limit tombstone, so the replay settled that limit differently
     from the group (seed 291; stream-audit). `erase` now syncs first
     (tests/store/test_filestore_powercut.py).
  5. FileStore read errors (read-time bit flips, on once the paths above were): a removal parsed its
     record's subject and size from an unverified read (wrong `bytes`, a `UnicodeDecodeError` or a
     zstd error: seeds 324, 389, 417, 481, 491 of a 500-seed run), scans, expiry and the `discard: new`
     dry run decided on unverified subjects and timestamps, recovery cut a flipped synced tail as torn,
     and deleting a repaired message took its subject from the block holding the repair record, so a
     scan by subject skipped live messages and a limit removed newer ones (seed 469). Reads a decision
     rests on are verified and read again past the cache; expiry stops at a fault
     (tests/store/test_filestore_read_errors.py). Per-subject limits are applied in sorted subject order:
     a set's order changed with the hash seed, and with it which read a flip hit (a run was not a
     function of its seed).
  6. `StreamLeader.decide` let a `DamagedSequence` escape when the `discard: new` dry run read a flipped
     record to size the message a publish would evict (seed 191, `crash`, once the production Ready
     cycle changed the run's path); the publish is now refused as unavailable (10008) and the store
     lists the fault (stream/leader.py invariant 4).
  7. Once the simulator drove production's repair (issue #13): nothing fsynced the store when a catch-up
     ended, while the WAL's snapshot already covered the fetched messages: a power failure then lost
     acknowledged messages on that replica (seed 16, `acked-lost`; the simulator's own repair copy had
     synced on removing a durable marker production never had). `stream_repair.finish_session` syncs
     first (tests/server/test_repair_decisions.py).
  8. FileStore `erase` of the last message of an older block: the delete removed the emptied block's
     file and the overwrite reopened it (seed 249, `crash`: FileNotFoundError out of a DELETE's apply,
     which stops the group). The erase now returns once the block is gone
     (tests/store/test_filestore_powercut.py).
  9. FileStore recovery with the newest synced message damaged (a corrupt trailing gap) left `last_seq`
     past the newest block's last sequence; the next append took its slot one place early, so the block
     covered one sequence more than its offsets and the next expiry walked past them (seed 746, `crash`:
     IndexError in `live_seqs_between`). Recovery now covers the trailing gap with the newest block
     (tests/store/test_damaged_tail_then_append.py).
And two fixed in `stream/machine.py`: `snapshot()` let a `DamagedSequence` found while it read the store
escape instead of refusing with `StreamNotHealthy` (which a runtime expects from it); a store whose only
earlier change was a moved head (a purge of an empty stream) was not treated as needing the replay's
verification, so the AUDIT replayed before that purge reported a state the group did not hold (seed 138).
Found by the background sweep (seeds 10313, 10601, 10562), pinned below it and replayed here whole: a
leader's snapshot restored after a crash before its repair was taken for the replica's own (the install
mark, replica/install_mark.py), and a WAL header's version byte read flipped once stopped a node.
"""

from __future__ import annotations

import json
import random

import pytest

from jsraft.errors import DamagedSequence
from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.replica.state_machine import SnapshotUnavailable
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.store.base import StoreConfig
from jsraft.store.blocks import block_name
from jsraft.store.filestore import FileStore
from jsraft.store.memstore import MemStore
from jsraft.stream import StreamLeader, StreamStateMachine, catchup_wire, entries, store_config_for
from jsraft.stream.catchup import CatchupSession, serve_catchup
from jsraft.stream.errors import StreamNotHealthy
from jsraft.testing.sim import parse_faults, run_batch, run_seed
from jsraft.testing.sim.batch import config_for
from jsraft.testing.simdisk import SimDisk

SEEDS = range(0, 40)  # sized to the time budget of tests/sim (~0.8 CPU-s per stream seed)
MUTANT_SEEDS_MAX = 40


def test_fixed_stream_seeds_pass_with_all_faults() -> None:
    configs = [config_for(seed, nodes="mixed", app="stream") for seed in SEEDS]
    batch = run_batch(configs, jobs=2)
    batch.raise_with_traces()
    assert batch.passed == len(SEEDS) and batch.steps >= len(SEEDS) * configs[0].steps


def test_a_stream_run_does_stream_work() -> None:
    # Seed 7 (was 3, 5 nodes too: with the repaired replica asking until it reported an audit, seed 3's
    # schedule drew no purge; the thresholds are unchanged).
    result = run_seed(config_for(7, app="stream"))
    assert result.ok, f"[{result.invariant}] {result.detail}"
    stats = result.stats
    assert stats["publishes_acked"] > 100 and stats["stream_deletes"] > 0 and stats["stream_purges"] > 0
    assert stats["audits_vouched"] > 20, "audit reports were compared"
    assert stats["catchups"] > 0, "snapshots were installed and caught up"


def test_a_replica_skipping_deletes_is_caught_by_the_audit_checker() -> None:
    configs = [config_for(seed, nodes="mixed", app="stream", mutant="stream-skip-delete")
               for seed in range(MUTANT_SEEDS_MAX)]
    batch = run_batch(configs, jobs=2, stop_at_first_failure=True)
    assert batch.failed == 1, f"the skipped deletes survived {MUTANT_SEEDS_MAX} seeds"
    caught = batch.failures[0]
    assert caught.invariant == "stream-audit" and "n1" in (caught.detail or ""), caught.detail
    honest = run_seed(config_for(caught.seed, nodes="mixed", app="stream"))
    assert honest.ok, f"the real code fails seed {caught.seed} too: [{honest.invariant}] {honest.detail}"


# --- Production bugs found by the stream simulator ----------------------------------------------------


def _machine(store_config: StoreConfig | None = None, **fields: object) -> StreamStateMachine:
    config, raw = parse_stream_config(json.dumps({"name": "S", "subjects": ["s.>"], **fields}).encode())
    store = MemStore(store_config_for(config, store_config or StoreConfig(name="S")))
    return StreamStateMachine(store, config, raw)


def test_a_record_damaged_on_read_then_repaired_is_counted_once() -> None:
    disk = SimDisk(random.Random(1))
    config = StoreConfig(name="S", block_size=64 << 10)
    store, mirror = FileStore.open(disk.sub("msgs"), config), MemStore(config)
    for seq in range(1, 11):
        message = (seq, "s.a" if seq % 2 else "s.b", b"", b"payload-%d" % seq, 1000 + seq)
        store.append(*message)
        mirror.append(*message)
    block, offset, length, _ = store.locate(5)
    disk.sub("msgs").flip_bit(block_name(block.number), offset + length - 3)
    with pytest.raises(DamagedSequence):
        store.load(5)
    store.repair(5, "s.a", b"", b"payload-5", 1005)
    assert store.state() == mirror.state()
    assert store.subject_counts() == mirror.subject_counts()
    assert store.digest_ranges() == mirror.digest_ranges()


def _catch_up(follower: StreamStateMachine, leader: StreamStateMachine) -> None:
    plan = follower.restore(leader.snapshot())
    session = CatchupSession(follower, plan.group, snapshot_index=leader.applied_index)
    request = session.start(plan)
    while request is not None:
        answer = serve_catchup(leader, catchup_wire.decode_catchup(catchup_wire.encode_request(request)))
        request = session.on_chunk(answer)  # type: ignore[arg-type]


def test_a_discard_new_store_at_its_limit_can_be_caught_up() -> None:
    leader, follower = _machine(max_msgs=10, discard="new"), _machine(max_msgs=10, discard="new")
    decider, index = StreamLeader(leader), 0
    for number in range(15):
        if number == 10:
            for seq in range(3, 8):  # the follower misses these deletes and the five messages after them
                index += 1
                leader.apply(index, entries.encode_delete(seq))
        for entry in decider.decide([("s.a", b"", b"m%d" % number)], 1000 + number).entries:
            index += 1
            leader.apply(index, entry)
            if number < 10:
                follower.apply(index, entry)
    _catch_up(follower, leader)  # raised CatchupFailed ("the store refused fetched messages") before the fix
    assert follower.store.state().agreement_key() == leader.store.state().agreement_key()


def test_a_config_replayed_against_a_store_ahead_keeps_what_the_group_keeps() -> None:
    log: list[bytes] = []
    reference = _machine()
    decider = StreamLeader(reference)
    limited = json.dumps({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 2}).encode()
    unlimited = json.dumps({"name": "S", "subjects": ["s.>"]}).encode()
    log += decider.decide([("s.a", b"", b"m%d" % n) for n in range(3)], 1000).entries
    log += [entries.encode_config(limited, 1), entries.encode_config(unlimited, 2)]
    for index, entry in enumerate(log, 1):
        reference.apply(index, entry)
    log += decider.decide([("s.a", b"", b"m%d" % n) for n in range(3, 5)], 2000).entries
    reference.apply(len(log), log[-1])
    # A replica that applied all of it and restarts: its store (durable) is the reference's; the WAL replays.
    store = MemStore(reference.store.config)
    for seq in range(1, 6):
        try:
            message = reference.store.load(seq)
        except Exception:
            store.skip(seq, 1)
            continue
        store.append(seq, message.subject, message.headers, message.payload, message.timestamp_ns)
    restarted = StreamStateMachine(store, reference.config, unlimited)
    assert restarted.replaying
    for index, entry in enumerate(log, 1):
        restarted.apply(index, entry)
    restarted.finish_recovery()
    assert store.state().agreement_key() == reference.store.state().agreement_key()


def test_a_snapshot_that_finds_a_damaged_record_refuses() -> None:
    disk = SimDisk(random.Random(2))
    config, raw = parse_stream_config(json.dumps({"name": "S", "subjects": ["s.>"]}).encode())
    store = FileStore.open(disk.sub("msgs"), store_config_for(config, StoreConfig(name="S", block_size=64 << 10)))
    machine = StreamStateMachine(store, config, raw)
    machine.apply(1, entries.encode_msgs(1, [(b"s.a", b"", b"p%d" % n, 1000 + n, b"", 0) for n in range(10)]))
    machine.apply(2, entries.encode_delete(3))  # an interior delete
    block, offset, length, _ = store.locate(7)
    disk.sub("msgs").flip_bit(block_name(block.number), offset + length - 3)
    assert machine.can_lead  # nobody read it yet
    # The stream's own snapshot reads no record (a FileStore's interior deletes come from its block
    # summaries); the replica's snapshot, what the cycle compacts by, reads back every message stored since
    # the last one before the log drops the entries that could rewrite them (StreamAdapter invariant 5).
    with pytest.raises(SnapshotUnavailable, match="sequence 7 is damaged"):
        StreamAdapter(machine).snapshot()
    assert [f.first for f in store.faults()] == [7] and not machine.can_lead
    with pytest.raises(StreamNotHealthy):
        machine.snapshot()  # and the listed fault refuses the stream's own snapshot too


def test_stream_seed_191_passes() -> None:
    """Bug 6: a read-time flip hits the record `load` reads for the dry run (the scan that found it had
    read it intact), so only a whole run reaches it; it crashed with `DamagedSequence` before the fix."""
    result = run_seed(config_for(191, nodes="mixed", app="stream"), replay_failures=False)
    assert result.ok, f"[{result.invariant}] {result.detail}"


def test_stream_seed_249_passes() -> None:
    """Bug 8: only a whole run erased the last message of an older block; it crashed before the fix."""
    result = run_seed(config_for(249, nodes="mixed", app="stream"), replay_failures=False)
    assert result.ok, f"[{result.invariant}] {result.detail}"


def test_stream_seed_746_passes() -> None:
    """Bug 9: a whole run reaches the append after a damaged-tail recovery; it crashed before the fix."""
    found_with = parse_faults("net,disk,crash,membership")  # `all` then: `storage` (added since) moves it
    result = run_seed(config_for(746, nodes="mixed", app="stream", faults=found_with), replay_failures=False)
    assert result.ok, f"[{result.invariant}] {result.detail}"


def test_a_store_whose_only_change_is_a_moved_head_is_replayed() -> None:
    # Stream seed 138: a PURGE of the still empty stream left the store at (first 1, last 0); after a
    # restart the machine did not count that as an earlier run's state, so the AUDIT replayed before the
    # PURGE reported (1, 0, ...) against the group's (0, 0, ...).
    reference = _machine()
    log = [entries.encode_audit(1), entries.encode_purge(None, None, None, 0), entries.encode_audit(2)]
    for index, entry in enumerate(log, 1):
        reference.apply(index, entry)
    store = MemStore(reference.store.config)
    store.purge()  # what the replica's durable store held when it crashed
    restarted = StreamStateMachine(store, reference.config, reference.raw_config)
    assert restarted.replaying  # so its runtime keeps the replayed AUDIT's report to itself
    for index, entry in enumerate(log, 1):
        restarted.apply(index, entry)
    restarted.finish_recovery()
    assert store.state().agreement_key() == reference.store.state().agreement_key()


def test_a_snapshot_refused_for_a_damaged_read_is_skipped_by_the_production_cycle() -> None:
    """Seed 5: a read-time flip found while a replica builds its own snapshot. The simulator no longer
    catches the refusal itself: `StreamAdapter.snapshot()` raises `SnapshotUnavailable` into production's
    `GroupCycle`, which skips that compaction (cycle invariant 5), and the run still passes every check.
    Since 2026-11-27 a snapshot reads back only the messages stored since the last one (a FileStore's
    interior deletes come from its block summaries, not a walk over every live message), so this seed's
    flip, in an older record, is no longer met by a snapshot and nothing is refused: the seed must still
    pass. The refusal itself is checked by `test_a_snapshot_that_finds_a_damaged_record_refuses` (the
    adapter) and tests/replica/test_replica_cycle_snapshot.py (the production cycle skipping it)."""
    result = run_seed(config_for(5, app="stream"))
    assert result.ok, f"[{result.invariant}] {result.detail}"


def test_a_leaders_snapshot_is_not_compacted_into_the_wal_before_the_store_is_durable() -> None:
    """Seed 185 (`stream-audit` at AUDIT 77, found 2026-11-27 on main e27212d, a production bug): n4's store
    already matched the leader's snapshot at 72 (no plan), through deletes it had applied but not fsynced;
    the WAL saved the snapshot and dropped the entries; a crash lost the deletes, and recovery found the two
    messages back. `StreamAdapter.prepare_install` now fsyncs the store before the WAL compacts."""
    result = run_seed(config_for(185, app="stream"))
    assert result.ok, f"[{result.invariant}] {result.detail}"


@pytest.mark.parametrize("seed", [10313, 10601, 10562, 55626])
def test_stream_seeds_found_by_the_sweep_pass(seed: int) -> None:
    """10313, 10601: a leader's snapshot installed, the node crashed before its repair, and the restart took
    it for its own (tests/server/test_install_mark.py); 10562: a transient read flip of a WAL segment's
    version byte stopped a restarting node (tests/wal/test_wal_header_flip.py); 55626: the checker, not the
    code — a deposed leader of term 8 lacked an entry of term 6 committed later, in term 9
    (tests/sim/test_sim_checkers.py)."""
    result = run_seed(config_for(seed, nodes="mixed", app="stream"), replay_failures=False)
    assert result.ok, f"[{result.invariant}] {result.detail}"
