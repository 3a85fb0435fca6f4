"""Every checker catches the violation it exists for, fed synthetically; and stays quiet on legal histories.

Method: drive `SafetyChecker`'s hooks and `TermInflationChecker` directly with hand-built values — stub
nodes (role, term, a real `RaftLog`), real `Ready`, `Entry`, `RequestVoteResponse` and `Recovered` values —
describing one legal history and one that breaks exactly one invariant, and assert the `Violation` names
it. The end-of-run checks (`acked-lost`, `liveness`) are fed a short real simulation that is then
tampered with (a register loses an acknowledged value; a liveness budget of one tick).
"""

from __future__ import annotations

import random
import types

import pytest

from jsraft.raft import ConfState, Entry, EntryType, HardState, Ready, RequestVoteResponse, SnapshotMeta
from jsraft.raft.log import RaftLog
from jsraft.testing.sim import SafetyChecker, SimConfig, SimNetwork, Violation
from jsraft.testing.sim.availability import TermInflationChecker
from jsraft.testing.sim.liveness import final_checks, run_liveness
from jsraft.testing.sim.register import Register, chain_digest
from jsraft.testing.sim.simulator import Simulation, run_seed
from jsraft.wal import Recovered


def entries(*specs: tuple[int, int, bytes]) -> list[Entry]:
    return [Entry(index=i, term=t, data=d) for i, t, d in specs]


def stub(role: str = "follower", term: int = 1, log: list[Entry] | None = None, repairing: bool = False,
         snapshot_index: int = 0):
    raft_log = RaftLog(snapshot_index=snapshot_index, snapshot_term=1 if snapshot_index else 0,
                       entries=list(log or []), faulty=set(), commit_index=0, applied_index=0)
    return types.SimpleNamespace(role=role, current_term=term, log=raft_log, repairing=repairing,
                                 repair_reason="test" if repairing else None,
                                 conf=ConfState(voters=("n1", "n2", "n3")))


def vote(src: str, dst: str, term: int, *, pre_vote: bool = False, repairing: bool = False,
         granted: bool = True) -> RequestVoteResponse:
    return RequestVoteResponse(from_id=src, to_id=dst, term=term, vote_granted=granted, pre_vote=pre_vote,
                               repairing=repairing)


def expect(invariant: str):
    return pytest.raises(Violation, match=f"^{invariant}:")


# --- election-safety -------------------------------------------------------------------------------


def test_two_leaders_in_one_term_even_at_different_steps() -> None:
    checker = SafetyChecker()
    checker.after_step([("n1", stub("leader", 5)), ("n2", stub("follower", 5))])
    checker.after_step([("n1", stub("leader", 5)), ("n2", stub("leader", 6))])  # legal: another term
    with expect("election-safety"):
        checker.after_step([("n3", stub("leader", 5))])


# --- votes -----------------------------------------------------------------------------------------


def test_double_vote_across_restarts_is_caught_and_repeats_are_not() -> None:
    checker = SafetyChecker()
    node = stub()
    checker.on_message("n1", node, vote("n1", "n2", 4))
    checker.on_message("n1", node, vote("n1", "n2", 4))  # the same vote again (a duplicate request)
    checker.on_message("n1", node, vote("n1", "n3", 4, pre_vote=True))  # pre-votes bind nothing
    checker.on_message("n1", node, vote("n1", "n3", 4, granted=False))
    with expect("double-vote"):
        checker.on_message("n1", node, vote("n1", "n3", 4))


@pytest.mark.parametrize("how", ["node-status", "message-flag"])
@pytest.mark.parametrize("pre_vote", [False, True])
def test_a_repairing_node_granting_a_vote_is_caught(how: str, pre_vote: bool) -> None:
    checker = SafetyChecker()
    checker.on_message("n1", stub(repairing=True), vote("n1", "n2", 3, granted=False))  # refusing is fine
    node = stub(repairing=how == "node-status")
    with expect("repairing-vote"):
        checker.on_message("n1", node, vote("n1", "n2", 3, pre_vote=pre_vote, repairing=how == "message-flag"))


# --- log-matching ----------------------------------------------------------------------------------


def test_same_index_and_term_with_different_data_is_caught() -> None:
    checker = SafetyChecker()
    checker.on_persist("n1", stub(log=entries((1, 1, b"a"))), Ready(entries=tuple(entries((1, 1, b"a")))))
    checker.on_persist("n2", stub(log=entries((1, 1, b"a"))), Ready(entries=tuple(entries((1, 1, b"a")))))
    with expect("log-matching"):
        checker.on_persist("n3", stub(log=entries((1, 1, b"b"))), Ready(entries=tuple(entries((1, 1, b"b")))))


