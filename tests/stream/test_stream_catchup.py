"""Snapshot/restore and range catch-up between two stores, for every finding of DESIGN §8's table.

Method: a leader (MemStore) and a follower (MemStore or FileStore, parametrized where the damage allows)
apply the same log. The follower's store is then damaged the way disks and bugs do — a lost head block,
a lost middle block, a flipped byte (FileStore files edited, then the store reopened with a full scan), a
store ahead of the log, one message's body changed at equal sequences, a head cut beyond the group's.
The follower restores the leader's snapshot, which yields a plan; the plan is checked (it must name the
damage exactly), then carried out by a `CatchupSession` talking to `serve_catchup` through the wire
encoding, and the run must end with identical state tuples and per-range digests. Ranges only a
per-range digest found differing are probed by CRCs first, so only differing messages are fetched.
"""

from __future__ import annotations

import os

import attrs
import pytest
from stream_kit import NOW, Group, StoreMaker, catch_up, make_machine, pub

from jsraft.store.base import DIGEST_RANGE_SEQS, FaultKind, StoreConfig
from jsraft.store.blocks import block_name
from jsraft.store.memstore import MemStore
from jsraft.stream import catchup_wire, entries
from jsraft.stream.catchup import CatchupSession, serve_catchup
from jsraft.stream.catchup_wire import CatchupChunk, CatchupRefusal, CatchupRequest
from jsraft.stream.drift import FindingKind
from jsraft.stream.errors import CatchupFailed, MalformedCatchup
from jsraft.stream.results import Health


def _pair(leader_maker: StoreMaker, follower_maker: StoreMaker, count: int = 2000) -> Group:
    group = Group({"leader": make_machine(leader_maker), "follower": make_machine(follower_maker)}, "leader")
    group.publish_many(count, per_entry=200)
    group.commit(entries.encode_delete(7))  # an interior delete, so deleted ranges are exercised
    return group


def _agree(group: Group) -> None:
    leader, follower = group.machines["leader"], group.machines["follower"]
    assert follower.store.state().agreement_key() == leader.store.state().agreement_key()
    assert follower.store.digest_ranges() == leader.store.digest_ranges()
    assert follower.health is Health.current and not follower.store.faults()


def _resync(group: Group, **options):
    leader, follower = group.machines["leader"], group.machines["follower"]
    plan = follower.restore(leader.snapshot())
    session = catch_up(follower, leader, plan, **options)
    _agree(group)
    return plan, session


def _block_numbers(path) -> list[int]:
    return sorted(int(name[:8]) for name in os.listdir(path) if name.endswith(".blk"))


def _damage_file_store(follower_maker: StoreMaker, group: Group, damage) -> None:
    follower = group.machines["follower"]
    path = follower_maker.paths[id(follower.store)]
    follower.store.sync()
    damage(path)
    follower.replace_store(follower_maker.reopen(follower.store))


def _flip_a_byte_of(follower_maker: StoreMaker, group: Group, seq: int) -> None:
    """Flip one byte of the follower's record of `seq` on disk, then reopen the store (it lists the fault)."""
    block, offset, length, _ = group.machines["follower"].store.locate(seq)

    def flip(path):
        with open(path / block_name(block.number), "r+b") as handle:
            handle.seek(offset + length - 3)
            byte = handle.read(1)[0]
            handle.seek(offset + length - 3)
            handle.write(bytes([byte ^ 0x40]))

    _damage_file_store(follower_maker, group, flip)


def test_missing_head_block_is_fetched_back(mem_maker, file_maker):
    group = _pair(mem_maker, file_maker, count=4000)
    _damage_file_store(file_maker, group, lambda path: os.remove(path / block_name(_block_numbers(path)[0])))
    plan, session = _resync(group)
    assert plan.findings[0].kind is FindingKind.missing_head and plan.fetch[0][0] == 1
    assert not plan.reset  # the store lists the lost head as faults: `repair` puts it back
    assert plan.fetch == ((1, 6), (8, 1256))  # seq 7 was deleted: its tombstone survived in a later block
    assert session.result.verified is True and session.result.fetched_msgs == 1255


