"""Read index: linearizable reads without writing to the log (layer L1).

Owns: `read_index` and the confirmation rounds behind it. The leader notes its commit index for the read,
then confirms it is still leader by a round of heartbeats acknowledged by a quorum; after that, state
applied through the noted index reflects every write acknowledged before the read began.

Invariants:
  1. A read is served only after the leader has committed an entry of its current term (before that, its
     commit index may lag what previous leaders committed); earlier requests wait, bounded.
  2. A read started in round `r` is released only when a quorum of voters (the leader included) has
     answered an AppendEntries sent in round `r` or later, in the current term. Reads are released in
     the order they were requested.
  3. Pending reads are dropped when the node stops being leader; callers retry.

Imports: L0, attrs. Reference: Raft thesis §6.4; etcd-io/raft `read_only.go`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from jsraft.raft import membership, replication
from jsraft.raft.errors import NotLeader, ProposalDropped
from jsraft.raft.ready import ReadState
from jsraft.raft.status import Role

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode


@attrs.frozen
class PendingRead:
    round: int
    index: int
    ctx: bytes


def read_index(node: RaftNode, ctx: bytes) -> None:
    if node.role is not Role.LEADER:
        raise NotLeader(node.leader_id)
    if len(node.pending_reads) + len(node.reads_waiting_commit) >= node.config.pending_reads_max:
        raise ProposalDropped("too many pending reads")
    if not committed_in_current_term(node):
        node.reads_waiting_commit.append(ctx)
        return
    _start(node, ctx)


def committed_in_current_term(node: RaftNode) -> bool:
    return node.log.term_at(node.log.commit_index) == node.current_term


def _start(node: RaftNode, ctx: bytes) -> None:
    if membership.quorum(node.conf) == 1 and node.conf.voters == (node.id,):
        node.read_states.append(ReadState(index=node.log.commit_index, ctx=ctx))
        return
    node.read_round += 1
    node.pending_reads.append(PendingRead(node.read_round, node.log.commit_index, ctx))
    replication.broadcast_heartbeat(node)


def on_commit(node: RaftNode) -> None:
    """Invariant 1: start the reads that waited for the first commit of this term."""
    if node.role is not Role.LEADER or not node.reads_waiting_commit or not committed_in_current_term(node):
        return
    waiting = list(node.reads_waiting_commit)
    node.reads_waiting_commit.clear()
    for ctx in waiting:
        _start(node, ctx)


def on_leadership_confirmed(node: RaftNode) -> None:
    """An AppendEntriesResponse advanced some voter's acknowledged round: release what a quorum confirms."""
    if node.role is not Role.LEADER:
        return
    needed = membership.quorum(node.conf)
    while node.pending_reads:
        read = node.pending_reads[0]
        confirmed = sum(1 for voter in node.conf.voters
                        if voter == node.id
                        or (voter in node.progress and node.progress[voter].read_round_acked >= read.round))
        if confirmed < needed:
            return
        node.pending_reads.popleft()
        node.read_states.append(ReadState(index=read.index, ctx=read.ctx))
