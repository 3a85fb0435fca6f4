"""The running AUDIT: replicas report their state tuple at one index, the majority decides who drifted.

Method: three replicas (real machines, both store kinds) apply the same log; one replica's store is
then made to disagree silently — replaced by a store holding other messages at the same sequences, the
way a storage or software fault leaves it — so that every naive health signal (applied index, last
sequence, health flag) still says "current". The leader commits an AUDIT entry; `judge_audit` over the
reports must name the drifted replica (or the leader, which must step down), the `ReplicaBoard` must
publish a drift advisory, and resyncing from a snapshot by range catch-up must make the next audit agree.
"""

from __future__ import annotations

from stream_kit import NOW, Group, catch_up, make_machine, pub

from jsraft.store.base import StoredMsg
from jsraft.stream.audit import (
    AUDIT_SPLIT_ADVISORY, DRIFT_ADVISORY, DRIFT_REPAIRED_ADVISORY, ReplicaBoard, ReplicaState, judge_audit,
)
from jsraft.stream.drift import Finding, FindingKind
from jsraft.stream.leader import StreamLeader
from jsraft.stream.results import Health

VOTERS = ("a", "b", "c")


def _group(maker) -> Group:
    return Group({name: make_machine(maker) for name in VOTERS}, "a")


def _audit(group: Group, now_ns: int):
    group.leader.request_audit()
    results = group.commit(group.leader.audit_due(now_ns))
    return {name: result.audit for name, result in results.items()}


def _heal(group: Group, name: str, source: str, board: ReplicaBoard, **options):
    machine, leader = group.machines[name], group.machines[source]
    machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch, detail="disagreed with the majority"))
    board.on_repair_started(name)
    plan = machine.restore(leader.snapshot())
    session = catch_up(machine, leader, plan, **options)
    result = session.result
    advisory = board.on_repaired(name, group.index, fetched_msgs=result.fetched_msgs, reset=result.reset,
                                 verified=result.verified, state=result.state.agreement_key())
    return plan, session, advisory


def _store_holding(maker, like, msgs: list[StoredMsg], last_seq: int):
    """A store of the same config holding exactly `msgs`, with `last_seq` as its last sequence."""
    store = maker.make(like.config)
    store.compact(msgs[0].seq)
    for msg in msgs:
        if msg.seq > store.state().last_seq + 1:
            store.skip(store.state().last_seq + 1, msg.seq - store.state().last_seq - 1)
        store.append(msg.seq, msg.subject, msg.headers, msg.payload, msg.timestamp_ns)
    if last_seq > store.state().last_seq:
        store.skip(store.state().last_seq + 1, last_seq - store.state().last_seq)
    return store


def test_the_seeds_scenario_seven_from_778_against_three_from_1027_is_detected_and_healed(maker):
    group = _group(maker)
    group.publish_many(1029, per_entry=100)
    leader_store = group.machines["a"].store
    kept = [leader_store.load(seq) for seq in (778, 779, 780, 781, 1027, 1028, 1029)]
    group.commit(group.leader.propose_purge(None, seq=1027).entry)
    # Replica c's store silently holds 7 messages from seq 778 while a and b hold 3 from 1027.
    group.machines["c"].replace_store(_store_holding(maker, leader_store, kept, 1029))
    for machine in group.machines.values():  # every naive signal says "current"
        assert machine.health is Health.current and machine.applied_index == group.index
        assert machine.store.state().last_seq == machine.last_seq == 1029
    board = ReplicaBoard("ORDERS", VOTERS)
    reports = _audit(group, NOW)
    assert (reports["c"].first_seq, reports["c"].msgs) == (778, 7)
    assert (reports["a"].first_seq, reports["a"].msgs) == (1027, 3)
    verdict = judge_audit(reports, VOTERS, "a")
    assert verdict.drifted == ("c",) and verdict.agreeing == ("a", "b") and not verdict.leader_drifted
    advisories = board.on_verdict(verdict, reports, "a")
    assert [adv.type for adv in advisories] == [DRIFT_ADVISORY]
    event = advisories[0].to_json("evt-1", "2025-12-01T00:00:00Z")
    assert event["replica"] == "c" and event["found"]["first_seq"] == 778 and event["expected"]["messages"] == 3
    assert board.replicas["c"].state is ReplicaState.drifted
    plan, session, repaired = _heal(group, "c", "a", board)
    assert plan.compact_to == 1027 and plan.findings[0].kind is FindingKind.head_behind
    assert session.result.verified and repaired.type == DRIFT_REPAIRED_ADVISORY
    verdict = judge_audit(_audit(group, NOW + 1), VOTERS, "a")
    assert verdict.drifted == () and verdict.agreeing == VOTERS
    assert [s.state for s in board.statuses()] == [ReplicaState.current] * 3