def test_same_entry_after_a_different_predecessor_term_is_caught() -> None:
    checker = SafetyChecker()
    first = entries((1, 1, b"a"), (2, 2, b"x"))
    checker.on_persist("n1", stub(log=first), Ready(entries=tuple(first)))
    second = entries((1, 2, b"other"), (2, 2, b"x"))
    with expect("log-matching"):
        checker.on_persist("n2", stub(log=second), Ready(entries=tuple(second)))


def test_a_recovered_log_is_held_to_what_was_written() -> None:
    checker = SafetyChecker()
    written = entries((1, 1, b"a"), (2, 1, b"b"))
    checker.on_persist("n1", stub(log=written), Ready(entries=tuple(written)))
    recovered = Recovered(hard_state=HardState(current_term=1), snapshot=None,
                          entries=entries((1, 1, b"a"), (2, 1, b"B")), faulty=frozenset(), repairing=False,
                          reasons=[], torn_tail_bytes_cut=0)
    with expect("log-matching"):
        checker.on_restart("n1", recovered, corruptible=False)


# --- state-machine-safety --------------------------------------------------------------------------


def test_different_entries_applied_at_one_index_are_caught() -> None:
    checker = SafetyChecker()
    a, b = Entry(index=7, term=2, data=b"a"), Entry(index=7, term=2, data=b"b")
    checker.on_apply("n1", a, chain_digest(0, a))
    with expect("state-machine-safety"):
        checker.on_apply("n2", b, chain_digest(0, b))


def test_a_diverged_register_digest_is_caught() -> None:
    checker = SafetyChecker()
    entry = Entry(index=1, term=1, data=b"a")
    checker.on_apply("n1", entry, 111)
    with expect("state-machine-safety"):
        checker.on_apply("n2", entry, 222)


def test_a_replica_that_cannot_vouch_passes_no_digest_and_its_entries_are_still_compared() -> None:
    checker = SafetyChecker()
    entry = Entry(index=1, term=1, data=b"a")
    checker.on_apply("n1", entry, 111)
    checker.on_apply("n2", entry, None)  # e.g. a stream replica whose entry waits behind a catch-up
    checker.on_digest("n2", 1, 111)  # ... and its digest once it applied it
    with expect("state-machine-safety"):
        checker.on_apply("n3", Entry(index=1, term=1, data=b"b"), None)
    with expect("state-machine-safety"):
        checker.on_digest("n3", 1, 222)


def test_a_snapshot_that_disagrees_with_applied_state_is_caught() -> None:
    checker = SafetyChecker()
    register = Register()
    for entry in entries((1, 1, b"a"), (2, 1, b"b")):
        register.apply(entry)
        checker.on_apply("n1", entry, register.digest)
    meta = SnapshotMeta(index=2, term=1, conf=ConfState(voters=("n1",)))
    checker.on_install("n2", meta, Register.decode(register.encode()).digest)  # the honest snapshot
    checker.on_install("n4", meta, None)  # a replica that cannot vouch for its state there
    forged = Register.decode(register.encode())
    forged.digest ^= 1
    with expect("state-machine-safety"):
        checker.on_install("n3", meta, forged.digest)


# --- leader-completeness ---------------------------------------------------------------------------


def _acked_checker() -> SafetyChecker:
    checker = SafetyChecker()
    entry = Entry(index=2, term=3, data=b"c1-1")
    checker.on_apply("n1", entry, 1)
    checker.on_ack(2, 3, b"c1-1", [])
    return checker


def test_a_new_leader_without_an_acknowledged_entry_is_caught() -> None:
    checker = _acked_checker()
    holder = stub("leader", 4, entries((1, 1, b""), (2, 3, b"c1-1")))
    checker.after_step([("n1", holder)])
    older = stub("leader", 2, entries((1, 1, b"")))  # a leader of an older term need not hold it
    checker.after_step([("n2", older)])
    compacted = stub("leader", 6, [], snapshot_index=5)  # a snapshot covers it
    checker.after_step([("n4", compacted)])
    with expect("leader-completeness"):
        checker.after_step([("n3", stub("leader", 5, entries((1, 1, b""), (2, 5, b"other"))))])


def test_an_ack_that_a_current_leader_lacks_is_caught() -> None:
    checker = SafetyChecker()
    entry = Entry(index=2, term=3, data=b"c1-1")
    checker.on_apply("n1", entry, 1)
    with expect("leader-completeness"):
        checker.on_ack(2, 3, b"c1-1", [("n2", stub("leader", 4, entries((1, 1, b""))))])


