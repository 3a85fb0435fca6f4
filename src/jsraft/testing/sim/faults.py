"""`FaultScheduler`: which fault happens at each step — partitions, crashes, power failures, corruption.

Owns: the fault timeline of a run. Each step it may change the network's shape (symmetric partition,
isolating a node or the leader, a one-way cut, a bridge, a swizzle, healing), crash one node (sometimes the
leader, sometimes with torn writes), cut the power of every running node at once (a coordinated power
failure), and restart nodes whose down time is over — damaging an atlas node's files first, while it is
down (`atlas.corrupt_at_rest`). A node that just granted a vote may be crashed at the next step and
restarted almost at once, which is what a vote that is not durable would be caught by; an atlas node
restarted so loses that newest hard-state write at rest half the time (`atlas.lose_last_hard_state`).

The `lost-vote` plan (fault kind `lost-vote`, in `all`, acting with `disk` and `crash`; issue #14, the vote
fence) builds the schedule in which only `raft.vote_fence` stops a second vote in one term: when a
leadership transfer's candidate C asks for votes in term V, half the time the plan keeps only its
RequestVote to one atlas voter N (the network loses the copies to everyone else, so the old leader of V-1
keeps leading), crashes N right after it grants that vote, loses that vote at rest on restart (N's hard
state falls back to V-1, repairing), and loses everything C sends until N has been repaired and C no
longer leads — or `_PLAN_TICKS_MAX` passed. The real core restores N in its fence term V with no vote
(`vote_fence` invariant 4): it refuses the old leader of V-1, which steps down, and votes again only above
V. The mutant `no-vote-fence` comes back at V-1 and acknowledges the old leader's entries after C won V
with the lost vote (leader-completeness), or votes again in V (double-vote). With `storage`, N may also
lose its whole group directory: the node record's vote-term ceiling is then its fence
(`runtime.group_record`; storage mutant `no-vote-ceiling`). If it loses that record too
(`lose-record+group`), there is no ceiling: it learns the term from every voter first (`raft.term_query`;
mutant `no-term-query`, which fails meta seed 35 and stream seed 38 as the code before the query did).
All of it is network loss and a crash with a damaged write: faults the model already has, timed.

Invariants:
  1. Every choice comes from the scheduler's own generator (simulator invariant 1).
  2. Corruption only ever touches disks in the fault atlas (atlas invariants 1 and 2).
  3. Once `stop()` is called (the liveness phase) no new fault starts; pending restarts still happen.
  4. Every crashed node has exactly one pending restart, so nothing stays down forever.
  5. A `lost-vote` plan ends at most `_PLAN_TICKS_MAX` ticks after it began, and at `stop()`; one at a time.

Imports: stdlib, siblings. Reference: CHAOS.md (S02–S06, S09, S10, S12), Jepsen nemeses.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import attrs

from jsraft.raft import RequestVote

from jsraft.testing.sim.atlas import corrupt_at_rest, lose_last_hard_state

if TYPE_CHECKING:
    from jsraft.testing.sim.config import Knobs
    from jsraft.testing.sim.simulator import Simulation

_CORRUPTIONS_PER_RESTART_MAX = 3
# Long enough for an old leader to repair a restarted voter and a muted leader to step down, and bounded.
_PLAN_TICKS_MAX = 120


@attrs.define
class _LostVotePlan:
    candidate: str
    voter: str
    term: int
    ends_by: int
    crashed: bool = False  # the voter granted the vote and is crashed at the next step
    restarted: bool = False  # ... and has restarted since (with the vote lost, if the damage applied)


class FaultScheduler:
    def __init__(self, rng: random.Random, knobs: Knobs, faults: frozenset[str]) -> None:
        self.rng = rng
        self.knobs = knobs
        self.faults = faults
        self.restart_at: dict[str, int] = {}
        self.crash_next: set[str] = set()
        self.crashed_after_vote: set[str] = set()
        self.plan: _LostVotePlan | None = None
        self._sim: Simulation | None = None  # for the network's send filter, set at the first step
        # Its own generator, seeded from the scheduler's state without drawing from it: the fault timeline
        # of every seed (and the regressions pinned to seeds) stays what it was before this fault existed.
        self.vote_loss_rng = random.Random(hash(rng.getstate()[1]))  # a tuple of ints: a stable hash
        self.plan_rng = random.Random(hash(rng.getstate()[1]) + 1)  # the same, for `lost-vote` plans
        self.enabled = True
        self.counts = {"crashes": 0, "power_failures": 0, "partitions": 0, "corruptions": 0}

    def stop(self) -> None:
        self.enabled = False
        self.crash_next.clear()

    def step(self, sim: Simulation) -> None:
        self._restarts_due(sim)
        if self._sim is None and {"lost-vote", "disk", "crash"} <= self.faults:
            self._sim, sim.network.send_filter = sim, self._plan_filter
        self._plan_due(sim)
        if not self.enabled:
            return
        for node_id in sorted(self.crash_next):
            if sim.drivers[node_id].up:
                sim.trace.add(f"fault: crash {node_id} right after it voted (or announced a commit "
                              f"before its own fsync returned)")
                self._crash(sim, node_id, torn=False, down_ticks=self.rng.randint(0, 2))
                self.crashed_after_vote.add(node_id)
        self.crash_next.clear()
        if "net" in self.faults:
            self._network(sim)
        if "crash" in self.faults:
            self._crashes(sim)

    def on_vote_granted(self, node_id: str) -> None:
        if self.plan is not None and self.plan.voter == node_id and not self.plan.crashed:
            self.plan.crashed = True
            self.crash_next.add(node_id)
            return
        if self.enabled and self.knobs.crash_after_vote and self.rng.random() < self.knobs.crash_after_vote:
            self.crash_next.add(node_id)

    def on_commit_before_own_fsync(self, node_id: str) -> None:
        """A pipelining leader announced a commit its own fsync does not cover yet: crash it in that
        window now and then (the commit must already be durable on a majority of followers)."""
        self.on_vote_granted(node_id)

    # --- Network ------------------------------------------------------------------------------------

    def _network(self, sim: Simulation) -> None:
        network, rng = sim.network, self.rng
        if network.swizzling():
            if rng.random() < 0.05:
                sim.trace.add(f"fault: {network.swizzle_step()}")
            return
        if network.cut and rng.random() < self.knobs.heal:
            network.heal()
            sim.trace.add("fault: heal the network")
            return
        if rng.random() >= self.knobs.partition:
            return
        ids = sorted(sim.drivers)
        shape = rng.choice(("isolate", "isolate-leader", "split", "one-way", "bridge", "swizzle"))
        leader = sim.leader_id()
        if shape == "isolate-leader" and leader is not None:
            network.isolate(leader)
        elif shape in ("isolate", "isolate-leader"):
            network.isolate(rng.choice(ids))
        elif shape == "split":
            shuffled = rng.sample(ids, len(ids))
            cut = rng.randint(1, len(ids) - 1)
            network.partition([set(shuffled[:cut]), set(shuffled[cut:])])
        elif shape == "one-way":
            src, dst = rng.sample(ids, 2)
            network.cut_one_way(src, dst)
        elif shape == "bridge" and len(ids) >= 3:
            a, b = rng.sample(ids, 2)
            network.bridge(a, b)
        else:
            network.start_swizzle()
        self.counts["partitions"] += 1
        sim.trace.add(f"fault: network {network.shape}")

    # --- Crashes and restarts -----------------------------------------------------------------------

    def _crashes(self, sim: Simulation) -> None:
        rng = self.rng
        up = [node_id for node_id in sorted(sim.drivers) if sim.drivers[node_id].up]
        if not up:
            return
        if self.knobs.power_failure and rng.random() < self.knobs.power_failure:
            sim.trace.add(f"fault: coordinated power failure of {','.join(up)}")
            self.counts["power_failures"] += 1
            down_ticks = rng.randint(1, self.knobs.restart_delay_max_ticks)
            for node_id in up:
                self._crash(sim, node_id, torn=rng.random() < 0.5, down_ticks=down_ticks + rng.randint(0, 3))
            return
        if rng.random() < self.knobs.crash:
            leader = sim.leader_id()
            victim = leader if leader is not None and rng.random() < 0.3 else rng.choice(up)
            self._crash(sim, victim, torn=rng.random() < 0.5,
                        down_ticks=rng.randint(1, self.knobs.restart_delay_max_ticks))

    def _crash(self, sim: Simulation, node_id: str, *, torn: bool, down_ticks: int) -> None:
        sim.drivers[node_id].crash(torn=torn)
        sim.clock.forfeit(node_id)
        self.restart_at[node_id] = sim.clock.now + down_ticks
        self.counts["crashes"] += 1

    def _restarts_due(self, sim: Simulation) -> None:
        now = sim.clock.now
        for node_id in sorted(self.restart_at):
            if self.restart_at[node_id] <= now:
                del self.restart_at[node_id]
                self.restart(sim, node_id)

    def restart(self, sim: Simulation, node_id: str) -> None:
        driver = sim.drivers[node_id]
        voted = node_id in self.crashed_after_vote
        self.crashed_after_vote.discard(node_id)
        if self.enabled and "disk" in self.faults and sim.atlas.allows(node_id) and voted:
            # The vote it just cast may be the write lost at rest (what the vote fence is for).
            loss = self.vote_loss_rng
            planned = self.plan is not None and self.plan.voter == node_id
            if planned:
                self.plan.restarted = True  # type: ignore[union-attr]
            if (planned or loss.random() < 0.5) and (done := lose_last_hard_state(driver.disk, loss)):
                self.counts["corruptions"] += 1
                sim.trace.add(f"fault: corrupt {node_id} at rest: {done}")
        if self.enabled and "disk" in self.faults and sim.atlas.allows(node_id):
            if self.rng.random() < self.knobs.corrupt_on_restart:
                for _ in range(self.rng.randint(1, _CORRUPTIONS_PER_RESTART_MAX)):
                    done = corrupt_at_rest(driver.disk, self.rng)
                    if done:
                        self.counts["corruptions"] += 1
                        sim.trace.add(f"fault: corrupt {node_id} at rest: {done}")
        sim.clock.forfeit(node_id)
        driver.start()

    # --- The `lost-vote` plan ----------------------------------------------------------------------

    def _plan_filter(self, message: object) -> bool:
        """The network's send filter: True loses `message` (see the module docstring)."""
        plan = self.plan
        if plan is None:
            if isinstance(message, RequestVote) and message.leadership_transfer and not message.pre_vote:
                self._maybe_plan(message)
            plan = self.plan
            if plan is None:
                return False
        if getattr(message, "from_id", None) != plan.candidate:
            return False
        keep = (isinstance(message, RequestVote) and message.to_id == plan.voter and message.term == plan.term
                and not plan.crashed)
        return not keep

    def _maybe_plan(self, message: RequestVote) -> None:
        sim = self._sim
        if sim is None or not self.enabled or self.plan_rng.random() >= 0.5:
            return
        voters = [n for n in sorted(sim.atlas.corruptible) if n != message.from_id
                  and sim.drivers[n].up and sim.drivers[n].node is not None
                  and not sim.drivers[n].node.repairing and sim.drivers[n].node.current_term < message.term]
        if not voters:
            return
        voter = self.plan_rng.choice(voters)
        self.plan = _LostVotePlan(candidate=message.from_id, voter=voter, term=message.term,
                                  ends_by=sim.clock.now + _PLAN_TICKS_MAX)
        sim.trace.add(f"fault: lost-vote plan: only {voter} hears {message.from_id}'s RequestVote for term "
                      f"{message.term}; {voter} loses its vote at rest, {message.from_id} is cut off until "
                      f"{voter} is repaired")

    def _plan_due(self, sim: Simulation) -> None:
        plan = self.plan
        if plan is None:
            return
        driver, candidate = sim.drivers[plan.voter], sim.drivers[plan.candidate].node
        repaired = (plan.restarted and driver.up and driver.node is not None and not driver.node.repairing
                    and plan.voter not in self.restart_at)
        if (repaired and (candidate is None or candidate.role != "leader")) or not self.enabled \
                or sim.clock.now >= plan.ends_by:
            self.plan = None
            sim.trace.add(f"fault: lost-vote plan over ({plan.voter} {'repaired' if repaired else 'not repaired'})")
