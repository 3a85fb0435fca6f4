"""Single-server membership changes with learners (layer L1).

Owns: `ConfChange` and its binary encoding (the data of a `CONF_CHANGE` entry), the checks a leader
makes before proposing one, and applying committed changes to the node's `ConfState` and, on the
leader, to its progress table. A change takes effect when it commits, on every replica, in log order.

Invariants:
  1. At most one membership change is uncommitted at a time, and a leader proposes one only after it has
     committed an entry of its own term (the single-server safety condition, thesis §4.1 and its
     erratum). Together these keep every two consecutive configurations' majorities overlapping.
  2. A learner is promoted only when it is not repairing and its match index is within
     `learner_catchup_entries_max` of the leader's last index: a new or repairing member catches up
     before it votes.
  3. The voter set is never emptied.
  4. `conf_history` holds, for the snapshot index and every applied change after it, the configuration
     in force from that index on; `conf_at()` reads it when the application compacts.

Imports: L0, attrs, stdlib struct. Reference: Raft thesis §4 (membership changes), etcd-io/raft
`confchange`.
"""

from __future__ import annotations

import enum
import struct
from typing import TYPE_CHECKING

import attrs

from jsraft.errors import invariant
from jsraft.raft.errors import BadConfChange, ProposalDropped
from jsraft.raft.progress import Progress
from jsraft.raft.status import Role
from jsraft.raft.types import ConfState, EntryType

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode

_CONF_CHANGE_VERSION = 1
_HEADER = struct.Struct("<BB")  # version, change type
_NODE_ID_BYTES_MAX = 255


class ConfChangeType(enum.IntEnum):
    """Durable numbers (they are in the log): never reuse or renumber one."""

    ADD_VOTER = 1
    ADD_LEARNER = 2
    PROMOTE_LEARNER = 3
    REMOVE_NODE = 4  # a voter or a learner


@attrs.frozen(kw_only=True)
class ConfChange:
    type: ConfChangeType
    node_id: str


def encode_conf_change(change: ConfChange) -> bytes:
    node_id = change.node_id.encode()
    invariant(0 < len(node_id) <= _NODE_ID_BYTES_MAX, "node id fits a conf change")
    return _HEADER.pack(_CONF_CHANGE_VERSION, change.type) + node_id


def decode_conf_change(data: bytes) -> ConfChange:
    """Decode a committed entry's data; the log is trusted (its CRC was checked by the WAL)."""
    version, change_type = _HEADER.unpack_from(data)
    invariant(version == _CONF_CHANGE_VERSION, f"conf change version {version} is known")
    return ConfChange(type=ConfChangeType(change_type), node_id=data[_HEADER.size:].decode())


def quorum(conf: ConfState) -> int:
    return len(conf.voters) // 2 + 1


def members(conf: ConfState) -> tuple[str, ...]:
    return tuple(sorted(conf.voters + conf.learners))


def apply_to_conf(conf: ConfState, change: ConfChange) -> ConfState:
    """The configuration after `change`; raises `BadConfChange` if it does not apply."""
    voters, learners, node = list(conf.voters), list(conf.learners), change.node_id
    if change.type is ConfChangeType.ADD_VOTER:
        if node in voters or node in learners:
            raise BadConfChange(f"{node} is already a member (promote a learner instead)")
        voters.append(node)
    elif change.type is ConfChangeType.ADD_LEARNER:
        if node in voters or node in learners:
            raise BadConfChange(f"{node} is already a member")
        learners.append(node)
    elif change.type is ConfChangeType.PROMOTE_LEARNER:
        if node not in learners:
            raise BadConfChange(f"{node} is not a learner")
        learners.remove(node)
        voters.append(node)
    else:
        if node in voters:
            if len(voters) == 1:
                raise BadConfChange("cannot remove the last voter")
            voters.remove(node)
        elif node in learners:
            learners.remove(node)
        else:
            raise BadConfChange(f"{node} is not a member")
    return ConfState(voters=tuple(sorted(voters)), learners=tuple(sorted(learners)))


def check_proposal(node: RaftNode, change: ConfChange) -> None:
    """Raise unless the leader may propose `change` now (invariants 1–3)."""
    if node.pending_conf_index > node.conf_applied_index:
        raise ProposalDropped("a membership change is already in progress")
    if node.log.term_at(node.log.commit_index) != node.current_term:
        raise ProposalDropped("the leader has not committed an entry of its term yet")
    apply_to_conf(node.conf, change)
    if change.type is ConfChangeType.PROMOTE_LEARNER:
        progress = node.progress[change.node_id]
        behind = node.log.last_index - progress.match_index
        if progress.repairing or behind > node.config.learner_catchup_entries_max:
            raise ProposalDropped(
                f"learner {change.node_id} has not caught up: match {progress.match_index}, "
                f"last {node.log.last_index}, repairing {progress.repairing}")


def apply_committed(node: RaftNode) -> None:
    """Apply the membership changes that have committed since the last call, in log order."""
    log = node.log
    high = min(log.commit_index, log.verified_last_index())
    for index in range(max(node.conf_applied_index, log.snapshot_index) + 1, high + 1):
        entry = log.entry_at(index)
        if entry.type is EntryType.CONF_CHANGE:
            _apply_one(node, index, decode_conf_change(entry.data))
        node.conf_applied_index = index


def _apply_one(node: RaftNode, index: int, change: ConfChange) -> None:
    try:
        node.conf = apply_to_conf(node.conf, change)
    except BadConfChange:
        # The leader checked it against the same configuration; replicas agree on the log, so they all
        # skip it alike. This can only follow a race the leader's check did not see.
        return
    node.conf_history.append((index, node.conf))
    if node.role is Role.LEADER:
        _update_progress(node)


def _update_progress(node: RaftNode) -> None:
    wanted = set(members(node.conf))
    for peer in list(node.progress):
        if peer not in wanted:
            del node.progress[peer]
    for peer in sorted(wanted - set(node.progress)):
        node.progress[peer] = Progress(node.log.last_index + 1, node.config.max_inflight_msgs)
    if node.lead_transferee is not None and node.lead_transferee not in node.conf.voters:
        node.lead_transferee = None


def conf_at(node: RaftNode, index: int) -> ConfState:
    """The configuration in force at `index` (invariant 4)."""
    found = node.conf_history[0][1]
    for changed_at, conf in node.conf_history:
        if changed_at <= index:
            found = conf
    return found


def roll_back(node: RaftNode, index: int) -> None:
    """Forget membership changes above `index` (a repairing replica found them among stale copies)."""
    if node.conf_applied_index <= index:
        return
    node.conf_history = [(i, c) for i, c in node.conf_history if i <= index]
    node.conf = node.conf_history[-1][1]
    node.conf_applied_index = index


def trim_history(node: RaftNode, snapshot_index: int) -> None:
    node.conf_history = [(snapshot_index, conf_at(node, snapshot_index))] + [
        (i, c) for i, c in node.conf_history if i > snapshot_index]
