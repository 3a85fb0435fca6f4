"""Mutants: `RaftNode` subclasses that each disable one storage-fault or election rule (never production code).

Owns: `MUTANTS`, name -> node class, for `--mutant NAME` (the app mutants, broken state machines rather
than broken Raft rules, are in `app_mutants`). Each overrides exactly one `rule_*` hook of
`jsraft.raft.rules.SafetyRules`, the way the rules module documents, so the simulator can show that the
rule has teeth: with the mutant every node runs the broken rule, and some seed must break an invariant.

  ack-before-fsync        `rule_must_sync` returns False: the driver never fsyncs the log before sending
                          acknowledgements and votes; a crash then loses acknowledged entries
                          (caught as `durability`, `acked-lost` or `leader-completeness`).
  truncate-on-corruption  `rule_classify_restored_log` cuts the log at the first faulty record and reports
                          nothing to repair, the way nats-server "repairs" a bad checksum; the node then
                          votes and may lead without acknowledged entries.
  repairing-node-votes    `rule_may_grant_vote` is always True, also while repairing (`repairing-vote`).
  no-prevote              `rule_pre_vote_enabled` is False: an isolated node inflates its term
                          (`term-inflation`).
  forget-vote-on-restart  `rule_restore_hard_state` drops `voted_for`: after a restart the node can vote
                          twice in one term (`double-vote`, then maybe `election-safety`).
  ack-before-combined-fsync  `rule_must_sync` is False exactly when a cycle both wrote entries and changed
                          the durable hard state, the cycle whose one segment fsync makes the entries and
                          the hard-state record after them durable together (issue #18): acknowledgements
                          and votes leave before it, and a crash loses what they promised.
  leader-counts-unsynced  `rule_leader_own_match` returns the appended index: a pipelining leader counts
                          its own copy before its fsync; a commit can then rest on one fsynced copy and
                          be applied by a follower while a crash loses it (`state-machine-safety`).

Invariants:
  1. A mutant differs from `RaftNode` in one method only.
  2. Nothing outside `jsraft.testing` imports this module.

Imports: attrs, `jsraft.raft`, sibling `app_mutants`. Reference: `jsraft.raft.rules`; DESIGN.md §4.
"""

from __future__ import annotations

import attrs

from jsraft.raft import HardState, RaftNode, RestoredState, RestoreVerdict
from jsraft.testing.sim.app_mutants import APP_MUTANTS
from jsraft.testing.sim.storage_faults import STORAGE_MUTANTS


class AckBeforeFsync(RaftNode):
    def rule_must_sync(self, durable_hard_state_changed: bool, log_written: bool) -> bool:
        return False


class TruncateOnCorruption(RaftNode):
    def rule_classify_restored_log(self, restored: RestoredState) -> RestoreVerdict:
        first_bad = min(restored.faulty, default=None)
        entries = [e for e in restored.entries if first_bad is None or e.index < first_bad]
        return RestoreVerdict(entries=tuple(entries), faulty=frozenset(), repair_reason=None)


class RepairingNodeVotes(RaftNode):
    def rule_may_grant_vote(self) -> bool:
        return True


class NoPreVote(RaftNode):
    def rule_pre_vote_enabled(self) -> bool:
        return False


class ForgetVoteOnRestart(RaftNode):
    def rule_restore_hard_state(self, hard_state: HardState) -> HardState:
        return attrs.evolve(hard_state, voted_for=None)


# --- ack-before-combined-fsync (issue #18) ---------------------------------------------------------


class AckBeforeCombinedFsync(RaftNode):
    def rule_must_sync(self, durable_hard_state_changed: bool, log_written: bool) -> bool:
        combined = durable_hard_state_changed and log_written
        return (durable_hard_state_changed or log_written) and not combined


# ------------------------------------------------------------------------------------------------------


# --- Leader pipelining (issue #18) ---------------------------------------------------------------------
#   leader-counts-unsynced  `rule_leader_own_match` returns the appended index: the leader counts its own
#                           copy toward commit before its fsync returned, while its AppendEntries already
#                           left (`Ready.send_first`).


class LeaderCountsUnsynced(RaftNode):
    def rule_leader_own_match(self, persisted_index: int, appended_index: int) -> int:
        return appended_index


# --- No vote fence after hard-state damage (issue #14, hole 3) --------------------------------------------
#   no-vote-fence           `rule_vote_fence` returns 0: a replica that restarts repairing after losing its
#                           newest hard-state write (a damaged witness slot) fences only the term it is in
#                           when its repair ends, so a vote lost one term above its restored term can be
#                           cast again for another candidate (`double-vote`).


class NoVoteFence(RaftNode):
    def rule_vote_fence(self, hard_state: HardState, repairing: bool) -> int:
        return 0


# --- No term query after a double loss (issue #14: record AND group directory lost) ---------------------
#   no-term-query           `rule_term_query_voters` returns None: a member that lost its group storage and
#                           the node record's vote-term ceiling restores at term 1, fenced through 1 only,
#                           so it votes again in the term of the vote it lost (`double-vote`) or acknowledges
#                           a leader older than that vote (`leader-completeness`).


class NoTermQuery(RaftNode):
    def rule_term_query_voters(self, restored: RestoredState) -> tuple[str, ...] | None:
        return None


MUTANTS: dict[str, type[RaftNode]] = {
    "ack-before-fsync": AckBeforeFsync,
    "truncate-on-corruption": TruncateOnCorruption,
    "repairing-node-votes": RepairingNodeVotes,
    "no-prevote": NoPreVote,
    "forget-vote-on-restart": ForgetVoteOnRestart,
    "ack-before-combined-fsync": AckBeforeCombinedFsync,
    "leader-counts-unsynced": LeaderCountsUnsynced,
    "no-vote-fence": NoVoteFence,
    "no-term-query": NoTermQuery,
}


def node_class(mutant: str | None) -> type[RaftNode]:
    """The Raft core's class; an app mutant (`app_mutants`) runs the real core."""
    if mutant is None or mutant in APP_MUTANTS or mutant in STORAGE_MUTANTS:
        return RaftNode
    if mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r} (known: {', '.join(sorted(MUTANTS))})")
    return MUTANTS[mutant]
