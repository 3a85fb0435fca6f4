"""Helpers for the tests of the node's record of started groups on real files (`runtime.group_record`).

`open_member` is `NodeRuntime.open_group`'s storage half for n1 of a new 3-voter group (`RECORD_VOTERS`):
`open_storage` under a `GroupRecord`, `replica.restore.prepare` with the record's vote-term ceiling, a core,
and the production `GroupCycle` wired to the record (`started_fn`, `ceiling_fn`). `run_cycle` runs one cycle
of the runtime's steps (`persist_jobs`) and returns the messages it sends after its persistence.
"""

from __future__ import annotations

import random

from runtime_harness import GROUP, ListMachine

from jsraft.disk import OsDisk
from jsraft.raft import RaftNode
from jsraft.raft.config import RaftConfig
from jsraft.replica import GroupCycle, marker_contents
from jsraft.replica.restore import prepare
from jsraft.runtime.group_record import GroupRecord
from jsraft.runtime.persist import Job, ceiling_fn, open_storage, persist_jobs, started_fn, vote_ceiling

RECORD_VOTERS = ("n1", "n2", "n3")


def open_member(root: str, record: GroupRecord) -> tuple[RaftNode, GroupCycle]:
    """n1's core and cycle for group `GROUP` under `root` (the voters are also its peers)."""
    group_disk = OsDisk(root, shadow=True).sub(f"groups/{GROUP}")
    wal, recovered, formatted = open_storage(group_disk, GROUP, 1 << 20, record, assigned_index=9)
    machine = ListMachine()
    node = RaftNode(RaftConfig(node_id="n1"), random.Random(1),
                    prepare(recovered, machine, voters=RECORD_VOTERS, formatted=formatted,
                            vote_ceiling=vote_ceiling(record, GROUP)))
    cycle = GroupCycle(name=GROUP, node=node, wal=wal, disk=group_disk, state_machine=machine,
                       marker=None if formatted else marker_contents(GROUP, "n1"), snapshot_every_entries=None,
                       on_started=started_fn(record, GROUP), on_term=ceiling_fn(record, GROUP))
    return node, cycle


def run_cycle(cycle: GroupCycle) -> list:
    """One cycle of the runtime's steps, if the core has work; the messages it sends after persisting."""
    if not cycle.node.has_ready():
        return []
    work = cycle.take()
    (job,) = persist_jobs([Job(wal=cycle.wal, disk=cycle.disk, work=work)])
    assert job.error is None
    sent = list(work.ready.messages) if work.ready is not None else []
    cycle.finish(work)
    return sent
