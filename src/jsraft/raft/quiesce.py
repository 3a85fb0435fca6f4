"""Quiescence decisions: when a replica of an idle group may stop ticking (layer L1).

Owns: `leader_may_quiesce`, `follower_may_quiesce` and `members`: read-only questions a driver asks a
`RaftNode` before it stops ticking it. They change nothing in the core: term, vote, log and commit rules are
untouched; a quiesced replica is simply not ticked (no heartbeats, no election timer) until its driver
wakes it. What keeps that safe — waking on any message or proposal, and a per-peer node liveness that
wakes a quiesced replica when a member's node stops being heard — is the driver's
(`runtime.quiesce`); this module only says when a group has nothing left to do.

Invariants:
  1. A leader may quiesce only when its whole log is committed and applied here, every other member
     (voters and learners) its driver counts as live has acknowledged the last index and been sent the
     commit index covering it, no such member is repairing or being sent a snapshot, the live voters
     with the leader are a majority, and no read, transfer, snapshot or conf change is pending: nothing
     a tick could still move forward. A member that is not live (its node is down or cut off) is not
     waited for, once check-quorum has marked it inactive (`recent_active`): ticking for it would only
     send heartbeats nobody receives, and the driver wakes the group when that member's node is heard
     again (`runtime.quiesce` invariant 2).
  2. A follower may quiesce only on its leader's word for the term it knows the leader in, and only
     once its own log ends, committed, at the index the leader quiesced at: it then holds exactly the
     leader's log and knows it is committed, so nothing is owed to it. (Applying and answering the
     last heartbeat need no ticks: a follower may quiesce with those still to do.)
  3. Both are pure reads of the core (no field of it is written here).

Imports: L0, siblings. Reference: CockroachDB replica quiescence (`replica_raft_quiesce.go`, design
"Quiescing Ranges"); etcd-io/raft's `CheckQuorum`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jsraft.raft.membership import quorum
from jsraft.raft.progress import ProgressState
from jsraft.raft.status import Role

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode


def members(node: RaftNode) -> tuple[str, ...]:
    """Every other member of the group in the configuration in force (voters, then learners)."""
    return tuple(m for m in (*node.conf.voters, *node.conf.learners) if m != node.id)


def _log_settled(node: RaftNode) -> bool:
    log = node.log
    return (not node.repairing and log.commit_index == log.last_index and node.pending_snapshot is None
            and node.snapshot_receive is None)


def leader_may_quiesce(node: RaftNode, live: Callable[[str], bool] | None = None) -> bool:
    """Invariant 1: this replica leads and a tick could not move anything forward for the members
    `live(member)` says are there (None: every member)."""
    if node.role is not Role.LEADER or node.lead_transferee is not None:
        return False
    if node.pending_reads or node.reads_waiting_commit or node.read_states:
        return False
    if not _log_settled(node) or node.pending_conf_index > node.log.commit_index:
        return False
    if node.log.applied_index != node.log.last_index or node.log.has_writes() or node.outbox:
        return False
    last, commit = node.log.last_index, node.log.commit_index
    present = [member for member in members(node) if live is None or live(member)]
    if live is not None and 1 + sum(1 for m in present if m in node.conf.voters) < quorum(node.conf):
        return False  # without a live majority a leader must keep ticking, to step down by check-quorum
    for member in members(node):
        progress = node.progress.get(member)
        if member not in present and progress is not None and progress.recent_active:
            # Not live, but the core still counts it as recently active: tick until check-quorum marks
            # it inactive, so the leader's status (`reachable_followers`, which a hand-over picks a
            # target from) never names a dead member as reachable while the group sleeps.
            return False
    for member in present:
        progress = node.progress.get(member)
        if progress is None or progress.match_index != last or progress.state is not ProgressState.REPLICATE:
            return False
        if progress.repairing or progress.sent_commit < commit or progress.inflight:
            return False
    return True


def follower_may_quiesce(node: RaftNode, term: int, leader_id: str, index: int) -> bool:
    """Invariant 2: the leader `leader_id` quiesced at `index` in `term`; may this replica follow suit?"""
    if node.role is not Role.FOLLOWER or node.current_term != term or node.leader_id != leader_id:
        return False
    return _log_settled(node) and node.log.last_index == index and node.log.commit_index == index
