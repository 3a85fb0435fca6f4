"""The term query: a member that lost its storage with no bound on its votes learns the current term from
every voter before it answers anything else (layer L1, issue #14: the double loss).

Owns: `TermQueryState` (`RaftNode.term_query`: None, or the query in progress), the handling of
`TermQuery` / `TermQueryResponse`, and the end of the query (`finish`): the fence through the highest term
any voter answered.

Why. A member whose group storage was lost restores repairing and fenced (`vote_fence`): it votes in no
term up to its fence and starts in it (invariant 4 there), so it never acknowledges a leader older than a
vote it may have lost. The fence needs a bound on that vote's term: the hard state's one-step rule for a
damaged slot, or the node record's vote-term ceiling (`runtime.group_record` decision 7) for a lost group
directory. When the record is lost too (or is of version 1), or the caller keeps no record, nothing on this
node bounds the lost vote: restored term + 1 is a guess, and the simulator showed it wrong (a voter voted
for n3 in term 3, lost its record and its group directory, came back at term 1 and voted for n1 in term 3:
`--faults all,lost-vote --app meta` seed 35; stream seed 38 acknowledged an older leader instead).
Such a member ("term unknown", `RestoredState.term_query_voters`) asks every voter of its configuration for
its term (`TermQuery`) and waits for all of them. A majority is not enough: the lost vote went to a
candidate that made its term durable before it asked for the vote, and only that candidate is sure to
hold a term at least the lost vote's; it may be the one voter a majority leaves out. The maximum over
every voter is at least the lost vote's term, so fencing through it (and, by `vote_fence` invariant 4,
starting in it with no vote) closes the gap. The fence goes one term higher (`finish`): the lost vote
may be the member's own, as a candidate whose RequestVotes reached nobody, and a campaign runs at most one
term above the durable term (`vote_fence.campaign_term`), the highest it can have learned from the others.

Two members that lost everything at once. Each answers the other "term unknown" (it proves nothing), and
waiting for a known answer from each would deadlock them (simulator `--faults all`, meta seed 297: two of
five). An unknown answer therefore ends the wait for that voter without raising the fence. Sound while the
members that lost everything are a minority: if the lost vote went to such a member and it won, a majority
made that term durable, and a majority meets every other minority's complement, so some voter that answered
with a known term holds it; if it did not win, its candidacy died with its storage (its vote for itself is
the one-step case above). When they are a majority the group halts anyway (two of three repairing, `repair`
rule 4), and the operator's `accept_data_loss` gives up the guarantee with the data.

Liveness cost (a double fault, documented): while any voter does not answer — down, partitioned, or term
unknown itself — the member stays out of the group: no acknowledgement, no vote. The group runs on the
others (a 3-voter group keeps its two healthy voters). Two voters of three that lost everything halt the
group as any two repairing voters do (`repair` rule 4); `accept_data_loss` then ends the query too, fencing
through the highest term heard: the operator gives up that guarantee with the data.

Invariants:
  1. While the query runs, the member handles only `TermQuery`, `TermQueryResponse` and `StatusProbe`
     (`RaftNode.step`): it acknowledges no append or snapshot, grants no vote, campaigns not, and changes
     its term for no other message.
  2. While the query runs, nothing is persisted (`ready.hard_state_due`): the WAL stays as empty as the
     restore found it, so a restart before the end is "term unknown" again, never a member that trusts a
     term it did not learn.
  3. The query ends only when every voter other than this member answered THIS query (its `query_id`,
     drawn from the core's random generator at start): with a known term, or "term unknown" from a member
     whose own query runs; the fence is then above the highest known term, and the member starts in it
     with no vote (`finish`).
  4. A voter answers with at least its durable current term (`max(current_term, persisted)`), never
     changing its own term or vote for a query.

Imports: L0, attrs (through siblings). Reference: Raft paper §5.2 (votes per term) and Fig. 2 (a
candidate persists its term before RequestVote); DESIGN.md §4 rule 7.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from jsraft.errors import invariant
from jsraft.raft.messages import TermQuery, TermQueryResponse

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode

# Why the member's repair reason says it is waiting (monitoring shows it; `finish` removes it).
WAITING_REASON = "current term unknown: waiting for the term of every voter"


@attrs.define(kw_only=True)
class TermQueryState:
    """The query in progress: its nonce, the voters still to answer, and the highest term heard."""

    query_id: int
    waiting: set[str]
    highest_term: int = 0
    elapsed_ticks: int = 0
    unknown: set[str] = attrs.field(factory=set)  # voters that answered "term unknown" (lost everything too)


def start(node: RaftNode, voters: Iterable[str]) -> None:
    """Begin the query (invariant 3's nonce), asking every other voter now; with none to ask it ends at once
    (a single-voter group: the lost vote was its own)."""
    node.term_query = TermQueryState(query_id=node.rng.getrandbits(63) | 1,
                                     waiting={voter for voter in voters if voter != node.id})
    node.repair_reason = f"{node.repair_reason}; {WAITING_REASON}" if node.repair_reason else WAITING_REASON
    if not node.term_query.waiting:
        finish(node)
        return
    _ask(node)


def tick(node: RaftNode) -> None:
    """Ask again, once per election timeout, the voters that have not answered (a query or its answer may
    be lost, and a voter may be down for a while)."""
    query = node.term_query
    if query is None:
        return
    query.elapsed_ticks += 1
    if query.elapsed_ticks >= node.config.election_ticks:
        query.elapsed_ticks = 0
        _ask(node)


def _ask(node: RaftNode) -> None:
    query = node.term_query
    invariant(query is not None, "only a running query asks")
    for voter in sorted(query.waiting):
        node.send(TermQuery(from_id=node.id, to_id=voter, term=node.current_term, query_id=query.query_id))


def handle_term_query(node: RaftNode, message: TermQuery) -> None:
    """Invariant 4: answer with at least our durable term; a member whose own query runs knows no term."""
    term = max(node.current_term, node.persisted_hard_state.current_term)
    node.send(TermQueryResponse(from_id=node.id, to_id=message.from_id, term=term, query_id=message.query_id,
                                term_known=node.term_query is None))


def handle_term_query_response(node: RaftNode, message: TermQueryResponse) -> None:
    """Count an answer to this query (invariant 3); the last one ends it."""
    query = node.term_query
    if query is None or message.query_id != query.query_id or message.from_id not in query.waiting:
        return
    query.waiting.discard(message.from_id)
    if message.term_known:
        query.highest_term = max(query.highest_term, message.term)
    else:
        query.unknown.add(message.from_id)  # lost everything too: its term proves nothing (module docstring)
    if not query.waiting:
        finish(node)


def finish(node: RaftNode) -> None:
    """End the query: fence through the highest term heard + 1 (the member's own candidacy, module
    docstring) and start in it with no vote (`vote_fence` invariant 4); the next Ready persists both before
    anything is sent."""
    query = node.term_query
    if query is None:
        return
    node.term_query = None
    fence = max(node.vote_fence_term, query.highest_term + 1)
    node.vote_fence_term = fence
    if fence > node.current_term:
        node.current_term, node.voted_for = fence, None
    if node.repair_reason is not None:
        parts = [part for part in node.repair_reason.split("; ") if part != WAITING_REASON]
        node.repair_reason = "; ".join(parts) or None
    node.election_elapsed = 0
