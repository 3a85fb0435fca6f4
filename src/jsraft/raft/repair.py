"""Repairing replicas: entering, leaving, halting, and the operator's override (layer L1).

Owns: the storage-fault rules that are about a replica's own damage.
  Rule 2  `classify_restored_log`: a log shorter than the acked watermark (or the commit hint, or the
          application's applied index), a faulty record, a persisted `repairing` flag — each makes the
          replica repairing, and the next `Ready` persists `repairing=True`.
  Rule 3  `trusted_index`, `maybe_finish_repair`: a repairing replica trusts only the prefix a leader has
          confirmed entry by entry; it leaves repairing when no faulty index remains, the whole log is
          confirmed and durable, reaches the watermark, and covers the current leader's commit index,
          once that leader committed an entry of its own term.
  Rule 4  `halted_reason` + `StatusProbe`: if the voters that are not repairing cannot form a quorum, the
          group halts and says so; `accept_data_loss` is the operator's explicit way out.
  Rule 7  `classify_restored_log`: a data directory whose storage UUID changed is a new member that may
          have voted under its old identity: it is repairing. `maybe_finish_repair` and
          `accept_data_loss`: every replica that leaves repairing fences its vote (`vote_fence`): no vote
          in the current term, nor in any term up to its restored term + 1 (a damaged hard-state slot
          loses a vote as surely as lost storage does, and the one-step rule bounds its term). A replica
          restored repairing starts in that fence term with no vote (`vote_fence` invariant 4), so the
          leader that repairs it is of the fence term or above, never an older one it no longer may follow.

Invariants:
  1. A repairing replica is never leader.
  2. `repairing` changes only here (and at construction), and every change reaches the hard state.

Imports: L0, attrs. Reference: DESIGN.md §4 (storage-fault rules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from jsraft.errors import invariant
from jsraft.raft import term_query, vote_fence
from jsraft.raft.errors import ProposalDropped
from jsraft.raft.messages import StatusProbe, StatusProbeResponse
from jsraft.raft.status import Role, Status
from jsraft.raft.types import Entry, EntryType

if TYPE_CHECKING:
    from jsraft.raft.config import RestoredState
    from jsraft.raft.core import RaftNode


@attrs.frozen(kw_only=True)
class RestoreVerdict:
    """How the core takes the restored log: the entries and faulty indexes it keeps, and why (if at all)
    it is repairing. `vote_unknown`: the vote this member cast under its old identity may be lost."""

    entries: tuple[Entry, ...]
    faulty: frozenset[int]
    repair_reason: str | None
    vote_unknown: bool = False


def classify_restored_log(restored: RestoredState) -> RestoreVerdict:
    """Rules 2 and 7: the reasons, if any, that this replica must repair before it votes or leads."""
    hard_state = restored.hard_state
    last = restored.last_index
    reasons: list[str] = []
    if restored.storage_uuid_changed:
        reasons.append("storage UUID changed (new member)")
    if hard_state.repairing:
        reasons.append("hard state says repairing")
    reasons.extend(restored.repair_reasons)
    if restored.faulty:
        reasons.append(f"{len(restored.faulty)} faulty entr{'y' if len(restored.faulty) == 1 else 'ies'} "
                       f"from index {min(restored.faulty)}")
    if last < hard_state.acked_watermark:
        reasons.append(f"log ends at {last}, below acked watermark {hard_state.acked_watermark}")
    if last < hard_state.commit_index:
        reasons.append(f"log ends at {last}, below commit index {hard_state.commit_index}")
    if restored.applied_index is not None and last < restored.applied_index:
        reasons.append(f"log ends at {last}, below applied index {restored.applied_index}")
    return RestoreVerdict(
        entries=restored.contiguous_entries(),
        faulty=restored.faulty,
        repair_reason="; ".join(reasons) or None,
        vote_unknown=restored.storage_uuid_changed,
    )


def trusted_index(node: RaftNode) -> int:
    """The end of the prefix this replica can vouch for: when healthy, up to its first faulty entry; when
    repairing, only what a leader's log has confirmed entry by entry (rule 3) — storage may have restored
    stale copies that pass their CRC (a rolled-back write), so neither applying nor a consistency check
    may rely on the rest."""
    return node.repair_verified_index if node.repairing else node.log.verified_last_index()


def maybe_finish_repair(node: RaftNode) -> None:
    """Rule 3: leave repairing once the log is whole again, as far as the current leader can tell."""
    if not node.repairing:
        return
    invariant(node.role is not Role.LEADER, "a repairing replica is never leader")
    log = node.log
    if log.faulty or log.has_writes() or node.pending_snapshot is not None:
        # Not before the repaired log is durable: the flag and the data it vouches for go to disk in order.
        return
    if log.last_index < node.acked_watermark or node.repair_verified_index < log.last_index:
        return
    if node.leader_id is None or node.leader_commit_seen is None:
        return
    if node.leader_match_index < node.leader_commit_seen:
        return
    if node.log.term_at(node.leader_commit_seen) != node.current_term:
        # Not before the leader committed an entry of its own term: until then entries below it that an
        # older leader committed — with this replica's lost acknowledgement — may lie above its commit
        # index (sim register seed 1602: a replica that lost its directory and node record finished at the
        # leader's commit 202, below an acked 203 only the leader still held, then voted a leader without it).
        return
    node.repairing = False
    node.repair_reason = None
    # Rule 7, for every repair: whatever made this replica repair — a new storage UUID, a lost or damaged
    # hard-state slot (recovery falls back to the older slot, which may predate a vote), a rolled-back
    # write — a vote it cast in the current term, or the one above its restored term, may be among what
    # it lost: it votes in neither (`vote_fence`).
    vote_fence.fence_at_repair_end(node)
    node.vote_unknown = False


def pad_for_repairing(node: RaftNode) -> bool:
    """Rule 3, leader side: grow the log past a repairing follower's acked watermark with NOOP entries.

    A follower that acknowledged an older leader's uncommitted tail and then lost part of its log keeps a
    watermark beyond our last index; it may leave repairing only once its log reaches that watermark, so in
    an idle group it would stay repairing forever (one fault away from a halt). The follower reports its
    watermark while repairing; each heartbeat the leader appends NOOPs towards it — at most as many as the
    uncommitted-entry budget allows, and only for a gap an honest follower can have (an old leader never
    held more than that budget uncommitted beyond what we hold). Returns True if it appended any.
    """
    if node.lead_transferee is not None:
        return False
    log = node.log
    budget = node.config.uncommitted_entries_max
    target = max((p.repair_watermark for p in node.progress.values() if p.repairing), default=0)
    if target <= log.last_index or target - log.last_index > budget:
        return False
    count = min(target - log.last_index, budget - (log.last_index - log.commit_index))
    if count <= 0:
        return False
    first = log.last_index + 1
    node.append_as_leader([Entry(index=first + i, term=node.current_term, type=EntryType.NOOP)
                           for i in range(count)])
    return True


def accept_data_loss(node: RaftNode) -> bool:
    """Rule 4, operator override: stop repairing by keeping only the verified prefix of the log.

    Entries from the first faulty index on are truncated (even committed ones: that is the loss the
    operator accepts), the commit index and acked watermark are lowered to the new last index, and
    `repairing=False` is persisted. Returns False if this replica was not repairing.
    """
    if not node.repairing:
        return False
    # The operator gives up the term query's guarantee with the data: fence through the highest term heard.
    term_query.finish(node)
    log = node.log
    keep_through = log.verified_last_index()
    if log.applied_index > keep_through:
        raise ProposalDropped(
            f"the application applied through {log.applied_index}, past the verified log ({keep_through})")
    log.lower_commit(keep_through)
    if keep_through < log.last_index:
        log.truncate_from(keep_through + 1)
    node.acked_watermark = min(node.acked_watermark, log.last_index)
    node.repairing = False
    node.repair_reason = None
    vote_fence.fence_at_repair_end(node)  # rule 7, as in `maybe_finish_repair`
    node.vote_unknown = False
    return True


def note_peer_repairing(node: RaftNode, peer: str, repairing: bool) -> None:
    """Remember what a voter said about itself (only voters: the map stays bounded by the membership)."""
    if peer in node.conf.voters:
        node.peer_repairing[peer] = repairing


def send_status_probes(node: RaftNode) -> None:
    """A repairing voter that knows no leader asks the other voters whether they are repairing too."""
    if node.id not in node.conf.voters:
        return
    for peer in node.conf.voters:
        if peer != node.id:
            node.send(StatusProbe(from_id=node.id, to_id=peer, term=node.current_term, repairing=node.repairing))


def handle_status_probe(node: RaftNode, message: StatusProbe) -> None:
    note_peer_repairing(node, message.from_id, message.repairing)
    node.send(StatusProbeResponse(from_id=node.id, to_id=message.from_id, term=node.current_term,
                                  repairing=node.repairing, leader_id=node.leader_id))


def handle_status_probe_response(node: RaftNode, message: StatusProbeResponse) -> None:
    note_peer_repairing(node, message.from_id, message.repairing)


def halted_reason(node: RaftNode) -> str | None:
    """Rule 4: why the group cannot elect a leader, if this replica knows it cannot."""
    if node.leader_id is not None:
        return None
    voters = node.conf.voters
    repairing = sorted(v for v in voters
                       if (node.repairing if v == node.id else node.peer_repairing.get(v, False)))
    healthy = len(voters) - len(repairing)
    needed = len(voters) // 2 + 1
    if not voters or healthy >= needed:
        return None
    return (f"halted: {len(repairing)} of {len(voters)} voters repairing ({', '.join(repairing)}); "
            f"{healthy} healthy < quorum {needed}; accept_data_loss() on repairing voters to resume")


def build_status(node: RaftNode) -> Status:
    log = node.log
    return Status(
        node_id=node.id,
        role=node.role,
        current_term=node.current_term,
        voted_for=node.voted_for,
        leader_id=node.leader_id,
        commit_index=log.commit_index,
        applied_index=log.applied_index,
        last_index=log.last_index,
        snapshot_index=log.snapshot_index,
        acked_watermark=node.acked_watermark,
        repairing=node.repairing,
        repair_reason=node.repair_reason,
        faulty_count=len(log.faulty),
        halted_reason=halted_reason(node),
        voters=node.conf.voters,
        learners=node.conf.learners,
        reachable_followers=_reachable_followers(node),
        observer=node.observer,
        lead_transferee=node.lead_transferee if node.role is Role.LEADER else None,
    )


def _reachable_followers(node: RaftNode) -> tuple[str, ...]:
    """`Status.reachable_followers`: voters whose progress says they answered lately, by match index."""
    if node.role is not Role.LEADER:
        return ()
    live = [(progress.match_index, voter) for voter, progress in node.progress.items()
            if voter != node.id and voter in node.conf.voters and progress.recent_active]
    return tuple(voter for _, voter in sorted(live, key=lambda item: (-item[0], item[1])))