def test_hole_from_a_lost_middle_block_fetches_exactly_it(mem_maker, file_maker):
    group = _pair(mem_maker, file_maker, count=4000)  # four blocks: the lost one is not the last
    lost = []

    def lose_middle(path):
        number = _block_numbers(path)[1]
        lost.append(number)
        os.remove(path / block_name(number))

    _damage_file_store(file_maker, group, lose_middle)
    faults = group.machines["follower"].store.faults()
    assert [f.kind for f in faults] == [FaultKind.missing]
    plan, session = _resync(group)
    assert plan.fetch == ((faults[0].first, faults[0].last),)
    assert [f.kind for f in plan.findings] == [FindingKind.hole]
    assert session.result.fetched_msgs == faults[0].last - faults[0].first + 1


def test_corrupt_record_from_a_flipped_byte_is_repaired(mem_maker, file_maker):
    group = _pair(mem_maker, file_maker)
    target = 1234
    _flip_a_byte_of(file_maker, group, target)
    assert [(f.first, f.last, f.kind) for f in group.machines["follower"].store.faults()] == [
        (target, target, FaultKind.corrupt)]
    plan, session = _resync(group)
    assert plan.fetch == ((target, target),) and plan.findings[0].kind is FindingKind.corrupt
    assert session.result.fetched_msgs == 1
    assert group.machines["follower"].store.load(target).payload == f"payload-{target - 1}".encode()


def test_a_damaged_message_the_group_purged_since_is_cut_off_not_resynced_forever(mem_maker, file_maker):
    # Found by the simulator (`--app consumer` seeds 10426, 10568, 10611, 10948): a subject purge cannot
    # match a record whose subject no longer reads back, so the damaged replica kept the fault below the
    # group's first_seq, the plan was empty, and the repair worker resynced every tick forever.
    group = _pair(mem_maker, file_maker)
    target = 1234
    _flip_a_byte_of(file_maker, group, target)
    group.commit(entries.encode_purge("orders.new", 1500, None, 2000))
    leader, follower = group.machines["leader"], group.machines["follower"]
    assert leader.store.state().first_seq == follower.store.state().first_seq == 1500
    assert [(f.first, f.last) for f in follower.store.faults()] == [(target, target)]  # kept by the purge
    plan, session = _resync(group)
    assert plan.compact_to == 1500 and plan.fetch == ()
    assert [(f.kind, f.first, f.last) for f in plan.findings] == [(FindingKind.head_behind, target, 1499)]
    assert session.result.fetched_msgs == 0


def test_an_expiry_a_fault_stopped_runs_again_once_the_fault_is_gone(mem_maker, file_maker):
    # Found by the simulator (`--app consumer --faults all` seed 965): expiry never crosses a fault, so the
    # damaged replica kept the messages above it; the group then deleted the damaged sequence, the fault
    # went with it, and the replica vouched at the next audit for a store still holding messages the log
    # had expired (machine invariant 6).
    group = Group({"leader": make_machine(mem_maker), "follower": make_machine(file_maker)}, "leader")
    for i in range(20):
        group.publish([pub("orders.new", f"payload-{i}".encode())], NOW + i * 1_000_000_000)
    target = 5
    _flip_a_byte_of(file_maker, group, target)
    leader, follower = group.machines["leader"], group.machines["follower"]
    group.commit(entries.encode_expire(NOW + 14 * 1_000_000_000 + 1, 16))  # seqs 1..15 are older
    assert leader.store.state().first_seq == 16 and leader.store.state().msgs == 5
    assert follower.store.state().msgs == 15  # stopped at the fault: 6..15 kept for now
    group.commit(entries.encode_delete(target))  # the group removes the damaged sequence
    assert not follower.store.faults()
    assert follower.store.state().agreement_key() == leader.store.state().agreement_key()
    group.commit(entries.encode_audit(1))
    assert follower.audit_report(group.index).agreement_key() == leader.audit_report(group.index).agreement_key()


