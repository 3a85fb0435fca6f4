"""Log replication, leader side: sending AppendEntries, handling responses, committing (layer L1).

Owns: `send_append` (one batch to one follower, within its in-flight window), `broadcast_append`,
`broadcast_heartbeat`, `handle_append_entries_response` with fast back-off, `maybe_commit` and
`announce_commit`.

Invariants:
  1. The leader counts only durable copies toward commit: a follower's match index comes from its
     acknowledgement (sent after its fsync), the leader's own from `advance()` (after its fsync, which
     may still run while its AppendEntries travel and its followers' acknowledgements are stepped).
  2. Only an entry of the leader's current term is committed by counting replicas (§5.4.2).
  3. At most `max_inflight_msgs` AppendEntries with entries are unacknowledged per follower; each holds at
     most `max_entries_per_msg` entries and `max_bytes_per_msg` bytes (but at least one entry).
  4. A heartbeat carries `prev_log_index = match_index`, so it checks the follower still holds what it
     acknowledged: a repairing follower that lost entries rejects it and its match index regresses.
  5. A new commit index reaches every follower (`announce_commit`): with `prompt_commit` at once, in an
     AppendEntries that is empty if the follower lacks no entry; without, in the next AppendEntries that
     carries entries or the next heartbeat (at most `heartbeat_ticks` later; a leader does not quiesce
     before every live member was sent it, `quiesce` invariant 1). A commit that applies a membership
     change, and a leader's first commit of its term, are always announced at once: the members learn
     their configuration, and that the term's leader is established, without waiting.
     Commitment itself never waits for the announcement, and a follower's log is the same either way.

Imports: L0. Reference: Raft paper §5.3; etcd-io/raft `raft.go` (`maybeSendAppend`, `handleAppendEntries`
on the leader side).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.raft import membership, repair
from jsraft.raft.errors import PeerProtocolError
from jsraft.raft.messages import AppendEntries, AppendEntriesResponse
from jsraft.raft.progress import Progress, ProgressState

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode


def peers(node: RaftNode) -> list[str]:
    return [peer for peer in node.progress if peer != node.id]


def send_append(node: RaftNode, peer: str, *, allow_empty: bool = False, force: bool = False) -> bool:
    """Send `peer` the next batch it needs; True if a message went out."""
    progress = node.progress[peer]
    if progress.state is ProgressState.SNAPSHOT or (progress.is_paused() and not force):
        return False
    log = node.log
    prev_index = progress.next_index - 1
    prev_term = log.term_at(prev_index)
    if prev_term is None:
        # The entries it needs were compacted away: only a snapshot can bring it up to date.
        return node.send_snapshot(peer)
    entries = log.slice(progress.next_index, node.config.max_entries_per_msg, node.config.max_bytes_per_msg)
    if not entries and not allow_empty:
        return False
    node.send(AppendEntries(
        from_id=node.id, to_id=peer, term=node.current_term, leader_id=node.id, prev_log_index=prev_index,
        prev_log_term=prev_term, entries=tuple(entries), leader_commit=log.commit_index,
        read_round=node.read_round))
    progress.sent_append(entries[-1].index if entries else prev_index, len(entries))
    progress.sent_commit = max(progress.sent_commit, log.commit_index)
    return True


def send_all_pending(node: RaftNode, peer: str) -> None:
    """Pipeline batches to `peer` until its window is full or it has everything."""
    for _ in range(node.config.max_inflight_msgs):
        if not send_append(node, peer):
            return


def broadcast_append(node: RaftNode) -> None:
    """After new entries or a commit: every follower gets what it lacks (or learns the new commit)."""
    for peer in peers(node):
        if send_append(node, peer, allow_empty=True):
            send_all_pending(node, peer)


def announce_commit(node: RaftNode) -> None:
    """The commit index advanced (invariant 5): every follower gets the entries it lacks, which carry the
    new index, and an empty AppendEntries if it is still owed the news (`_owes_commit`); with
    `prompt_commit` every follower gets one at once, empty if it lacks nothing (etcd's `bcastAppend`)."""
    if node.config.prompt_commit:
        broadcast_append(node)
        return
    for peer in peers(node):
        _tell_commit(node, peer)


def _tell_commit(node: RaftNode, peer: str) -> None:
    send_all_pending(node, peer)
    if _owes_commit(node, node.progress[peer]):
        send_append(node, peer, allow_empty=True)


def _owes_commit(node: RaftNode, progress: Progress) -> bool:
    """Must this follower be told the commit index now (invariant 5)? Only if it holds entries it was not
    told are committed, and then: always with `prompt_commit`; without, only when what it was told
    predates a membership change now committed, or this leader's first commit of its term."""
    log = node.log
    known = progress.sent_commit
    if known >= min(log.commit_index, progress.match_index):
        return False
    if node.config.prompt_commit or known < node.pending_conf_index <= log.commit_index:
        return True
    return log.term_at(known) != node.current_term


def broadcast_heartbeat(node: RaftNode) -> None:
    for peer in peers(node):
        send_heartbeat(node, peer)


def send_heartbeat(node: RaftNode, peer: str) -> None:
    progress = node.progress[peer]
    prev_index = min(progress.match_index, node.log.last_index)
    prev_term = node.log.term_at(prev_index)
    if prev_term is None:
        # Compacted below our snapshot: index 0 matches everyone and checks nothing.
        prev_index, prev_term = 0, 0
    node.send(AppendEntries(
        from_id=node.id, to_id=peer, term=node.current_term, leader_id=node.id, prev_log_index=prev_index,
        prev_log_term=prev_term, entries=(), leader_commit=node.log.commit_index, heartbeat=True,
        read_round=node.read_round))
    progress.sent_commit = max(progress.sent_commit, node.log.commit_index)


def handle_append_entries_response(node: RaftNode, message: AppendEntriesResponse) -> None:
    progress = node.progress.get(message.from_id)
    if progress is None:
        return  # no longer a member
    if message.match_index > node.log.last_index:
        # We never sent it that much in this term (a leader's log only grows): the peer is broken.
        raise PeerProtocolError(f"{message.from_id} acknowledged {message.match_index}, beyond our log")
    progress.recent_active = True
    progress.repairing = message.repairing
    progress.repair_watermark = message.acked_watermark if message.repairing else 0
    repair.note_peer_repairing(node, message.from_id, message.repairing)
    if message.read_round > progress.read_round_acked:
        progress.read_round_acked = message.read_round
        node.on_leadership_confirmed()
    if not message.success:
        _handle_reject(node, message.from_id, progress, message)
        return
    if message.heartbeat:
        progress.probe_sent = False
    advanced = progress.maybe_update(message.match_index)
    if advanced or (progress.state is ProgressState.PROBE and progress.match_index == message.match_index
                    and not message.heartbeat):
        # (A probe answered at the match we already knew, e.g. right after a snapshot, also ends probing.)
        _on_match_advanced(node, message.from_id, progress)
    elif message.heartbeat and progress.match_index < node.log.last_index:
        # Nothing acknowledged since the last heartbeat although entries are outstanding: an
        # AppendEntries may have been lost. Probe past the window once; a reject resets the follower.
        send_append(node, message.from_id, allow_empty=True, force=True)
    else:
        send_all_pending(node, message.from_id)


def _on_match_advanced(node: RaftNode, peer: str, progress: Progress) -> None:
    if progress.state is ProgressState.PROBE:
        progress.become_replicate()
    elif progress.state is ProgressState.SNAPSHOT and progress.match_index >= progress.pending_snapshot_index:
        progress.become_probe()
        progress.become_replicate()
    if maybe_commit(node):
        announce_commit(node)
    else:
        _tell_commit(node, peer)  # what it lacks; an empty AppendEntries if it has the entries but is owed the news
    node.send_timeout_now_if_caught_up(peer)


def _handle_reject(node: RaftNode, peer: str, progress: Progress, message: AppendEntriesResponse) -> None:
    if message.repairing and message.reject_hint_index < progress.match_index:
        # Rule 3: a repairing follower no longer holds entries it acknowledged. Its match index regresses
        # (the commit index does not: what committed stays committed) and the range is sent again.
        progress.regress(message.reject_hint_index)
        send_append(node, peer, allow_empty=True)
        return
    match_hint = message.reject_hint_index
    if message.reject_hint_term > 0:
        # Fast back-off: skip every entry of ours whose term cannot match the follower's hint.
        match_hint, _ = node.log.find_conflict_by_term(message.reject_hint_index, message.reject_hint_term)
    if progress.maybe_decrease(message.rejected_index, match_hint):
        if progress.state is ProgressState.REPLICATE:
            progress.become_probe()
        send_append(node, peer, allow_empty=True)


def maybe_commit(node: RaftNode) -> bool:
    """Advance the commit index to what a quorum of voters holds durably, if it is of our term."""
    matches = sorted((node.progress[v].match_index for v in node.conf.voters if v in node.progress),
                     reverse=True)
    needed = membership.quorum(node.conf)
    if len(matches) < needed:
        return False
    candidate = matches[needed - 1]
    if candidate <= node.log.commit_index or node.log.term_at(candidate) != node.current_term:
        return False
    node.log.commit_to(candidate)
    node.on_commit_advanced()
    return True
