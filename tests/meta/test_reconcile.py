"""Restore reconciliation (`meta.reconcile.plan_restore`): what a node does with its stream groups after a
meta snapshot replaced its state.

Method: a "leader" meta machine applies a history (creates, deletes, re-creates, updates); a "lagging"
machine applied only a prefix of it, as a node that was down would have. The lagging node's groups (its
state before the restore, and the replicas it runs) and the leader's snapshot restored into it are the
inputs; the plan must remove exactly the groups a committed delete removed, leave the ones moved off the
node, open or update its current assignments, and never touch what its own meta state never held.
"""

from __future__ import annotations

from meta_helpers import NODES3, commit, config, create, new_cluster

from jsraft.meta import MetaStateMachine, group_name, plan_restore
from jsraft.meta.reconcile import created_index_of


def _groups(machine: MetaStateMachine) -> list[tuple[str, str]]:
    return [(a.name, a.group) for a in machine.streams()]


def _restored(lagging: MetaStateMachine, leader: MetaStateMachine) -> list[tuple[str, str]]:
    """Restore `leader`'s snapshot into `lagging` as the adapter does; the replaced `(stream, group)`s."""
    replaced = _groups(lagging)
    lagging.restore(leader.snapshot())
    return replaced


def test_a_stream_deleted_inside_the_snapshot_is_removed_and_the_new_ones_open():
    leader = new_cluster(NODES3)
    create(leader, "A", subjects=["a"], num_replicas=3)
    create(leader, "B", subjects=["b"], num_replicas=3)
    lagging = MetaStateMachine()
    lagging.restore(leader.snapshot())  # the node saw A and B, then went down
    old_a, old_b = lagging.stream("A").group, lagging.stream("B").group
    commit(leader, leader.propose_delete_stream("A"))
    create(leader, "A", subjects=["a2"], num_replicas=3)  # re-created: another group of the same name
    create(leader, "C", subjects=["c"], num_replicas=3)
    commit(leader, leader.propose_delete_stream("B"))

    replaced = _restored(lagging, leader)
    plan = plan_restore(lagging, "n1", known=replaced, running={"A": old_a})
    # B was not running here (say its replica had not opened yet): known from the replaced state suffices.
    assert plan.remove == (("A", old_a), ("B", old_b))
    assert [a.name for a in plan.open] == ["A", "C"]
    assert plan.open[0].group != old_a
    assert plan.leave == ()


def test_nothing_is_removed_that_the_node_never_knew_or_that_is_still_assigned():
    leader = new_cluster(NODES3)
    create(leader, "KEEP", subjects=["k"], num_replicas=3)
    lagging = MetaStateMachine()  # a node starting from nothing (its first restore): knows no group
    replaced = _restored(lagging, leader)
    # A directory on disk the meta state never held is not an input at all: it stays for quarantine.
    plan = plan_restore(lagging, "n1", known=replaced, running={})
    assert plan.remove == () and [a.name for a in plan.open] == ["KEEP"]
    # A running replica of a group the restored state still assigns is kept (and updated).
    keep = lagging.stream("KEEP").group
    plan = plan_restore(lagging, "n1", known=[("KEEP", keep)], running={"KEEP": keep})
    assert plan.remove == () and plan.leave == ()


def test_a_group_created_after_the_snapshot_index_proves_nothing():
    leader = new_cluster(NODES3)
    create(leader, "S", subjects=["s"], num_replicas=3)
    lagging = MetaStateMachine()
    lagging.restore(leader.snapshot())
    later = group_name("T", lagging.applied_index + 5)  # not covered by the restored state
    garbage = "not-a-group-name"
    plan = plan_restore(lagging, "n1", known=[("T", later), ("U", garbage)], running={"T": later})
    assert plan.remove == ()


def test_a_replica_moved_off_this_node_leaves_and_is_not_removed():
    leader = new_cluster(NODES3)
    create(leader, "S", subjects=["s"], num_replicas=3)
    lagging = MetaStateMachine()
    lagging.restore(leader.snapshot())
    group = lagging.stream("S").group
    applied = commit(leader, leader.propose_update_stream("S", config("S", subjects=["s"], num_replicas=1),
                                                          online=set(NODES3)))
    assert applied.ok, applied.error
    (keeper,) = leader.stream("S").peers
    gone = next(node for node in NODES3 if node != keeper)

    replaced = _restored(lagging, leader)
    plan = plan_restore(lagging, gone, known=replaced, running={"S": group})
    assert plan.remove == () and [a.name for a in plan.leave] == ["S"] and plan.open == ()
    kept = plan_restore(lagging, keeper, known=replaced, running={"S": group})
    assert kept.leave == () and [(a.name, a.peers) for a in kept.open] == [("S", (keeper,))]


def test_created_index_of_round_trips_group_names():
    assert created_index_of("S-1", group_name("S-1", 42)) == 42
    assert created_index_of("S", group_name("S", 7)) == 7
    assert created_index_of("S", group_name("T", 7)) is None
    assert created_index_of("S", "S-S-x") is None
    assert created_index_of("S", "S-S-007") is None  # not the canonical spelling of index 7
