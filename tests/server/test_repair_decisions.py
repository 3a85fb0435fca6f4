"""`jsraft.replica.stream_repair` and `stream_leading`: the repair and leading decisions production's repair
worker and the simulator share (unit tests: no network, no trio).

Method: a leader `StreamStateMachine` on a MemStore applies a log of real MSGS entries (the `Log`,
`machine` and `follower` of test_repair_adapter.py); a follower's production `StreamAdapter` is fed the same entries,
restores the leader's snapshot or begins a resync, and the decisions are asked at each point: which job
comes next, the session that carries out a plan (first try and retry), the release of the held entries
only for the plan's own generation, when the replica is whole again and when it is unfit to lead, and
the leader's answer to a catch-up request (served, or refused when the request is beyond what it
applied or for another stream), whether a voter can take over from an unfit leader and which one the
leader picks (or none: it stays), and that a finished catch-up survives a power failure (a FileStore on a
`SimDisk`, crashed right after `finish_session`). Repair sources: a source is refused, with a stable code
that crosses the wire, while not current or while its store is unjudged (a disagreeing verdict or an
unverified repair, with no agreeing verdict above it or verified repair since). A follower whose store cut its head beyond the group's refills a
store built beside the old one (`store.swap.BesideBuild`): failing midway leaves the old store as it
was and readable; finishing swaps the verified store in, and a power failure after that keeps it.
"""

from __future__ import annotations

import random

import pytest

from jsraft.jsapi.stream_config import parse_stream_config
from jsraft.replica import stream_repair as decide
from jsraft.replica.judgement import Judgement
from jsraft.replica.stream_leading import leader_ready
from jsraft.replica.stream_adapter import StreamAdapter
from jsraft.store.filestore import FileStore
from jsraft.store.swap import BesideBuild, recover_swap
from jsraft.stream import (
    CatchupRefusal, CatchupRequest, Finding, FindingKind, MalformedCatchup, RefusalCode, StreamStateMachine,
    decode_catchup, encode_refusal, store_config_for,
)
from jsraft.testing.simdisk import SimDisk
from test_repair_adapter import Log, follower

LIVE = "stream/msgs"

def test_a_restored_plan_is_carried_out_and_released_for_its_own_generation_only():
    log, adapter = Log(), follower()
    adapter.apply([log.msgs(100)])
    log.msgs(100)
    assert decide.next_job(adapter, escalate=False) is None and decide.is_whole(adapter)
    adapter.restore(log.leader.snapshot())  # InstallSnapshot at 2: the store lacks 101..200
    assert decide.next_job(adapter, escalate=False) is decide.Job.carry_out
    assert decide.next_job(adapter, escalate=True) is decide.Job.resync
    assert not decide.is_whole(adapter) and decide.unfit_to_lead(adapter)
    adapter.apply([log.msgs(10)])  # held back behind the plan

    session, plan = decide.open_session(adapter, first=True, reset_store=None, bytes_max=1 << 20)
    assert plan is adapter.plan.plan and plan.fetch == ((101, 200),)
    request = session.start(plan)
    while request is not None:
        answer = decide.answer_catchup(log.leader, "S", request)
        request = session.on_chunk(answer)
    assert not decide.finish_session(adapter, session, adapter.generation - 1)  # a stale session
    assert adapter.holding and adapter.deferred == 1
    assert decide.finish_session(adapter, session, adapter.generation)
    assert not adapter.holding and adapter.machine.applied_index == 3
    assert decide.is_whole(adapter) and not decide.unfit_to_lead(adapter)
    assert adapter.machine.store.state().agreement_key() == log.leader.store.state().agreement_key()


def test_a_retry_plans_again_against_the_store_as_it_is_now():
    log, adapter = Log(), follower()
    adapter.apply([log.msgs(100)])
    log.msgs(100)
    adapter.restore(log.leader.snapshot())
    first_plan = adapter.plan.plan
    _, plan = decide.open_session(adapter, first=False, reset_store=None, bytes_max=1 << 20)
    assert plan is not first_plan and plan.fetch == first_plan.fetch  # recomputed, same store


def test_a_drifted_or_faulty_replica_resyncs_but_waits_for_a_pending_resync_index():
    log, adapter = Log(), follower()
    adapter.apply([log.msgs(100)])
    adapter.machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch))
    assert decide.next_job(adapter, escalate=False) is decide.Job.resync
    log.msgs(10)
    adapter.begin_resync(2, log.leader.snapshot())  # the leader stands at 2, this replica at 1
    assert adapter.resync_pending == 2
    assert decide.next_job(adapter, escalate=False) is None  # the log has to reach 2 first
    assert decide.unfit_to_lead(adapter)