def test_store_ahead_of_the_log_is_truncated_back(mem_maker, maker):
    group = _pair(mem_maker, maker, count=300)
    follower = group.machines["follower"]
    follower.store.append_batch([(301 + i, "orders.rogue", b"", b"?", NOW) for i in range(5)])
    plan, session = _resync(group)
    assert plan.truncate_to == 300 and plan.findings[0].kind is FindingKind.store_ahead
    assert session.result.fetched_msgs == 0


def test_changed_body_at_equal_seqs_is_pinpointed_by_range_digests(mem_maker, maker):
    group = Group({"leader": make_machine(mem_maker), "follower": make_machine(maker)}, "leader")
    group.publish_many(5000, per_entry=500)
    good = entries.encode_msgs(5001, [(b"orders.new", b"", b"the real body", NOW, b"", 0)])
    bad = entries.encode_msgs(5001, [(b"orders.new", b"", b"a changed body", NOW, b"", 0)])
    group.commit_each({"leader": good, "follower": bad})
    group.publish_many(4000, per_entry=500, start_ns=NOW + 10_000)
    leader, follower = group.machines["leader"], group.machines["follower"]
    assert follower.store.state().last_seq == leader.store.state().last_seq == 9001
    plan, session = _resync(group)
    range_of_5001 = (DIGEST_RANGE_SEQS + 1, 2 * DIGEST_RANGE_SEQS)
    assert plan.fetch == (range_of_5001,) and [f.kind for f in plan.findings] == [FindingKind.digest_mismatch]
    assert session.result.rebuilt_from == 5001  # the store cannot replace in place: cut there, refetch above
    # The range was probed (CRCs of its 4,096 sequences), not fetched: only 5001 and what follows it is.
    assert session.result.probed_seqs == DIGEST_RANGE_SEQS and session.result.fetched_msgs == 9001 - 5001 + 1
    assert follower.store.load(5001).payload == b"the real body"


def test_a_head_cut_beyond_the_groups_needs_a_fresh_store(mem_maker, maker):
    group = _pair(mem_maker, maker, count=300)
    follower = group.machines["follower"]
    follower.store.compact(250)  # a bug removed messages the group still holds
    leader_snapshot = group.machines["leader"].snapshot()
    plan = follower.restore(leader_snapshot)
    assert plan.reset and plan.findings[-1].kind is FindingKind.missing_head
    with pytest.raises(CatchupFailed, match="fresh store"):
        catch_up(follower, group.machines["leader"], plan)
    fresh = lambda: maker.make(StoreConfig(name="ORDERS", block_size=64 * 1024))  # noqa: E731
    plan = follower.restore(leader_snapshot)
    session = catch_up(follower, group.machines["leader"], plan, reset_store=fresh)
    _agree(group)
    assert session.result.reset and session.result.fetched_msgs == 299


def test_a_logical_hole_and_a_missed_delete_are_reconciled(mem_maker, maker):
    group = _pair(mem_maker, maker, count=500)
    group.commit_each({"leader": entries.encode_delete(100), "follower": entries.encode_consumer(b"")})
    follower = group.machines["follower"]
    follower.store.delete(300)  # deleted here only
    plan, session = _resync(group)
    assert plan.fetch == ((1, 500),) and session.result.rebuilt_from == 300
    # The digest-only range is probed by CRCs (498 live on the leader: 7 and 100 are deleted there), so
    # only 100 (deleted on the leader, live here) and 300..500 (cut at 300, refetched above) are fetched.
    assert session.result.probed_seqs == 498
    assert session.result.deleted_seqs == 1 and session.result.fetched_msgs == 201


def test_many_small_chunks_converge(mem_maker, maker):
    group = _pair(mem_maker, maker, count=600)
    group.machines["follower"].store.truncate(100)
    plan, session = _resync(group, bytes_max=512)
    assert plan.fetch == ((101, 600),) and session.result.fetched_msgs == 500


def test_a_message_removed_after_the_snapshot_leaves_verification_to_the_audit(mem_maker):
    group = _pair(mem_maker, mem_maker, count=100)
    leader, follower = group.machines["leader"], group.machines["follower"]
    follower.store.truncate(50)
    plan = follower.restore(leader.snapshot())
    leader.store.delete(60)  # the leader applies a later DELETE before serving
    session = catch_up(follower, leader, plan)
    assert session.result.verified is None and follower.health is Health.current
    with pytest.raises(Exception):
        follower.store.load(60)


