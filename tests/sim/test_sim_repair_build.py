"""`--app stream`: the simulator's stream repair runs production's beside-build path and source check.

Method: a stream simulation without faults runs until its stream holds messages. Then a follower's store
cuts its own head beyond the group's (the store compacts itself: no fault, so only a fresh store can take
the head back) and an audit's verdict against it is delivered (`mark_drifted`, as `StreamChecker._settle`
does for a replica an audit outvoted). The simulator's repair (`testing.sim.stream_repair`, production's
decisions) must resync, build the replacement store beside the old one (`store.swap.BesideBuild`, a
`msgs.repair-<n>` directory next to `stream/msgs`), swap it in after `finish_session` verified it, and the
run must then pass its liveness and final checks (every acknowledged message on every replica, state
tuples equal to a reference replica's). While the stream leader's latest audit verdict says its store
disagreed, it is not used as a source: the follower's repair waits (`source_refusal`) until a later verdict.
"""

from __future__ import annotations

from jsraft.stream import Finding, FindingKind, Health
from jsraft.testing.sim.batch import config_for
from jsraft.testing.sim.config import parse_faults
from jsraft.testing.sim.liveness import final_checks, run_liveness
from jsraft.testing.sim.simulator import Simulation

SEED = 4  # three nodes


def _running(sim: Simulation, steps_max: int, condition) -> None:  # type: ignore[no-untyped-def]
    for _ in range(steps_max):
        if condition():
            return
        sim.step()
    raise AssertionError(f"not reached within {steps_max} steps")


def _stream_with_messages(sim: Simulation) -> tuple:
    def ready() -> bool:
        leaders = [d for d in sim.drivers.values() if d.up and d.replica.stream_leader() is not None]
        return bool(leaders) and leaders[0].replica.machine.store.state().msgs >= 40
    _running(sim, 20_000, ready)
    leader = next(d.replica for d in sim.drivers.values() if d.up and d.replica.stream_leader() is not None)
    follower = next(d.replica for d in sim.drivers.values() if d.up and d.replica is not leader)
    _running(sim, 20_000, lambda: (follower.machine.store.state().agreement_key()
                                   == leader.machine.store.state().agreement_key()))  # caught up
    return leader, follower


def test_a_follower_that_needs_a_fresh_store_builds_it_beside_and_swaps_it_in():
    sim = Simulation(config_for(SEED, faults=parse_faults("none"), mutant=None, app="stream"))
    leader, follower = _stream_with_messages(sim)
    store = follower.machine.store
    store.compact(store.state().last_seq - 1)  # all but the last two: the group's head goes with them
    follower.machine.mark_drifted(Finding(kind=FindingKind.audit_mismatch, detail="an audit outvoted it"))
    # The leader's latest verdict says its own store disagreed: no repair from it until a later one.
    leader.adapter.judgement.verdict(1 << 40, False)
    _running(sim, 2_000, lambda: f"{leader.node_id} refused (source_disagreed)" in sim.trace.render())
    assert follower.machine.health is Health.drifted and follower.repair.build is None  # nothing built yet

    leader.adapter.judgement.verdict(1 << 41, True)
    _running(sim, 20_000, lambda: "beside the old one for the repair" in sim.trace.render())
    _running(sim, 20_000, lambda: "the replacement store verified and is swapped in" in sim.trace.render())
    assert follower.machine.health is Health.current and not follower.repair.build.active
    assert not [name for name in follower.driver.disk.listdir("stream") if name.startswith("msgs.")]
    run_liveness(sim)
    final_checks(sim)
