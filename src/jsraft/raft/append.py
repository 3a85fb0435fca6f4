"""Log replication, follower side: the AppendEntries consistency check and merge (layer L1).

Owns: `handle_append_entries`, which checks `prev_log_index/term`, merges the leader's entries into our
log (appending, replacing faulty placeholders, truncating a conflicting suffix), advances the commit
index, and answers with a match index or a back-off hint.

Invariants:
  1. A faulty index makes every consistency check that relies on it fail: a request whose
     `prev_log_index` is at or past our first faulty index is rejected with hint `first_faulty - 1`, so
     the leader resends from before it (rule 3). Faulty entries are never acknowledged.
  2. A faulty placeholder is replaced in place by the leader's entry, and nothing after it is removed:
     its recorded term is not trusted, so it proves no conflict. If the original was committed, the
     leader's copy is identical; if not, it is superseded. The entries after it stay and are compared
     with the leader's like any others (Log Matching: if our next entry matches the leader's, so did the
     original). Only when our next entry's term is *lower* than the leader's replacement — impossible in
     one log, so provably a divergent suffix — is the suffix truncated (above commit, invariant 3). "Next"
     is the next non-faulty entry: faulty placeholders in between prove nothing, and keeping them with a
     lower-term entry after them would leave a log whose terms decrease.
  3. Conflict truncation happens only above the commit index (rule 5, `rule_check_truncation`) and lowers
     the acked watermark to the new last index: the removed entries were never committed.
  4. A success response acknowledges `match_index`, and the hard state of the same `Ready` raises the acked
     watermark to it (rule 2); the response is sent only after that `Ready` is durable.
  5. A repairing replica trusts only its verified prefix (`repair_verified_index`): storage may have
     restored stale copies that pass their CRC, so Log Matching does not hold for the rest. A request whose
     `prev_log_index` lies past it is rejected with the prefix's end as hint; entries are then compared
     one by one, and a conflict even below the (untrusted) commit hint truncates the stale copies.

Imports: L0. Reference: Raft paper §5.3, Fig. 2 (AppendEntries receiver); etcd-io/raft `handleAppendEntries`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.errors import invariant
from jsraft.raft import election, membership, repair
from jsraft.raft.messages import AppendEntries, AppendEntriesResponse
from jsraft.raft.status import Role
from jsraft.raft.types import Entry

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode


def on_leader_contact(node: RaftNode, leader_id: str) -> None:
    """A message from the leader of our current term: follow it and restart the election timer."""
    invariant(node.role is not Role.LEADER, f"two leaders in term {node.current_term}")
    if node.role is not Role.FOLLOWER:
        election.become_follower(node, node.current_term, leader_id)
    node.leader_id = leader_id
    node.election_elapsed = 0


def handle_append_entries(node: RaftNode, message: AppendEntries) -> None:
    on_leader_contact(node, message.from_id)
    node.leader_commit_seen = max(node.leader_commit_seen or 0, message.leader_commit)
    rejected = _consistency_check(node, message)
    if rejected is not None:
        hint_index, hint_term = rejected
        _respond(node, message, success=False, hint_index=hint_index, hint_term=hint_term)
        return
    match_index = message.prev_log_index + len(message.entries)
    entries = [e for e in message.entries if e.index > node.log.snapshot_index]
    faulty_before = len(node.log.faulty)
    _merge(node, entries)
    node.leader_match_index = max(node.leader_match_index, match_index)
    if node.repairing:
        # Everything through match_index was compared with (or replaced by) the leader's entries.
        node.repair_verified_index = max(node.repair_verified_index, match_index)
    node.acked_watermark = node.rule_acked_watermark(node.acked_watermark, match_index)
    advanced = node.log.commit_to(min(message.leader_commit, match_index))
    if advanced or len(node.log.faulty) < faulty_before:
        # A repaired faulty entry may unblock committed entries (and membership changes) behind it.
        node.on_commit_advanced()
    _respond(node, message, success=True, match_index=match_index)
    repair.maybe_finish_repair(node)


def _consistency_check(node: RaftNode, message: AppendEntries) -> tuple[int, int] | None:
    """None if our log matches the leader's at `prev_log_index`, else the back-off hint (index, term)."""
    log = node.log
    prev_index = message.prev_log_index
    if prev_index < log.snapshot_index:
        # Entries up to our snapshot are committed, hence identical to the leader's: they match.
        return None
    if node.repairing and prev_index > node.repair_verified_index:
        # Invariant 5: past the verified prefix, a matching term proves nothing (the copies before it may
        # be stale); make the leader send everything from the end of the verified prefix.
        verified = node.repair_verified_index
        return verified, log.term_at(verified) or 0
    first_faulty = log.first_faulty()
    if first_faulty is not None and prev_index >= first_faulty:
        # Invariant 1: the term at or before prev may be the damaged one; make the leader resend it.
        return log.find_conflict_by_term(first_faulty - 1, message.prev_log_term)
    if log.term_at(prev_index) == message.prev_log_term:
        return None
    return log.find_conflict_by_term(min(prev_index, log.last_index), message.prev_log_term)


def _merge(node: RaftNode, entries: list[Entry]) -> None:
    log = node.log
    for position, entry in enumerate(entries):
        if entry.index > log.last_index:
            log.append(entries[position:])
            return
        if entry.index in log.faulty:
            log.replace_faulty(entry)  # invariant 2
            following = log.next_known_term(entry.index)  # past any faulty run: invariant 2
            if following is not None and following < entry.term:
                _truncate_conflict(node, entry.index + 1)
                log.append(entries[position + 1:])
                return
            continue
        if log.term_at(entry.index) == entry.term:
            continue
        _truncate_conflict(node, entry.index)
        log.append(entries[position:])
        return


def _truncate_conflict(node: RaftNode, index: int) -> None:
    node.rule_check_truncation(index)
    log = node.log
    if node.repairing and index <= log.commit_index:
        # Invariant 5: our commit hint covered copies that turn out stale; the committed entries are the
        # leader's, which replace them now. Nothing at or below this index was applied (trusted_index).
        log.lower_commit(index - 1)
        membership.roll_back(node, index - 1)
    log.truncate_from(index)
    if not node.repairing:
        # Invariant 3: what we acknowledged above `index` was superseded, never committed. (A repairing
        # replica keeps its watermark: stale copies may hide entries it acknowledged in this very term.)
        node.acked_watermark = min(node.acked_watermark, index - 1)


def _respond(node: RaftNode, message: AppendEntries, *, success: bool, match_index: int = 0,
             hint_index: int = 0, hint_term: int = 0) -> None:
    node.send(AppendEntriesResponse(
        from_id=node.id, to_id=message.from_id, term=node.current_term, success=success,
        match_index=match_index, rejected_index=0 if success else message.prev_log_index,
        reject_hint_index=hint_index, reject_hint_term=hint_term, heartbeat=message.heartbeat,
        read_round=message.read_round, repairing=node.repairing,
        acked_watermark=node.acked_watermark if node.repairing else 0))