def test_the_leader_refuses_to_serve_ranges_it_has_faults_in(mem_maker, file_maker):
    group = Group({"leader": make_machine(file_maker), "follower": make_machine(mem_maker)}, "leader")
    group.publish_many(200)
    leader = group.machines["leader"]
    block, offset, length, _ = leader.store.locate(150)
    leader.store.sync()
    with open(file_maker.paths[id(leader.store)] / block_name(block.number), "r+b") as handle:
        handle.seek(offset + length - 2)
        handle.write(b"\x00\x00")
    leader.replace_store(file_maker.reopen(leader.store))
    refused = serve_catchup(leader, CatchupRequest(stream="ORDERS", snapshot_index=1, ranges=((100, 160),)))
    assert isinstance(refused, CatchupRefusal) and "faults" in refused.reason
    assert not leader.can_lead
    served = serve_catchup(leader, CatchupRequest(stream="ORDERS", snapshot_index=1, ranges=((1, 10),)))
    assert isinstance(served, CatchupChunk) and len(served.msgs) == 10


def test_a_chunk_with_a_bad_crc_or_wrong_coverage_fails_the_session(mem_maker):
    group = _pair(mem_maker, mem_maker, count=50)
    leader, follower = group.machines["leader"], group.machines["follower"]
    follower.store.truncate(40)
    plan = follower.restore(leader.snapshot())
    session = CatchupSession(follower, plan.group, snapshot_index=leader.applied_index)
    request = session.start(plan)
    chunk = serve_catchup(leader, request)
    seq, subject, headers, payload, ts, crc = chunk.msgs[0]
    tampered = CatchupChunk(msgs=((seq, subject, headers, payload + b"!", ts, crc),) + chunk.msgs[1:],
                            deleted=chunk.deleted, next_seq=chunk.next_seq)
    with pytest.raises(CatchupFailed, match="CRC"):
        session.on_chunk(tampered)
    short = CatchupChunk(msgs=chunk.msgs[1:], deleted=chunk.deleted, next_seq=chunk.next_seq)
    with pytest.raises(CatchupFailed, match="every requested"):
        session.on_chunk(short)
    assert follower.store.state().last_seq == 40 and follower.health is Health.repairing


def test_catchup_wire_round_trips_and_refuses_garbage():
    request = CatchupRequest(stream="ORDERS", snapshot_index=9, ranges=((1, 5), (9, 9)), bytes_max=4096)
    chunk = CatchupChunk(msgs=((1, "orders.a", b"h", b"p", 7, 99), (3, "orders.é", b"", b"", 8, 1)),
                         deleted=((2, 2), (4, 5)), next_seq=9)
    refusal = CatchupRefusal(reason="faults at 3..4")
    assert catchup_wire.decode_catchup(catchup_wire.encode_request(request)) == request
    assert catchup_wire.decode_catchup(catchup_wire.encode_chunk(chunk)) == chunk
    assert catchup_wire.decode_catchup(catchup_wire.encode_refusal(refusal)) == refusal
    encoded = catchup_wire.encode_chunk(chunk)
    for cut in range(len(encoded)):
        with pytest.raises(MalformedCatchup):
            catchup_wire.decode_catchup(encoded[:cut])
    with pytest.raises(MalformedCatchup):
        catchup_wire.decode_catchup(catchup_wire.encode_request(
            CatchupRequest(stream="S", snapshot_index=1, ranges=((5, 9), (1, 2)))))


