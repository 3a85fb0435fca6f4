"""A stream group's Raft membership follows its meta assignment's peers (layer L5).

Owns: `next_change` (pure: the one membership step that moves a group's configuration toward the
assignment's peers), `reconcile_members` (the stream leader carries that step out) and `check_members` (a
replica's periodic look: start a step while it leads, notice its own removal while leaving), used for scaling a
stream up (R1 → R3) and down (R3 → R1) and for re-placing a removed peer.

The order of steps, one at a time (the Raft core refuses a second change while one is in flight):
  1. a desired peer the group does not know is added as a learner (it starts blank and catches up);
  2. a caught-up learner is promoted (the core refuses until it is caught up; we simply retry later);
  3. a voter or learner that is not desired is removed — never before every desired peer is a voter, so
     the group never shrinks below what it is growing to; the leader itself last, and only by handing
     leadership to a desired voter first (a leader never removes itself: the next leader does).

Invariants:
  1. Only the group's leader proposes membership changes, and only changes toward the assignment.
  2. A group never loses a voter before its replacement is a voter (scale-down happens after scale-up).

Imports: L0, L1 (`raft`), L4 (`runtime`), stdlib, trio. Reference: Raft thesis §4 (single-server changes).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import attrs
import trio

from jsraft.errors import JsraftError
from jsraft.raft.membership import ConfChange, ConfChangeType
from jsraft.raft.status import Role
from jsraft.runtime import NodeRuntime

log = logging.getLogger("jsraft.server.stream")


@attrs.frozen
class Transfer:
    """Hand leadership to `to` first: the leader itself is the voter to remove."""

    to: str


def next_change(me: str, desired: Collection[str], voters: Collection[str],
                learners: Collection[str]) -> ConfChange | Transfer | None:
    """The next step toward a configuration whose voters are exactly `desired` (None: there already)."""
    desired_set, voters_set, learners_set = set(desired), set(voters), set(learners)
    for peer in sorted(desired_set - voters_set - learners_set):
        return ConfChange(type=ConfChangeType.ADD_LEARNER, node_id=peer)
    for peer in sorted(desired_set & learners_set):
        return ConfChange(type=ConfChangeType.PROMOTE_LEARNER, node_id=peer)
    for peer in sorted(learners_set - desired_set):
        return ConfChange(type=ConfChangeType.REMOVE_NODE, node_id=peer)
    for peer in sorted(voters_set - desired_set - {me}):
        return ConfChange(type=ConfChangeType.REMOVE_NODE, node_id=peer)
    if me in voters_set and me not in desired_set:
        targets = sorted(desired_set & voters_set)
        return Transfer(targets[0]) if targets else None
    return None


async def reconcile_members(runtime: NodeRuntime, group: str, desired: Collection[str]) -> str | None:
    """If this node leads `group`, take the next step toward `desired`; returns what it did, for logs."""
    status = runtime.status(group).raft
    if status.role is not Role.LEADER or not desired:
        return None
    step = next_change(status.node_id, desired, status.voters, status.learners)
    if step is None:
        return None
    if isinstance(step, Transfer):
        runtime.transfer_leadership(group, step.to)
        return f"transfer leadership to {step.to}"
    try:
        await runtime.propose_conf_change(group, step)
    except JsraftError as error:  # a change in flight, a learner not caught up, leadership lost: later
        log.debug("group %s: %s %s not taken yet: %s", group, step.type.name, step.node_id, error)
        return None
    return f"{step.type.name} {step.node_id}"


def check_members(replica: Any, nursery: trio.Nursery) -> None:
    """A `StreamReplica`'s periodic membership look: a leaving replica whose removal the group applied is
    let go (`left`: the manager closes it and removes its files); a leader starts one step (at a time)."""
    try:
        status = replica.runtime.status(replica.group).raft
    except JsraftError:
        return
    if replica.leaving and replica.node_id not in status.voters + status.learners:
        replica.left.set()
        return
    if status.role is Role.LEADER and not replica._members_task:
        replica._members_task = True
        nursery.start_soon(_members_step, replica)


def members_settled(replica: Any) -> bool:
    """Nothing for `check_members` to do: the group's members are the assignment's peers, and the replica is
    not leaving. Only then may its loop sleep through its group's quiescence (a step must not wait 30 s)."""
    try:
        status = replica.runtime.status(replica.group).raft
    except JsraftError:
        return False
    return not replica.leaving and not status.learners and sorted(status.voters) == sorted(replica.peers)


async def _members_step(replica: Any) -> None:
    try:
        done = await reconcile_members(replica.runtime, replica.group, replica.peers)
        if done is not None:
            log.info("stream %s: membership: %s", replica.name, done)
    finally:
        replica._members_task = False


def loop_may_sleep(replica: Any) -> bool:
    """A tick of the replica's loop would do nothing until its group wakes: the group is quiesced,
    leadership is followed (a Raft leader has its StreamLeader), the assigned config is applied and the
    membership is the assignment's. Otherwise a step (a config, a membership change) would wait for the
    sleep's bound."""
    return (replica.runtime.ticker.is_quiet(replica.group) and not replica._config_due()
            and not replica._config_task and replica.runtime.is_leader(replica.group) == (replica.leader is not None)
            and members_settled(replica))
