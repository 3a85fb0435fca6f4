"""Elections: role changes, pre-vote, votes, check-quorum, leadership transfer (layer L1).

Owns: `become_follower/pre_candidate/candidate/leader`, `campaign`, the handlers for `RequestVote`,
`RequestVoteResponse` and `TimeoutNow`, and `transfer_leadership`.

Invariants:
  1. A replica votes at most once per term; the vote is in the hard state of the `Ready` that carries
     the granting response (rule 1).
  2. A repairing replica never grants a vote (`rule_may_grant_vote`) and never starts a pre-vote, an
     election or a transfer (`rule_may_campaign`) (rule 3). A leader is never repairing.
  3. Pre-vote changes no term and no vote; a replica that heard from a live leader within the election
     timeout ignores (pre-)vote requests unless the leader itself asked for a transfer (stickiness).
  4. A new leader appends a no-op entry of its term, so it commits its predecessors' entries (§5.4.2).

Imports: L0. Reference: Raft paper §5.2, §5.4.1; thesis §3.10 (transfer), §6.2 and §9.6 (check-quorum,
pre-vote); etcd-io/raft `raft.go`.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from jsraft.errors import invariant
from jsraft.raft import membership, replication, repair, vote_fence
from jsraft.raft.errors import BadConfChange, NotLeader
from jsraft.raft.messages import RequestVote, RequestVoteResponse, TimeoutNow
from jsraft.raft.progress import Progress
from jsraft.raft.status import Role
from jsraft.raft.types import Entry, EntryType

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode


class _Tally(enum.Enum):
    WON = "won"
    LOST = "lost"
    PENDING = "pending"


# --- Role changes --------------------------------------------------------------------------------


def become_follower(node: RaftNode, term: int, leader_id: str | None) -> None:
    if term > node.current_term:
        node.current_term = term
        node.voted_for = None  # a fenced term stays fenced by `vote_fence_term`, not by a vote
        node.leader_commit_seen = None
        node.leader_match_index = 0
    node.role = Role.FOLLOWER
    node.leader_id = leader_id
    _reset(node)


def become_pre_candidate(node: RaftNode) -> None:
    """Pre-vote: ask whether we could win, without touching our term or vote."""
    node.role = Role.PRE_CANDIDATE
    node.leader_id = None
    _reset(node)


def become_candidate(node: RaftNode, term: int) -> None:
    node.current_term = term
    node.voted_for = node.id
    node.leader_commit_seen = None
    node.leader_match_index = 0
    node.role = Role.CANDIDATE
    node.leader_id = None
    _reset(node)


def become_leader(node: RaftNode) -> None:
    invariant(not node.repairing and not node.log.faulty, "rules 3 and 6: a repairing replica never leads")
    node.role = Role.LEADER
    node.leader_id = node.id
    _reset(node)
    log = node.log
    node.progress = {peer: Progress(log.last_index + 1, node.config.max_inflight_msgs)
                     for peer in membership.members(node.conf)}
    own = node.progress.setdefault(node.id, Progress(log.last_index + 1, node.config.max_inflight_msgs))
    own.maybe_update(log.stable_index)
    # No membership change until the entries before this term are applied (membership invariant 1).
    node.pending_conf_index = log.last_index
    node.append_as_leader([Entry(index=log.last_index + 1, term=node.current_term, type=EntryType.NOOP)])
    replication.broadcast_append(node)


def _reset(node: RaftNode) -> None:
    node.votes = {}
    node.progress = {}
    node.lead_transferee = None
    node.pending_reads.clear()
    node.reads_waiting_commit.clear()
    node.election_elapsed = 0
    node.heartbeat_elapsed = 0
    node.randomized_election_ticks = node.config.election_ticks + node.rng.randrange(node.config.election_ticks)


# --- Campaigning ---------------------------------------------------------------------------------


def campaign(node: RaftNode, *, transfer: bool = False) -> None:
    """Start a pre-vote (or, for a transfer or without pre-vote, an election) if we may (rule 3)."""
    if node.role is Role.LEADER or not node.is_promotable():
        return
    log = node.log
    invariant(node.conf_applied_index >= min(log.commit_index, log.verified_last_index()),
              "a candidate counts votes with every committed membership change applied")
    if node.rule_pre_vote_enabled() and not transfer:
        become_pre_candidate(node)
        _request_votes(node, term=node.current_term + 1, pre_vote=True, transfer=False)
    else:
        _start_election(node, transfer=transfer)


def _start_election(node: RaftNode, *, transfer: bool) -> None:
    term = vote_fence.campaign_term(node)
    if term is None:
        # Our own vote may go only one term above the durable one (vote_fence invariant 2): make the term
        # below the campaign's durable first, without a vote; the campaign resumes once it is
        # (`resume_campaign`, from `advance`).
        become_follower(node, max(node.current_term, node.vote_fence_term), None)
        node.campaign_pending = transfer
        return
    become_candidate(node, term)
    _request_votes(node, term=node.current_term, pre_vote=False, transfer=transfer)


def resume_campaign(node: RaftNode) -> None:
    """A campaign deferred until its term below was durable: run it now if nothing changed meanwhile (no
    leader heard of, still a promotable follower)."""
    transfer, node.campaign_pending = node.campaign_pending, None
    if transfer is None or vote_fence.campaign_term(node) is None:
        return  # the term moved on again meanwhile: the next election timeout campaigns, if still due
    if node.role is Role.FOLLOWER and node.leader_id is None and node.is_promotable():
        _start_election(node, transfer=transfer)


def resume_vote(node: RaftNode) -> None:
    """A RequestVote held until the term it raised us to was durable: answer it now, if still in it."""
    message, node.vote_pending = node.vote_pending, None
    if message is not None and message.term == node.current_term:
        handle_request_vote(node, message)


def _request_votes(node: RaftNode, *, term: int, pre_vote: bool, transfer: bool) -> None:
    node.votes[node.id] = True
    if _tally(node) is _Tally.WON:
        _won(node, pre_vote)
        return
    for peer in node.conf.voters:
        if peer != node.id:
            node.send(RequestVote(
                from_id=node.id, to_id=peer, term=term, last_log_index=node.log.last_index,
                last_log_term=node.log.last_term(), pre_vote=pre_vote, leadership_transfer=transfer))


def _tally(node: RaftNode) -> _Tally:
    voters = node.conf.voters
    granted = sum(1 for v in voters if node.votes.get(v) is True)
    rejected = sum(1 for v in voters if node.votes.get(v) is False)
    needed = membership.quorum(node.conf)
    if granted >= needed:
        return _Tally.WON
    if rejected > len(voters) - needed:
        return _Tally.LOST
    return _Tally.PENDING


def _won(node: RaftNode, pre_vote: bool) -> None:
    if pre_vote:
        _start_election(node, transfer=False)
    else:
        become_leader(node)


def in_leader_lease(node: RaftNode) -> bool:
    """Leader stickiness: we heard from a live leader less than an election timeout ago."""
    return (node.config.check_quorum and node.leader_id is not None
            and node.election_elapsed < node.config.election_ticks)


def check_quorum_active(node: RaftNode) -> bool:
    """Check-quorum (leader): did a majority of voters answer since the last check? Resets the marks."""
    active = 0
    for voter in node.conf.voters:
        progress = node.progress.get(voter)
        if voter == node.id or (progress is not None and progress.recent_active):
            active += 1
    for peer, progress in node.progress.items():
        if peer != node.id:
            progress.recent_active = False
    return active >= membership.quorum(node.conf)


# --- Handlers ------------------------------------------------------------------------------------


def handle_request_vote(node: RaftNode, message: RequestVote) -> None:
    repair.note_peer_repairing(node, message.from_id, False)
    if not node.rule_may_grant_vote():
        _answer_vote(node, message, granted=False)
        return
    can_vote = (node.voted_for == message.from_id
                or (node.voted_for is None and node.leader_id is None)
                or (message.pre_vote and message.term > node.current_term))
    if not can_vote or not node.log.is_up_to_date(message.last_log_index, message.last_log_term):
        _answer_vote(node, message, granted=False)
        return
    if message.pre_vote:
        _answer_vote(node, message, granted=True)
        return
    if vote_fence.vote_waits_for_durable_term(node, message):
        node.vote_pending = message  # answered once the term it raised us to is durable (`resume_vote`)
        return
    if not vote_fence.may_write_vote(node, message.term):
        _answer_vote(node, message, granted=False)
        return
    # The vote is in the hard state of the same Ready as this response (rule 1).
    node.voted_for = message.from_id
    node.election_elapsed = 0
    _answer_vote(node, message, granted=True)


def refuse_vote(node: RaftNode, message: RequestVote) -> None:
    _answer_vote(node, message, granted=False)


def _answer_vote(node: RaftNode, message: RequestVote, *, granted: bool) -> None:
    # A granted pre-vote answers in the term the candidate asked about, so it can count it.
    term = message.term if granted else node.current_term
    # Our commit as far as the candidate's log reaches: if its entry there is ours, all of its log up to
    # that point is committed (Log Matching) — a removed voter learns so that it was removed.
    commit_index = 0 if node.repairing else min(node.log.commit_index, message.last_log_index)
    commit_term = node.log.term_at(commit_index) or 0
    node.send(RequestVoteResponse(from_id=node.id, to_id=message.from_id, term=term, vote_granted=granted,
                                  pre_vote=message.pre_vote, repairing=node.repairing,
                                  commit_index=commit_index if commit_term else 0, commit_term=commit_term))


def handle_request_vote_response(node: RaftNode, message: RequestVoteResponse) -> None:
    repair.note_peer_repairing(node, message.from_id, message.repairing)
    expected = Role.PRE_CANDIDATE if message.pre_vote else Role.CANDIDATE
    if node.role is not expected:
        return
    if message.pre_vote and message.vote_granted and message.term != node.current_term + 1:
        return
    node.votes[message.from_id] = message.vote_granted
    if learn_commit(node, message.commit_index, message.commit_term) and not node.is_promotable():
        become_follower(node, node.current_term, None)  # the commit we learned removed us
        return
    tally = _tally(node)
    if tally is _Tally.WON:
        _won(node, message.pre_vote)
    elif tally is _Tally.LOST:
        become_follower(node, node.current_term, None)


def learn_commit(node: RaftNode, index: int, term: int) -> bool:
    """Adopt a voter's commit index if we hold its entry there; True if ours advanced.

    A commit index is a fact about the group: the entry at it, and (Log Matching) every entry before it, is
    committed. A candidate whose trusted log holds the same (index, term) therefore holds that committed
    prefix and may mark it committed — and apply the membership changes in it. Without this a candidate
    can be stuck counting votes in a configuration the group already left: a leader that removed a voter
    and stepped down before the others heard the commit leaves them needing a vote from the removed node,
    which refuses them because its log is longer (rule 4's "a healthy majority must elect" fails).
    """
    log = node.log
    if index <= log.commit_index or index > repair.trusted_index(node) or log.term_at(index) != term:
        return False
    log.commit_to(index)
    node.on_commit_advanced()
    return True


def handle_timeout_now(node: RaftNode, message: TimeoutNow) -> None:
    """The leader hands over: campaign at once, skipping pre-vote — unless repairing (rule 3)."""
    if node.role is Role.FOLLOWER and node.is_promotable():
        campaign(node, transfer=True)


def transfer_leadership(node: RaftNode, to: str) -> None:
    if node.role is not Role.LEADER:
        raise NotLeader(node.leader_id)
    if to == node.id or to == node.lead_transferee:
        return
    if to not in node.conf.voters:
        raise BadConfChange(f"cannot transfer leadership to {to}: not a voter")
    progress = node.progress[to]
    if progress.repairing:
        raise BadConfChange(f"cannot transfer leadership to {to}: it is repairing")
    node.lead_transferee = to
    # The transfer is aborted if it has not happened within an election timeout (see core.tick).
    node.election_elapsed = 0
    send_timeout_now_if_caught_up(node, to)


def send_timeout_now_if_caught_up(node: RaftNode, peer: str) -> None:
    if node.lead_transferee != peer:
        return
    if node.progress[peer].match_index == node.log.last_index:
        node.send(TimeoutNow(from_id=node.id, to_id=peer, term=node.current_term))
    else:
        replication.send_append(node, peer, allow_empty=True)
