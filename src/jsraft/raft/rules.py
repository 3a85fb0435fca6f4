"""The storage-fault rules, each behind one named method (layer L1).

Owns: `SafetyRules`, a mixin of `RaftNode`. Every decision that one of the project's storage-fault rules
(DESIGN.md §4) makes is taken by calling one of these `rule_*` methods, so that a test kit can build a
*mutant* — a subclass of `RaftNode` overriding one method — and show that the simulator catches the bug
the rule prevents. Production code never overrides them and no configuration reaches them.

  rule 1  term and vote durable before use ....... `rule_must_sync`, `rule_restore_hard_state`
          a leader counts only its fsynced copy ... `rule_leader_own_match`
  rule 2  acked watermark, repairing on restore .. `rule_classify_restored_log`, `rule_acked_watermark`
  rule 3  a repairing replica neither votes ...... `rule_may_grant_vote`
          nor campaigns .......................... `rule_may_campaign`
          (what it trusts and when it is repaired: `repair.trusted_index`, `repair.maybe_finish_repair`)
          no vote where a lost one may be ......... `rule_vote_fence` (`vote_fence`)
          nor any answer before its term is known . `rule_term_query_voters` (`term_query`)
  rule 5  never truncate a committed entry ....... `rule_check_truncation`
  rule 6  no snapshot from a faulty leader ....... `rule_may_send_snapshot`
  (pre-vote, thesis §9.6) ........................ `rule_pre_vote_enabled`

Mutants they are meant for (the simulator's names):
  ack-before-fsync        rule_must_sync returns False: acks leave before their entries are on disk.
  truncate-on-corruption  rule_classify_restored_log cuts the log at the first faulty index and
                          reports no reason to repair, the way nats-server "repairs" a bad checksum
                          (the core then tells storage to drop the rest: `Ready.truncate_from`).
  repairing-node-votes    rule_may_grant_vote returns True while repairing.
  no-prevote              rule_pre_vote_enabled returns False.
  forget-vote-on-restart  rule_restore_hard_state returns the hard state with voted_for=None.
  leader-counts-unsynced  rule_leader_own_match returns the appended index: the leader counts its own
                          copy before its fsync returned.
  no-vote-fence           rule_vote_fence returns 0: a replica repaired after losing a hard-state write
                          votes again in the term it voted in before (`double-vote`).
  no-term-query           rule_term_query_voters returns None: a member that lost its storage and the
                          node's record of its vote-term ceiling restores fenced through term 1 only, and
                          votes again in the term of its lost vote (`double-vote`) or acknowledges a leader
                          older than it (`leader-completeness`).

Rule 4 (halt and report, `accept_data_loss`) and rule 7 (a changed storage UUID means repairing, decided
inside `rule_classify_restored_log`) live in `repair`.

Imports: L0. Reference: DESIGN.md §4.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.errors import invariant
from jsraft.raft.repair import RestoreVerdict, classify_restored_log
from jsraft.raft.vote_fence import fence_on_restore

if TYPE_CHECKING:
    from jsraft.raft.config import RaftConfig, RestoredState
    from jsraft.raft.log import RaftLog
    from jsraft.raft.types import HardState


class SafetyRules:
    config: RaftConfig
    log: RaftLog
    repairing: bool
    repair_verified_index: int

    def rule_must_sync(self, durable_hard_state_changed: bool, log_written: bool) -> bool:
        """Rule 1: fsync before sending whenever term, vote, watermark, repairing or the log changed.

        The `Ready` that grants a vote or acknowledges entries also carries the hard state and entries
        those messages depend on; with `must_sync` the driver makes them durable before it sends.
        """
        return durable_hard_state_changed or log_written

    def rule_leader_own_match(self, persisted_index: int, appended_index: int) -> int:
        """Rule 1 for the leader's own copy: with pipelining its AppendEntries leave before its fsync, so
        it counts toward commit only what its fsync covered (`persisted_index`), never merely appended."""
        return persisted_index

    def rule_restore_hard_state(self, hard_state: HardState) -> HardState:
        """Rule 1: a restarted replica uses the term and vote it persisted, never fresh ones."""
        return hard_state

    def rule_classify_restored_log(self, restored: RestoredState) -> RestoreVerdict:
        """Rules 2 and 7: keep faulty entries' identity, and say whether (and why) we are repairing."""
        return classify_restored_log(restored)

    def rule_acked_watermark(self, watermark: int, acknowledged_index: int) -> int:
        """Rule 2: the watermark covers every index we acknowledge, in the same hard state."""
        return max(watermark, acknowledged_index)

    def rule_may_grant_vote(self) -> bool:
        """Rule 3: a repairing replica's vote would count data it no longer has; it refuses."""
        return not self.repairing

    def rule_vote_fence(self, hard_state: HardState, repairing: bool) -> int:
        """Rule 3 after repair: the highest term a replica restored this way must not vote in (0: none);
        a damaged hard-state slot may have taken a vote in the restored term or the one above."""
        return fence_on_restore(hard_state, repairing)

    def rule_term_query_voters(self, restored: RestoredState) -> tuple[str, ...] | None:
        """Rule 3 for lost storage with no bound on its votes: the voters whose term it must learn before it
        answers anything (`term_query`); None when the restored state bounds its votes."""
        return restored.term_query_voters

    def rule_may_campaign(self) -> bool:
        """Rule 3: a repairing replica never pre-votes, campaigns, or answers TimeoutNow."""
        return not self.repairing

    def rule_pre_vote_enabled(self) -> bool:
        """Pre-vote keeps a partitioned replica from raising its term and disrupting a healthy leader."""
        return self.config.pre_vote

    def rule_check_truncation(self, from_index: int) -> None:
        """Rule 5: a conflict truncation or snapshot install never removes an entry at or below commit."""
        # A repairing replica's commit hint may cover stale copies of committed entries; past its
        # verified prefix those copies are not trusted, and replacing them is the repair (append inv. 5).
        invariant(from_index > self.log.commit_index
                  or (self.repairing and from_index > self.repair_verified_index),
                  f"rule 5: removing entries from {from_index} would drop committed entry "
                  f"{self.log.commit_index}")

    def rule_may_send_snapshot(self) -> bool:
        """Rule 6: a replica with unrepaired faults is never the source of a snapshot."""
        return not self.repairing and not self.log.faulty