def test_changed_content_at_equal_sequences_is_found_by_the_audit_and_resynced(maker):
    group = _group(maker)
    group.publish_many(300, per_entry=50)
    store = group.machines["a"].store
    msgs = [store.load(seq) for seq in range(1, 301)]
    msgs[149] = StoredMsg(subject=msgs[149].subject, seq=150, headers=b"", payload=b"flipped",
                          timestamp_ns=msgs[149].timestamp_ns)
    group.machines["b"].replace_store(_store_holding(maker, store, msgs, 300))
    reports = _audit(group, NOW)
    assert reports["b"].last_seq == reports["a"].last_seq and reports["b"].msgs == reports["a"].msgs
    verdict = judge_audit(reports, VOTERS, "a")
    assert verdict.drifted == ("b",)
    board = ReplicaBoard("ORDERS", VOTERS)
    board.on_verdict(verdict, reports, "a")
    plan, session, _ = _heal(group, "b", "a", board)
    assert plan.fetch == ((1, 300),) and session.result.rebuilt_from == 150
    assert judge_audit(_audit(group, NOW + 1), VOTERS, "a").drifted == ()


def test_a_leader_that_disagrees_with_its_majority_steps_down_and_resyncs(maker):
    group = _group(maker)
    group.publish_many(100, per_entry=25)
    store = group.machines["a"].store
    msgs = [store.load(seq) for seq in range(1, 101) if seq != 40]  # the leader lost seq 40 silently
    group.machines["a"].replace_store(_store_holding(maker, store, msgs, 100))
    reports = _audit(group, NOW)
    verdict = judge_audit(reports, VOTERS, "a")
    assert verdict.leader_drifted and verdict.drifted == ("a",)
    advisories = ReplicaBoard("ORDERS", VOTERS).on_verdict(verdict, reports, "a")
    assert advisories[0].body["leader"] is True
    # The runtime transfers leadership; b leads and a resyncs from it.
    group.leader_name, group.leader = "b", StreamLeader(group.machines["b"])
    board = ReplicaBoard("ORDERS", VOTERS)
    board.on_verdict(verdict, reports, "a")
    _heal(group, "a", "b", board)
    group.publish([pub("orders.after")], NOW + 5)
    verdict = judge_audit(_audit(group, NOW + 10), VOTERS, "b")
    assert verdict.agreeing == VOTERS and group.machines["a"].store.load(40).payload == b"payload-39"


def test_no_majority_is_reported_as_a_split_and_nobody_is_resynced(mem_maker):
    group = _group(mem_maker)
    group.publish_many(10)
    store = group.machines["a"].store
    all_msgs = [store.load(seq) for seq in range(1, 11)]
    group.machines["b"].replace_store(_store_holding(mem_maker, store, all_msgs[1:], 10))
    group.machines["c"].replace_store(_store_holding(mem_maker, store, all_msgs[2:], 10))
    reports = _audit(group, NOW)
    verdict = judge_audit(reports, VOTERS, "a")
    assert verdict.split and verdict.drifted == () and not verdict.leader_drifted
    advisories = ReplicaBoard("ORDERS", VOTERS).on_verdict(verdict, reports, "a")
    assert [a.type for a in advisories] == [AUDIT_SPLIT_ADVISORY] and len(advisories[0].body["reports"]) == 3


def test_a_missing_report_still_judges_against_the_voters_majority(mem_maker):
    group = _group(mem_maker)
    group.publish_many(10)
    reports = _audit(group, NOW)
    verdict = judge_audit({"a": reports["a"], "b": reports["b"]}, VOTERS, "a")
    assert verdict.agreeing == ("a", "b") and verdict.missing == ("c",)
    lonely = judge_audit({"a": reports["a"]}, VOTERS, "a")
    assert lonely.split  # one report of three is not a majority


def test_replica_status_values_and_json(mem_maker):
    board = ReplicaBoard("ORDERS", VOTERS, lag_entries_max=10)
    board.on_progress("a", 100, 100)
    board.on_progress("b", 50, 100)
    board.on_progress("c", 100, 100, repairing=True)
    assert [s.state for s in board.statuses()] == [ReplicaState.current, ReplicaState.lag, ReplicaState.repairing]
    advisory = board.mark_drifted("b", 90, [Finding(kind=FindingKind.store_behind, first=5, last=9)])
    assert advisory.type == DRIFT_ADVISORY and advisory.body["findings"][0]["kind"] == "store_behind"
    assert board.mark_drifted("b", 91, []) is None  # already known
    board.on_progress("b", 100, 100)
    assert board.replicas["b"].state is ReplicaState.drifted  # drifted outranks progress
    assert board.replicas["b"].to_json() == {"name": "b", "current": False, "lag": 0, "status": "drifted",
                                             "last_audit_index": 0, "agreed_at_last_audit": None}
    assert board.on_repaired("b", 120, verified=None) is None  # unverified: the next audit decides
    assert board.on_repaired("b", 121, verified=True).type == DRIFT_REPAIRED_ADVISORY
    assert board.replicas["b"].state is ReplicaState.current