def test_the_leader_refuses_a_request_beyond_what_it_applied_or_for_another_stream():
    log = Log()
    log.msgs(10)
    ahead = CatchupRequest(stream="S", snapshot_index=5, ranges=((1, 10),), bytes_max=1 << 16)
    assert isinstance(decide.answer_catchup(log.leader, "S", ahead), CatchupRefusal)
    other = CatchupRequest(stream="T", snapshot_index=1, ranges=((1, 10),), bytes_max=1 << 16)
    assert isinstance(decide.answer_catchup(log.leader, "S", other), CatchupRefusal)
    served = CatchupRequest(stream="S", snapshot_index=1, ranges=((1, 10),), bytes_max=1 << 16)
    assert not isinstance(decide.answer_catchup(log.leader, "S", served), CatchupRefusal)


def test_leader_ready_needs_every_condition():
    log = Log()
    log.msgs(1)
    ready = dict(is_leader=True, noop_term=3, current_term=3, applied_index=7, last_index=7, machine=log.leader)
    assert leader_ready(**ready)
    for key, value in (("is_leader", False), ("noop_term", 2), ("applied_index", 6), ("machine", None)):
        assert not leader_ready(**{**ready, key: value}), key
    log.leader.mark_drifted(Finding(kind=FindingKind.audit_mismatch))
    assert not leader_ready(**ready)


def test_a_finished_catch_up_is_durable_before_the_held_entries_apply():
    """Invariant 3: the fetched messages survive a power failure right after the session ended (without
    the fsync they were only in memory while the WAL's snapshot already covered them)."""
    log = Log()
    config, raw = parse_stream_config(b'{"name": "S", "subjects": ["s.>"]}')
    disk = SimDisk(random.Random(7), corruption_allowed=False)
    store_config = store_config_for(config)
    adapter = StreamAdapter(StreamStateMachine(FileStore.open(disk.sub("msgs"), store_config), config, raw))
    adapter.recovery_target = 0
    log.msgs(40), log.msgs(40)
    adapter.restore(log.leader.snapshot())  # the leader's snapshot at 2: fetch 1..80
    session, plan = decide.open_session(adapter, first=True, reset_store=None, bytes_max=1 << 20)
    request = session.start(plan)
    while request is not None:
        request = session.on_chunk(decide.answer_catchup(log.leader, "S", request))
    assert decide.finish_session(adapter, session, adapter.generation)
    disk.crash(torn=False)
    reopened = FileStore.open(disk.sub("msgs"), store_config)
    assert reopened.state().agreement_key() == log.leader.store.state().agreement_key()


def test_a_voter_can_take_over_only_in_a_state_it_would_keep_leading_in():
    """Invariant 6, the voter's side: each way of being unable (a plan to carry out, a resync awaited,
    drifted, a Raft log repairing) answers no; and a yes never comes from a replica that would find
    itself unfit once leading — the hand-back that made the leadership bounce."""
    log, whole, drifted, planned, awaiting = Log(), follower(), follower(), follower(), follower()
    first = log.msgs(100)
    for adapter in (whole, drifted, planned, awaiting):
        adapter.apply([first])
    log.msgs(100)
    drifted.machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch))
    planned.restore(log.leader.snapshot())  # InstallSnapshot at 2: a catch-up of 101..200 is pending
    awaiting.begin_resync(2, log.leader.snapshot())  # this replica applied only 1: it waits for 2
    answers = {"whole": decide.can_take_over(whole, raft_repairing=False),
               "raft log repairing": decide.can_take_over(whole, raft_repairing=True),
               "drifted": decide.can_take_over(drifted, raft_repairing=False),
               "plan pending": decide.can_take_over(planned, raft_repairing=False),
               "resync awaited": decide.can_take_over(awaiting, raft_repairing=False)}
    assert answers == {"whole": True, "raft log repairing": False, "drifted": False, "plan pending": False,
                       "resync awaited": False}
    for adapter in (whole, drifted, planned, awaiting):
        assert decide.can_take_over(adapter, raft_repairing=False) == (not decide.unfit_to_lead(adapter))


def test_the_successor_is_the_most_caught_up_voter_that_said_it_can_lead_or_none():
    """Invariant 6, the leader's side: `reachable` comes most caught-up first; unable or silent voters
    are passed over; with none able the leader stays (None), never an unfit voter."""
    reachable = ("n2", "n3", "n4", "n5")
    assert decide.successor(reachable, {"n2": False, "n3": True, "n4": True}) == "n3"
    assert decide.successor(reachable, {"n2": True, "n3": True}) == "n2"
    assert decide.successor(reachable, {"n5": True}) == "n5"  # n2..n4 did not answer: unable
    assert decide.successor(reachable, {"n2": False, "n3": False, "n4": False, "n5": False}) is None
    assert decide.successor(reachable, {}) is None
    assert decide.successor((), {"n2": True}) is None  # only reachable voters are candidates


