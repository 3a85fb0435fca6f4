"""`MembershipChanges`: one add-a-learner → promote → remove-a-voter cycle per run, and leadership transfers.

Owns: the membership timeline. At random steps, when a leader is known, it (1) starts the spare node
(`SimConfig.spare_id`) with a blank disk and proposes `ADD_LEARNER`; (2) once the learner has caught up,
proposes `PROMOTE_LEARNER`; (3) after the promotion committed, proposes `REMOVE_NODE` of a random initial
voter — possibly the leader itself, which then steps down once the removal commits — bringing the voter
count back to the initial size. A proposal the leader refuses
(`ProposalDropped`, `BadConfChange`, `NotLeader`: a change in flight, a learner not caught up, no commit
in the term yet) is simply retried at a later step. The removed node keeps running: a removed replica
that has not learned of its removal must not disrupt the group either. At the same rate, the leader is
asked to hand leadership to a random voter (`transfer_leadership`: TimeoutNow, an election without
pre-vote that voters accept despite leader stickiness).

Invariants:
  1. Voters never drop below the initial count, so the fault atlas stays a minority of every configuration
     (config invariant 2).
  2. The plan only moves forward: each stage is proposed until a leader's applied configuration shows it.
     The seed's rate starts the cycle (and transfers); a started cycle moves on at `_STAGE_RATE`.
  3. The removed node is not a member any more: the liveness phase requires agreement among the members of
     the final leader's configuration only.
  4. Its randomness comes from the clients' generator (one stream for the workload and the administration).

Imports: stdlib, `jsraft.raft`, siblings. Reference: Raft thesis §4 (single-server changes, learners).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from jsraft.raft import BadConfChange, ConfChange, ConfChangeType, NotLeader, ProposalDropped

if TYPE_CHECKING:
    from jsraft.testing.sim.simulator import Simulation

# Once a cycle has started, the chance per step of moving it on (a proposal or noticing it applied).
_STAGE_RATE = 0.05


class MembershipChanges:
    def __init__(self, rng: random.Random, rate: float, initial: tuple[str, ...], spare: str) -> None:
        self.rng = rng
        self.rate = rate
        self.initial = initial
        self.spare = spare
        self.stage = "idle"  # idle -> learner -> voter -> removed
        self.removed: str | None = None
        self.proposals = 0
        self.transfers = 0

    def step(self, sim: Simulation) -> None:
        if not self.rate:
            return
        started = self.spare in sim.drivers and self.stage != "removed"
        if self.rng.random() >= (_STAGE_RATE if started else self.rate):
            return
        leader_id = sim.leader_id()
        if leader_id is None:
            return
        node = sim.drivers[leader_id].node
        assert node is not None
        conf = node.conf
        if not started and self.rng.random() < 0.5:
            self._transfer(sim, leader_id)
            return
        if self.stage == "removed":
            return
        if self.stage == "idle":
            if self.spare not in sim.drivers:
                sim.add_spare()
            if self.spare in conf.learners:
                self.stage = "learner"
            else:
                self._propose(sim, leader_id, ConfChange(type=ConfChangeType.ADD_LEARNER, node_id=self.spare))
        elif self.stage == "learner":
            if self.spare in conf.voters:
                self.stage = "voter"
            else:
                self._propose(sim, leader_id, ConfChange(type=ConfChangeType.PROMOTE_LEARNER,
                                                         node_id=self.spare))
        elif self.stage == "voter":
            if self.removed is None:
                self.removed = self.rng.choice(self.initial)
            if self.removed not in conf.voters:
                self.stage = "removed"
                sim.trace.add(f"membership: {self.removed} removed")
            else:
                self._propose(sim, leader_id, ConfChange(type=ConfChangeType.REMOVE_NODE, node_id=self.removed))

    def _transfer(self, sim: Simulation, leader_id: str) -> None:
        node = sim.drivers[leader_id].node
        assert node is not None
        target = self.rng.choice(node.conf.voters)
        try:
            node.transfer_leadership(target)
        except (BadConfChange, NotLeader) as error:
            sim.trace.add(f"membership: {leader_id} refused to transfer leadership to {target}: {error}")
            return
        self.transfers += 1
        sim.trace.add(f"membership: {leader_id} transfers leadership to {target}")

    def _propose(self, sim: Simulation, leader_id: str, change: ConfChange) -> None:
        node = sim.drivers[leader_id].node
        assert node is not None
        try:
            index = node.propose_conf_change(change)
        except (ProposalDropped, BadConfChange, NotLeader) as error:
            sim.trace.add(f"membership: {leader_id} refused {change.type.name} {change.node_id}: {error}")
            return
        self.proposals += 1
        sim.trace.add(f"membership: {leader_id} proposed {change.type.name} {change.node_id} at {index}")