def test_a_deposed_leader_elected_before_a_later_commit_need_not_hold_it() -> None:
    """Simulator stream seed 55626: entry 75/6, on n2 only, was committed in term 9 (n2 led again) while n3,
    cut off, still led term 8 without it. Raft's Leader Completeness is about the terms after the commit:
    the first replica that applied the entry did so in term 9, and only leaders from term 9 on must hold it."""
    checker = SafetyChecker()
    entry = Entry(index=2, term=6, data=b"c1-1")
    checker.on_apply("n2", entry, 1, current_term=9)  # committed by n2 as the leader of term 9
    deposed = stub("leader", 8, entries((1, 1, b"")))
    checker.on_ack(2, 6, b"c1-1", [("n3", deposed)])
    with expect("leader-completeness"):  # a leader of the commit's term, or a later one, must hold it
        checker.after_step([("n4", stub("leader", 10, entries((1, 1, b""))))])


def test_an_ack_that_a_leader_of_the_commit_term_lacks_is_caught() -> None:
    checker = SafetyChecker()
    checker.on_apply("n1", Entry(index=2, term=6, data=b"c1-1"), 1, current_term=9)
    with expect("leader-completeness"):
        checker.on_ack(2, 6, b"c1-1", [("n2", stub("leader", 9, entries((1, 1, b""))))])


# --- durability ------------------------------------------------------------------------------------


def test_a_clean_disk_that_recovers_damaged_is_caught() -> None:
    damaged = Recovered(hard_state=HardState(current_term=2, acked_watermark=9, repairing=True), snapshot=None,
                        entries=[], faulty=frozenset(), repairing=True,
                        reasons=["log recovered to 0 below acked watermark 9"], torn_tail_bytes_cut=0)
    SafetyChecker().on_restart("n1", damaged, corruptible=True)  # allowed: its disk is in the atlas
    with expect("durability"):
        SafetyChecker().on_restart("n2", damaged, corruptible=False)


# --- term-inflation --------------------------------------------------------------------------------


def _term_setup():
    network = SimNetwork(random.Random(1), ("n1", "n2", "n3"))
    nodes = {n: stub(term=2) for n in ("n1", "n2", "n3")}
    drivers = {n: types.SimpleNamespace(node=node, up=True, incarnation=1) for n, node in nodes.items()}
    return TermInflationChecker(isolation_ticks_min=10), network, nodes, drivers


def test_an_isolated_node_raising_its_own_term_is_caught() -> None:
    checker, network, nodes, drivers = _term_setup()
    network.isolate("n1")
    for now in range(1, 12):
        checker.after_step(now, drivers, network)
    nodes["n1"].current_term = 3
    with expect("term-inflation"):
        checker.after_step(12, drivers, network)


def test_term_raises_that_are_legal_are_not_flagged() -> None:
    checker, network, nodes, drivers = _term_setup()
    nodes["n2"].current_term = 3  # connected to a quorum: an election is fine
    checker.after_step(1, drivers, network)
    network.isolate("n1")
    for now in range(2, 14):
        checker.after_step(now, drivers, network)
    checker.on_deliver("n1", vote("n3", "n1", 4))  # it heard term 4 (e.g. over a one-way link)
    nodes["n1"].current_term = 4
    checker.after_step(14, drivers, network)
    drivers["n1"].incarnation = 2  # a restart may raise the term from the log
    nodes["n1"].current_term = 9
    checker.after_step(15, drivers, network)


# --- end-of-run checks -----------------------------------------------------------------------------


def _converged_simulation() -> Simulation:
    sim = Simulation(SimConfig(seed=5, nodes=3, faults=frozenset(), steps=0))
    for _ in range(150):
        sim.step()
    run_liveness(sim)
    assert sim.checker.acked, "the short run acknowledged writes"
    return sim


def test_an_acknowledged_value_missing_from_a_replica_is_caught() -> None:
    sim = _converged_simulation()
    value, (index, _) = next(iter(sim.checker.acked.items()))
    register = sim.drivers["n2"].replica
    register.values = [(i, v) for i, v in register.values if i != index]
    with expect("acked-lost"):
        final_checks(sim)


def test_an_acknowledged_value_not_durable_on_a_majority_is_caught() -> None:
    sim = _converged_simulation()
    sim.checker.acked[b"ghost"] = (3, 1)  # "acknowledged", yet no WAL holds it
    for driver in sim.drivers.values():
        register = driver.replica
        register.values = sorted(register.values + [(3, b"ghost")])
    with expect("acked-lost"):
        final_checks(sim)


def test_no_convergence_within_the_budget_is_a_liveness_failure() -> None:
    result = run_seed(SimConfig(seed=3, nodes=3, steps=50, liveness_ticks_max=1), replay_failures=False)
    assert not result.ok and result.invariant == "liveness"
    assert "not converged within 1 ticks" in (result.detail or "")


def test_legal_runs_raise_nothing() -> None:
    sim = _converged_simulation()
    final_checks(sim)
    assert sim.checker.checks > 0
    assert EntryType.NORMAL in {t for _, t, _ in sim.checker.applied.values()}
