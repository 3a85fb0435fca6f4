"""The liveness phase and the end-of-run checks: after healing, the cluster must converge and keep every ack.

Owns: `run_liveness` and `final_checks`.

`run_liveness`: stop injecting faults (no new partitions, crashes or corruption; network loss, duplication
and reordering off; clocks unskewed), heal the network, restart every crashed node, then step until, within
`liveness_ticks_max` ticks: a leader exists; every member of its configuration is running and not
repairing; and a fresh probe value, proposed at the leader, is acknowledged and applied by every member.
Probes are re-proposed when leadership changes or a probe has not committed after `PROBE_RETRY_TICKS`.
If the deadline passes, the violation names what was missing — no leader, who is still repairing (and
why), whether a replica reports the group halted (rule 4) — with one status line per node. A halt is a
failure here: the atlas confines corruption to a minority, so a healthy majority always exists.

`final_checks` (after convergence): every acknowledged write is applied by every member (`acked-lost`;
the app says what that means: the register holds the value at its index, every acknowledged publish a
stream still holds is in every member's store, ...); then a last coordinated power failure, and each
voter's WAL is reopened from its durable state: every acknowledged entry must be on a majority of the voters
(in the log with its term and value, or covered by a snapshot whose state holds it — the app's `durable`).

Probes are the app's (`App.probe`): entries every app applies without effect on what the checks compare
(the register's own values, a stream CONSUMER entry, a meta peer add). A member has converged when it
applied every acknowledged write and the probe, and its replica reports nothing unsettled (a stream
replica still repairing, or with store faults, has not).

Invariants:
  1. Both are bounded: at most `liveness_ticks_max` steps, then one pass over the acknowledged values per
     member.
  2. Corruption is switched off on every disk before the phase starts (read-time flips included).

Imports: stdlib, siblings. Reference: CHAOS.md (I1, I9 liveness after heal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.testing.sim.violation import Violation

if TYPE_CHECKING:
    from jsraft.testing.sim.simulator import Simulation

PROBE_RETRY_TICKS = 60


def run_liveness(sim: Simulation) -> None:
    sim.faults.stop()
    sim.clients.rate = 0.0
    sim.membership.rate = 0.0
    sim.network.heal()
    sim.network.quiet()
    sim.clock.uniform()
    for driver in sim.drivers.values():
        driver.disk.corruption_allowed = False
    for node_id in sorted(sim.faults.restart_at):
        del sim.faults.restart_at[node_id]
        sim.faults.restart(sim, node_id)
    sim.trace.add("liveness phase: network healed, faults stopped, every node running")
    probes: list[bytes] = []
    probed_at: tuple[str, int, int] | None = None  # (leader, term, tick)
    for _ in range(sim.config.liveness_ticks_max):
        leader_id = sim.leader_id()
        if leader_id is not None:
            node = sim.drivers[leader_id].node
            assert node is not None
            stale = probed_at is None or probed_at[:2] != (leader_id, node.current_term)
            if stale or sim.clock.now - probed_at[2] >= PROBE_RETRY_TICKS:
                value = sim.app.probe(len(probes) + 1)
                if sim.drivers[leader_id].propose(value) is not None:
                    probes.append(value)
                    probed_at = (leader_id, node.current_term, sim.clock.now)
                    sim.trace.add(f"liveness: probe {value.decode()} proposed at {leader_id}")
        sim.step()
        if _converged(sim, probes):
            sim.trace.add("liveness: converged")
            return
    raise Violation("liveness", _diagnose(sim))


def members(sim: Simulation) -> tuple[str, ...]:
    leader_id = sim.leader_id()
    if leader_id is None:
        return ()
    node = sim.drivers[leader_id].node
    assert node is not None
    return node.conf.voters + node.conf.learners


def _converged(sim: Simulation, probes: list[bytes]) -> bool:
    acked = [sim.checker.acked[p] + (p,) for p in probes if p in sim.checker.acked]
    if not acked:
        return False
    index, _, value = max(acked)
    group = members(sim)
    if not group:
        return False
    # Every acknowledged write (not only the probe) must have reached every member.
    needed = max(index, max((i for i, _ in sim.checker.acked.values()), default=0))
    for node_id in group:
        driver = sim.drivers.get(node_id)
        if driver is None or driver.node is None or driver.node.repairing:
            return False
        replica = driver.replica
        if replica.applied_index < needed or not replica.holds(index, value) or replica.unsettled():
            return False
    return True


def _diagnose(sim: Simulation) -> str:
    leader_id = sim.leader_id()
    lines = [f"not converged within {sim.config.liveness_ticks_max} ticks; leader {leader_id or 'none'}"]
    halted = []
    for node_id, driver in sorted(sim.drivers.items()):
        if driver.node is None:
            lines.append(f"{node_id}: down")
            continue
        s = driver.node.status()
        if s.halted_reason:
            halted.append(f"{node_id}: {s.halted_reason}")
        lines.append(f"{node_id}: {s.role} term={s.current_term} leader={s.leader_id} commit={s.commit_index} "
                     f"applied={s.applied_index} last={s.last_index} snap={s.snapshot_index} "
                     f"voters={','.join(s.voters)} learners={','.join(s.learners) or '-'}"
                     + (f" repairing ({s.repair_reason})" if s.repairing else "")
                     + (f" app: {why}" if (why := driver.replica.unsettled()) else ""))
    if halted:
        lines.insert(1, "group reported halted: " + " | ".join(halted))
    return " / ".join(lines)


def final_checks(sim: Simulation) -> None:
    group = members(sim)
    acked = sorted(sim.checker.acked.items(), key=lambda item: item[1])
    sim.app.check_members(sim, group)
    leader_id = sim.leader_id()
    assert leader_id is not None
    voters = sim.drivers[leader_id].node.conf.voters  # type: ignore[union-attr]
    sim.trace.add("final: coordinated power failure; reopening every voter's WAL")
    copies = {value: 0 for value, _ in acked}
    for node_id in voters:
        driver = sim.drivers[node_id]
        driver.crash(torn=False)
        held = sim.app.durable(sim, driver)
        for value, (index, term) in acked:
            if held(index, term, value):
                copies[value] += 1
    quorum = len(voters) // 2 + 1
    for value, (index, term) in acked:
        if copies[value] < quorum:
            raise Violation("acked-lost", f"acknowledged {value!r} at {index}/{term} is durable on "
                                          f"{copies[value]} of {len(voters)} voters, fewer than a majority")