def test_only_a_verified_source_serves_and_says_why_not_with_a_stable_code():
    """Invariant 7: current, fault-free, and its store not unjudged (`Judgement`: no disagreeing verdict and
    no unverified repair since its last agreeing verdict or verified repair); the refusal's code crosses
    the wire."""
    log = Log()
    log.msgs(10)
    judgement = Judgement()
    assert decide.source_refusal(log.leader, judgement) is None  # no verdict known yet
    assert judgement.verdict(5, True) and decide.source_refusal(log.leader, judgement) is None
    assert judgement.verdict(7, False)  # its store disagreed with the majority at the audit at 7
    refusal = decide.source_refusal(log.leader, judgement)
    assert refusal is not None and refusal.code == RefusalCode.source_disagreed
    assert judgement.verdict(6, True) and decide.source_refusal(log.leader, judgement) is not None  # older
    assert judgement.verdict(7, True) and decide.source_refusal(log.leader, judgement) is not None  # not above
    judgement.repaired(8, verified=False)  # repaired since, but the session could not verify it
    refusal = decide.source_refusal(log.leader, judgement)
    assert refusal is not None and refusal.code == RefusalCode.source_unjudged
    assert not judgement.verdict(8, False)  # about the store before that repair: stale
    assert judgement.verdict(9, True) and decide.source_refusal(log.leader, judgement) is None
    assert judgement.verdict(10, False) and decide.source_refusal(log.leader, judgement) is not None
    judgement.repaired(11, verified=True)  # a verified repair judges the store by itself
    assert decide.source_refusal(log.leader, judgement) is None
    assert decode_catchup(encode_refusal(refusal)) == refusal
    with pytest.raises(MalformedCatchup):
        decode_catchup(encode_refusal(CatchupRefusal(reason="x", code="no_such_code")))
    log.leader.mark_drifted(Finding(kind=FindingKind.audit_mismatch))
    refusal = decide.source_refusal(log.leader, Judgement())
    assert refusal is not None and refusal.code == RefusalCode.source_not_current


def _cut_follower(disk: SimDisk) -> tuple[Log, StreamAdapter, tuple]:
    """A follower on a FileStore whose store cut its head beyond the group's: its plan needs a fresh store."""
    log = Log()
    config, raw = parse_stream_config(b'{"name": "S", "subjects": ["s.>"]}')
    disk.makedirs("stream")
    store = FileStore.open(disk.sub(LIVE), store_config_for(config))
    adapter = StreamAdapter(StreamStateMachine(store, config, raw))
    adapter.recovery_target = 0
    adapter.apply([log.msgs(300)])
    store.compact(120)  # the store dropped 1..119 by itself; the group still holds them
    store.sync()
    disk.sync_tree("stream")
    before = store.state().agreement_key()
    log.msgs(20)
    adapter.restore(log.leader.snapshot())
    assert adapter.plan is not None and adapter.plan.plan.reset
    return log, adapter, before


def _opener(adapter: StreamAdapter):  # type: ignore[no-untyped-def]
    return lambda disk, path: FileStore.open(disk.sub(path), adapter.machine.store.config)


def test_a_fresh_store_is_built_beside_and_swapped_in_only_after_the_session_verified():
    """Invariant 7: a session that fails midway leaves the old store intact and readable (the build is
    dropped); a finished one swaps the verified store in, durably, before the held entries apply."""
    disk = SimDisk(random.Random(11), corruption_allowed=False)
    log, adapter, before = _cut_follower(disk)
    old = adapter.machine.store
    build = BesideBuild(disk, LIVE, _opener(adapter))
    session, plan = decide.open_session(adapter, first=True, reset_store=lambda: build.start(adapter.machine.store),
                                        bytes_max=4096)
    request = session.start(plan)
    for _ in range(2):  # two chunks into the fresh store, then the repair fails
        request = session.on_chunk(decide.answer_catchup(log.leader, "S", request))
    assert build.active and adapter.machine.store is not old and disk.is_dir(build.build)
    assert old.load(200).seq == 200  # the old store stays open and readable meanwhile
    adapter.machine.replace_store(build.abandon())
    assert adapter.machine.store is old and old.state().agreement_key() == before
    assert disk.listdir("stream") == ["msgs"]

    session, plan = decide.open_session(adapter, first=False, reset_store=lambda: build.start(adapter.machine.store),
                                        bytes_max=4096)
    request = session.start(plan)
    while request is not None:
        request = session.on_chunk(decide.answer_catchup(log.leader, "S", request))
    assert decide.finish_session(adapter, session, adapter.generation, install=build.install)
    leader_key = log.leader.store.state().agreement_key()
    assert adapter.machine.store.state().agreement_key() == leader_key and not build.active
    assert disk.listdir("stream") == ["msgs"]
    disk.crash(torn=False)
    recover_swap(disk, LIVE)
    reopened = FileStore.open(disk.sub(LIVE), store_config_for(adapter.machine.config))
    assert reopened.state().agreement_key() == leader_key
