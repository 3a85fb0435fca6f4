"""The vote fence: no vote in a term that a lost hard state may have voted in (layer L1, issue #14 hole 3).

Owns: the fence term (`RaftNode.vote_fence_term`: no vote is granted or cast in any term up to it) and
the one-step rule that bounds what a lost hard-state write can have held.

Why a bound exists. Storage loses a hard state only as a damaged witness slot whose content no newer segment
record covers (wal recovery, decision 2): the other slot is intact, and since writes alternate and each
completes before any message that depends on it leaves, the writes lost are exactly the one after the
intact state. The one-step rule makes that one write's vote term at most one above the intact state's term:
a vote (granted, or a candidate's own) is written only in a term at most one above the durable term
(`may_write_vote`, `campaign_term`). So a replica restored repairing fences through its restored term + 1
(`fence_on_restore`): whatever it voted for in the lost write is in a term it will not vote in again. A
repairing restore of any cause is fenced: a persisted `repairing` flag no longer says whether the hard state
was damaged before the restart. A whole lost hard state (both slots, or the node's storage) has no intact
neighbour and is not bounded this way: a group whose whole storage was lost restores fenced through the
vote-term ceiling of the node's record of started groups (`runtime.group_record`), and with no ceiling (that
record lost too) it learns the term from every voter before anything else and fences above the highest
(`term_query`). A restored replica starts IN its fence
term (invariant 4): it refuses every leader of a lower term, and the cost is one election when a
repairing replica rejoins (its answer deposes the leader it used to follow).

Persisted form. The fence is a field of the hard state (`HardState.vote_fence_term`, body version 2 of the
hard-state record, `wal.format`), durable like the vote: `Ready` persists a changed fence before any message
leaves (`ready._fenced_fields`). It only grows; once `current_term` passes it, it is moot. `voted_for` is
always a node id or None: before the field existed the fence was a marker string in `voted_for`, which
`wal.format` still reads from version 1 records (and turns into the field).

Invariants:
  1. No vote leaves for a term at or below `vote_fence_term`: neither granted (`may_write_vote`) nor our
     own (`campaign_term`).
  2. A vote reaches a hard state only in a term at most `persisted_hard_state.current_term + 1`.
  3. The fence never shrinks while the replica runs, and it is in every hard state it persists, so a
     restart reads it back (`fence_on_restore`).
  4. A restore starts in the fence term when the fence is above the restored term (`RaftNode._restore`:
     `current_term` = the fence, no vote; persisted by the first Ready). Fencing votes alone is not enough:
     a replica restored at V-1 and fenced through V still acknowledged the term-(V-1) leader's entries after
     a candidate won V with the vote it lost, so an entry committed in V-1 could miss from V's leader
     (leader-completeness; simulator `--faults all,lost-vote`, seeds 40 and 102). In the fence term it
     refuses every lower-term leader, and votes again only from fence + 1.

Imports: L0 (through siblings). Reference: DESIGN.md §4 (rule 7); the issue's case "n3 voted for n2 in term
3, lost that slot, was repaired by n2 in term 3, then voted for n1 in term 3", and one term higher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode
    from jsraft.raft.messages import RequestVote
    from jsraft.raft.types import HardState

def fence_on_restore(hard_state: HardState, repairing: bool) -> int:
    """The fence a restored replica starts with: the persisted one, and for a repairing restore at least
    the restored term + 1 (the one write a damaged slot can have lost voted no higher)."""
    persisted = hard_state.vote_fence_term
    return max(persisted, hard_state.current_term + 1) if repairing else persisted


def may_write_vote(node: RaftNode, term: int) -> bool:
    """Invariant 2: a vote in `term` may go into the next hard state."""
    return term > node.vote_fence_term and term <= _durable_term(node) + 1


def vote_waits_for_durable_term(node: RaftNode, message: RequestVote) -> bool:
    """Only invariant 2 stands between this RequestVote and our vote: the term it raised us to is not
    durable yet. The core answers it once it is, rather than refusing (which would cost the candidate an
    election timeout)."""
    return (not message.pre_vote and message.term == node.current_term and message.term > node.vote_fence_term
            and message.term > _durable_term(node) + 1)


def campaign_term(node: RaftNode) -> int | None:
    """The term a real campaign would run in, or None if it must first make a higher term durable without
    a vote (then the core moves to the term below it and campaigns at a later timeout)."""
    target = max(node.current_term, node.vote_fence_term) + 1
    return target if target <= _durable_term(node) + 1 else None


def _durable_term(node: RaftNode) -> int:
    return max(node.persisted_hard_state.current_term, node.bootstrap_term)


def fence_at_repair_end(node: RaftNode) -> None:
    """Rule 7 for a replica that leaves repairing (repaired, or the operator accepted the loss): the fence
    set at restore (persisted since the first Ready) still holds; the current term is fenced as well."""
    if node.current_term <= node.vote_fence_term:
        return  # the fence field covers the current term already
    if node.voted_for is None:
        # The current term itself: a vote cast in it may be among what was lost. Voting for ourselves (a
        # vote nobody receives) makes sure no second vote is granted in it.
        node.voted_for = node.id