def test_probe_wire_round_trips_and_refuses_garbage():
    probe = CatchupRequest(stream="ORDERS", snapshot_index=9, ranges=((1, 9),), bytes_max=64, crcs_only=True)
    crcs = CatchupChunk(crcs=((1, 0xFFFFFFFF), (3, 0)), deleted=((2, 2), (4, 5)), next_seq=6)
    assert catchup_wire.decode_catchup(catchup_wire.encode_request(probe)) == probe
    assert catchup_wire.decode_catchup(catchup_wire.encode_chunk(crcs)) == crcs
    encoded = catchup_wire.encode_chunk(crcs)
    for cut in range(len(encoded)):
        with pytest.raises(MalformedCatchup):
            catchup_wire.decode_catchup(encoded[:cut])
    with pytest.raises(MalformedCatchup):  # CRCs out of order
        catchup_wire.decode_catchup(catchup_wire.encode_chunk(CatchupChunk(crcs=((3, 1), (1, 1)))))
    with pytest.raises(MalformedCatchup):  # messages and CRCs in one chunk
        catchup_wire.encode_chunk(CatchupChunk(msgs=((1, "a", b"", b"", 1, 1),), crcs=((2, 1),)))


def test_a_probe_answered_with_messages_or_wrong_crcs_fails_the_session(mem_maker):
    group = Group({"leader": make_machine(mem_maker), "follower": make_machine(mem_maker)}, "leader")
    group.publish_many(100)
    good = entries.encode_msgs(101, [(b"orders.new", b"", b"real", NOW, b"", 0)])
    group.commit_each({"leader": good, "follower": entries.encode_msgs(101, [(b"orders.new", b"", b"fake", NOW, b"", 0)])})
    leader, follower = group.machines["leader"], group.machines["follower"]
    plan = follower.restore(leader.snapshot())
    session = CatchupSession(follower, plan.group, snapshot_index=leader.applied_index)
    probe = session.start(plan)
    assert probe.crcs_only and probe.ranges == ((1, 101),)
    with pytest.raises(CatchupFailed, match="probe with messages"):
        session.on_chunk(serve_catchup(leader, attrs.evolve(probe, crcs_only=False)))
    session = CatchupSession(follower, plan.group, snapshot_index=leader.applied_index)
    probe = session.start(follower.plan_against(plan.group))
    with pytest.raises(CatchupFailed, match="not asked"):
        session.on_chunk(CatchupChunk(crcs=((1, 1), (500, 1))))


def test_a_pristine_replica_catches_up_from_nothing(mem_maker, maker):
    group = _pair(mem_maker, mem_maker, count=700)
    group.commit(group.leader.propose_purge(None, seq=200).entry)
    newcomer = make_machine(maker)
    group.machines["follower"] = newcomer
    plan = newcomer.restore(group.machines["leader"].snapshot())
    assert plan.compact_to == 200 and plan.fetch == ((200, 700),)
    session = catch_up(newcomer, group.machines["leader"], plan)
    _agree(group)
    assert session.result.verified and newcomer.applied_index == group.index
    group.publish([pub("orders.after")])
    _agree(group)


def test_a_pristine_replica_takes_an_empty_groups_moved_first_seq(mem_maker, maker):
    """An empty stream that was purged reports first = last + 1 = 1, a store that never held anything
    first 0: a newcomer restoring the group's snapshot lifts its store to first 1, or every later audit
    finds the two state tuples different (simulator consumer seed 247)."""
    group = Group({"leader": make_machine(mem_maker)}, "leader")
    group.commit(group.leader.propose_purge(None).entry)
    leader = group.machines["leader"]
    assert (leader.store.state().first_seq, leader.store.state().last_seq) == (1, 0)
    newcomer = make_machine(maker)
    assert newcomer.store.state().first_seq == 0
    group.machines["follower"] = newcomer
    plan = newcomer.restore(leader.snapshot())
    assert plan.compact_to == 1 and plan.fetch == ()
    catch_up(newcomer, leader, plan)
    _agree(group)
    pristine = make_machine(maker)  # a group that never moved keeps first 0: nothing to lift
    untouched = Group({"leader": make_machine(mem_maker), "follower": pristine}, "leader")
    assert pristine.restore(untouched.machines["leader"].snapshot()).compact_to is None


def test_memstore_is_not_a_fault_domain_so_plans_never_ask_it_to_repair():
    store = MemStore(StoreConfig(name="ORDERS"))
    assert store.faults() == []
