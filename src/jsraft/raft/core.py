"""`RaftNode`: the sans-IO Raft state machine of one replica of one group (layer L1).

Owns: a replica's volatile and persistent Raft state, the public API (inputs `tick`, `step`, `propose`,
`propose_conf_change`, `transfer_leadership`, `read_index`, `campaign`, `compact`, `accept_data_loss`;
outputs `ready`/`advance`, `status`), the message gateway, the term rules every message goes through,
and the dispatch table to the per-message handlers in `append`, `replication`, `election`, `snapshot`
and `repair`. The storage-fault rules are the `rule_*` methods inherited from `rules.SafetyRules`.

Invariants:
  1. Time enters only through `tick()`, randomness only through the injected `random.Random`, so a run is
     a function of its inputs (the simulator replays it from a seed).
  2. Every message passes `validate_message()` before any handler sees it.
  3. A message with a higher term makes us a follower of that term before it is handled — except pre-vote
     requests, granted pre-vote responses, status probes and term queries, and (pre-)vote requests that
     arrive while we are in a live leader's lease. A message with a lower term is answered at most with our
     term. While our own term is unknown (`term_query`), every other message is dropped unanswered.
  4. `current_term`, `voted_for`, `acked_watermark` and `repairing` reach storage through `Ready.hard_state`
     with `must_sync` before any message that depends on them is sent (rule 1, see `Ready`).
  5. A leader's own copy of an entry counts toward commit only once a `Ready` holding it was advanced
     (after its fsync) in the term it was built in (`Ready.leader_term`, `rule_leader_own_match`): its
     AppendEntries may leave before that fsync (`Ready.send_first`, `pipelined_messages`), and its
     followers' acknowledgements may be stepped meanwhile, so commit still needs a majority of fsynced
     copies.
  6. An `observer` (nats-server's observer mode, for a node in lame duck mode) never stands for election —
     no pre-vote, campaign or TimeoutNow of its own — in a group that has another voter; it still votes,
     replicates and acknowledges, and a leadership it holds stays until handed over. A single voter keeps
     campaigning: no one else could lead its group.

Imports: L0, attrs (through siblings), stdlib. Never trio, socket, time, threading or module-level random.
Reference: Raft paper Fig. 2; etcd-io/raft `raft.go`, `rawnode.go`.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable
from typing import Any

from jsraft.errors import invariant
from jsraft.raft import (
    append, election, membership, readindex, ready, repair, replication, snapshot, term_query,
)
from jsraft.raft.config import RaftConfig, RestoredState
from jsraft.raft.errors import NotLeader, ProposalDropped
from jsraft.raft.log import RaftLog
from jsraft.raft.messages import (
    AppendEntries, AppendEntriesResponse, InstallSnapshot, InstallSnapshotResponse, Message, RequestVote,
    RequestVoteResponse, StatusProbe, StatusProbeResponse, TermQuery, TermQueryResponse, TimeoutNow,
    validate_message,
)
from jsraft.raft.progress import Progress
from jsraft.raft.rules import SafetyRules
from jsraft.raft.status import Role, Status
from jsraft.raft.types import ConfState, Entry, EntryType, HardState, SnapshotMeta

_HANDLERS: dict[type, Callable[[Any, Any], None]] = {
    AppendEntries: append.handle_append_entries,
    AppendEntriesResponse: replication.handle_append_entries_response,
    RequestVote: election.handle_request_vote,
    RequestVoteResponse: election.handle_request_vote_response,
    InstallSnapshot: snapshot.handle_install_snapshot,
    InstallSnapshotResponse: snapshot.handle_install_snapshot_response,
    TimeoutNow: election.handle_timeout_now,
    StatusProbe: repair.handle_status_probe,
    StatusProbeResponse: repair.handle_status_probe_response,
    TermQuery: term_query.handle_term_query,
    TermQueryResponse: term_query.handle_term_query_response,
}
# Messages outside the term rules (invariant 3): they change nobody's term or vote.
_TERMLESS = (StatusProbe, StatusProbeResponse, TermQuery, TermQueryResponse)
# Messages only a leader sends; only a leader's receipt of their responses matters.
_FROM_LEADER = (AppendEntries, InstallSnapshot, TimeoutNow)
_TO_LEADER = (AppendEntriesResponse, InstallSnapshotResponse)


class RaftNode(SafetyRules):
    """One replica. Not thread-safe: the driver calls it from one task."""

    def __init__(self, config: RaftConfig, rng: random.Random, restored: RestoredState) -> None:
        config.validate()
        restored.validate()
        self.config = config
        self.id = config.node_id
        self.rng = rng
        self._restore(restored)
        self.role = Role.FOLLOWER
        self.leader_id: str | None = None
        self.votes: dict[str, bool] = {}
        self.progress: dict[str, Progress] = {}
        self.lead_transferee: str | None = None
        self.pending_conf_index = 0
        # Invariant 6: set by the driver for lame duck mode (`server.ops.lame_duck`), never by a message.
        self.observer = False
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_ticks = config.election_ticks + rng.randrange(config.election_ticks)
        self.read_round = 0
        self.pending_reads: collections.deque[readindex.PendingRead] = collections.deque()
        self.reads_waiting_commit: list[bytes] = []
        self.read_states: list[ready.ReadState] = []
        # The current leader's commit index, and how far our log is known to match the leader's, in this
        # term: what rule 3 needs to decide that a repairing replica is whole again.
        self.leader_commit_seen: int | None = None
        self.leader_match_index = 0
        self.peer_repairing: dict[str, bool] = {}
        self.snapshot_receive: snapshot.ReceiveBuffer | None = None
        self.pending_snapshot: ready.Snapshot | None = None
        self.outbox: list[Message] = []
        self.ready_outstanding = False
        membership.apply_committed(self)  # the membership changes among the restored committed entries
        # Lost storage with no bound on the votes it held: learn the term from every voter first.
        self.term_query: term_query.TermQueryState | None = None
        query_voters = self.rule_term_query_voters(restored)
        if query_voters is not None:
            term_query.start(self, query_voters)

    def _restore(self, restored: RestoredState) -> None:
        hard_state = self.rule_restore_hard_state(restored.hard_state)
        verdict = self.rule_classify_restored_log(restored)
        snap = restored.snapshot
        snapshot_index = snap.index if snap is not None else 0
        last_index = verdict.entries[-1].index if verdict.entries else snapshot_index
        applied = restored.applied_index if restored.applied_index is not None else snapshot_index
        self.log = RaftLog(
            snapshot_index=snapshot_index, snapshot_term=snap.term if snap is not None else 0,
            entries=list(verdict.entries), faulty=set(verdict.faulty),
            commit_index=min(max(hard_state.commit_index, applied), last_index), applied_index=applied,
            persisted=restored.entries_persisted, storage_last_index=restored.last_index)
        self.current_term = hard_state.current_term
        self.voted_for = hard_state.voted_for
        self.acked_watermark = hard_state.acked_watermark
        self.repairing = verdict.repair_reason is not None
        self.repair_reason = verdict.repair_reason
        # While repairing, nothing after the snapshot is trusted until a leader's log confirms it entry by
        # entry: besides faulty records, storage may have restored stale copies (a rolled-back write).
        self.repair_verified_index = snapshot_index if self.repairing else last_index
        self.vote_unknown = verdict.vote_unknown
        self.vote_fence_term = self.rule_vote_fence(hard_state, self.repairing)
        if self.vote_fence_term > self.current_term:
            # Rule 7 (`vote_fence`, invariant 4): a fenced restore starts in the fence term, with no vote,
            # so it never acknowledges a leader of a term its lost write may have voted past.
            self.current_term, self.voted_for = self.vote_fence_term, None
        # A bootstrapped group's first term counts as durable for the one-step rule (`vote_fence`): storage
        # that loses the first write is empty again, a member that never started.
        self.bootstrap_term = 0 if restored.entries_persisted else hard_state.current_term
        self.campaign_pending: bool | None = None  # a campaign waiting for its term below to be durable
        self.vote_pending: RequestVote | None = None  # a RequestVote waiting for the term it raised us to
        # What storage holds; if we now know we are repairing, the first Ready persists that (rule 2).
        self.persisted_hard_state = restored.hard_state if restored.entries_persisted else HardState()
        self.snapshot_meta: SnapshotMeta | None = snap
        self.snapshot_data: bytes | None = restored.snapshot_data
        self.conf: ConfState = restored.conf_state
        self.conf_history: list[tuple[int, ConfState]] = [(snapshot_index, restored.conf_state)]
        self.conf_applied_index = snapshot_index

    # --- Inputs ----------------------------------------------------------------------------------

    def tick(self) -> None:
        """One unit of time passed."""
        if self.term_query is not None:
            term_query.tick(self)  # nothing else until every voter told us its term (`term_query` inv. 1)
            return
        if self.role is Role.LEADER:
            self._tick_leader()
            return
        self.election_elapsed += 1
        if self.election_elapsed < self.randomized_election_ticks:
            return
        self.election_elapsed = 0
        if self.is_promotable():
            election.campaign(self)
            return
        # We may not campaign (repairing, or not a voter): stop trusting a leader we no longer hear, and
        # if repairing, find out whether the group can still elect anyone (rule 4).
        self.leader_id = None
        self.randomized_election_ticks = self.config.election_ticks + self.rng.randrange(self.config.election_ticks)
        if self.repairing:
            repair.send_status_probes(self)

    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.config.election_ticks:
            self.election_elapsed = 0
            if self.config.check_quorum and not election.check_quorum_active(self):
                # Check-quorum: a leader that has not heard from a majority for an election timeout may
                # be on the minority side of a partition; step down so clients go elsewhere.
                election.become_follower(self, self.current_term, None)
                return
            self.lead_transferee = None  # a transfer not done within an election timeout is aborted
        snapshot.tick_transfers(self)
        if self.heartbeat_elapsed >= self.config.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            if repair.pad_for_repairing(self):
                replication.broadcast_append(self)
            replication.broadcast_heartbeat(self)

    def step(self, message: Message) -> None:
        """Handle one message from a peer. Raises `PeerProtocolError` for a malformed one (drop the link)."""
        validate_message(message, self.id, self.config.snapshot_bytes_max)
        if isinstance(message, _TERMLESS):
            _HANDLERS[type(message)](self, message)
            return
        if self.term_query is not None:
            return  # `term_query` invariant 1: no acknowledgement, vote or term change before the answers
        if message.term > self.current_term:
            if not self._accept_higher_term(message):
                return
        elif message.term < self.current_term:
            self._answer_lower_term(message)
            return
        if isinstance(message, _TO_LEADER) and self.role is not Role.LEADER:
            return
        _HANDLERS[type(message)](self, message)

    def _accept_higher_term(self, message: Message) -> bool:
        """Invariant 3; returns False if the message is to be ignored."""
        if isinstance(message, RequestVote):
            if election.in_leader_lease(self) and not message.leadership_transfer:
                # Leader stickiness: a live leader is not disrupted by a partitioned node. The refusal is
                # in our own (lower) term, so it changes nobody's term; it carries our commit, from which
                # a voter that missed its own removal learns it (`election.learn_commit`).
                election.refuse_vote(self, message)
                return False
            if message.pre_vote:
                return True  # pre-vote never changes our term
        if isinstance(message, RequestVoteResponse) and message.pre_vote and message.vote_granted:
            return True
        leader = message.from_id if isinstance(message, _FROM_LEADER) else None
        election.become_follower(self, message.term, leader)
        return True

    def _answer_lower_term(self, message: Message) -> None:
        if isinstance(message, RequestVoteResponse):
            # A repairing voter that lost its storage answers in its own (lower, maybe 0) term: what it says
            # about itself is still news, and rule 4's halt is seen only if it is not dropped with the rest.
            repair.note_peer_repairing(self, message.from_id, message.repairing)
        if isinstance(message, (AppendEntries, InstallSnapshot)):
            # A deposed leader: our term in the response makes it step down.
            self.send(AppendEntriesResponse(from_id=self.id, to_id=message.from_id, term=self.current_term,
                                            success=False, repairing=self.repairing))
        elif isinstance(message, RequestVote) and message.pre_vote:
            # Answer so a pre-candidate with a stale term learns ours instead of waiting forever.
            self.send(RequestVoteResponse(from_id=self.id, to_id=message.from_id, term=self.current_term,
                                          vote_granted=False, pre_vote=True, repairing=self.repairing))

    def campaign(self) -> None:
        """Start an election now, as if the election timeout had elapsed (no-op if we may not)."""
        election.campaign(self)

    def propose(self, data: bytes) -> int:
        """Append `data` as a new entry; returns its index. Raises `NotLeader` or `ProposalDropped`."""
        self._check_proposal()
        return self._append_proposal(EntryType.NORMAL, data)

    def propose_conf_change(self, change: membership.ConfChange) -> int:
        """Propose a single-server membership change; it takes effect when committed."""
        self._check_proposal()
        membership.check_proposal(self, change)
        index = self._append_proposal(EntryType.CONF_CHANGE, membership.encode_conf_change(change))
        self.pending_conf_index = index
        return index

    def _check_proposal(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        if self.lead_transferee is not None:
            raise ProposalDropped(f"leadership is being transferred to {self.lead_transferee}")
        if self.log.last_index - self.log.commit_index >= self.config.uncommitted_entries_max:
            raise ProposalDropped("too many uncommitted entries")

    def _append_proposal(self, entry_type: EntryType, data: bytes) -> int:
        index = self.log.last_index + 1
        self.append_as_leader([Entry(index=index, term=self.current_term, type=entry_type, data=bytes(data))])
        replication.broadcast_append(self)
        self._count_own_copy()  # nothing, unless a mutant counts what is not yet fsynced
        return index

    def transfer_leadership(self, to: str) -> None:
        """Hand leadership to voter `to` once it has caught up (TimeoutNow); proposals wait meanwhile."""
        election.transfer_leadership(self, to)

    def read_index(self, ctx: bytes) -> None:
        """Ask for a read barrier; a `ReadState` with `ctx` comes out of a later `Ready`."""
        readindex.read_index(self, ctx)

    def compact(self, index: int, snapshot_data: bytes) -> None:
        """The application durably snapshotted its state at applied `index`: drop the log up to it."""
        snapshot.compact(self, index, snapshot_data)

    def accept_data_loss(self) -> bool:
        """Operator command (rule 4): stop repairing, keeping only the verified prefix of the log."""
        return repair.accept_data_loss(self)

    # --- Outputs ---------------------------------------------------------------------------------

    def has_ready(self) -> bool:
        return ready.has_ready(self)

    def ready(self) -> ready.Ready:
        """Collect what the driver must do next; see `Ready` for the order. Call `advance()` after."""
        return ready.build_ready(self)

    def advance(self, rd: ready.Ready) -> None:
        """The driver did everything `rd` asked (persisted, sent, applied)."""
        ready.apply_advance(self, rd)
        if self.vote_pending is not None:
            election.resume_vote(self)
        if self.campaign_pending is not None:
            election.resume_campaign(self)
        if rd.leader_term and rd.leader_term == self.current_term:
            # The leader's self-acknowledgement, like a follower's AppendEntriesResponse after its fsync:
            # its entries leave before that fsync (`Ready.send_first`), so only now do they count. A node
            # that stopped leading that term meanwhile counts nothing.
            self._count_own_copy()
        repair.maybe_finish_repair(self)

    def _count_own_copy(self) -> None:
        """Raise the leader's own match index to what it has fsynced (rule 1), and commit what that allows."""
        if self.role is not Role.LEADER:
            return
        own = self.progress.get(self.id)
        index = self.rule_leader_own_match(self.log.stable_index, self.log.last_index)
        if own is not None and own.maybe_update(index) and replication.maybe_commit(self):
            replication.announce_commit(self)

    def pipelined_messages(self) -> list[Message]:
        """While a leader's `send_first` Ready is being persisted, the driver may step its followers'
        AppendEntriesResponses of this term (nothing else) and send what they produced now, without a
        `Ready`: AppendEntries, snapshots, TimeoutNow, in a term and vote already durable (invariant 5).
        Empty unless that holds; what is not taken here leaves with the next `Ready`."""
        if (self.role is not Role.LEADER or not self.outbox
                or not ready.messages_independent_of_storage(self)):
            return []
        messages, self.outbox = self.outbox, []
        return messages

    def status(self) -> Status:
        return repair.build_status(self)

    # --- Used by the role modules ----------------------------------------------------------------

    def send(self, message: Message) -> None:
        invariant(message.to_id != self.id, "a node never sends a message to itself")
        self.outbox.append(message)

    def hard_state(self) -> HardState:
        return HardState(current_term=self.current_term, voted_for=self.voted_for,
                         commit_index=self.log.commit_index, acked_watermark=self.acked_watermark,
                         repairing=self.repairing, vote_fence_term=self.vote_fence_term)

    def is_promotable(self) -> bool:
        """May this replica campaign: a voter, not repairing (rule 3), not an observer beside other voters (6)."""
        return (self.id in self.conf.voters and self.rule_may_campaign()
                and not (self.observer and len(self.conf.voters) > 1))

    def append_as_leader(self, entries: list[Entry]) -> None:
        invariant(self.role is Role.LEADER, "only the leader appends its own entries")
        self.log.append(entries)

    # Hand-offs from `replication`, the module the other role modules build on: it reaches `snapshot`,
    # `readindex` and `election` through the node, so no two role modules import each other in a cycle.

    def send_snapshot(self, peer: str) -> bool:
        return snapshot.send_snapshot(self, peer)

    def on_leadership_confirmed(self) -> None:
        readindex.on_leadership_confirmed(self)

    def send_timeout_now_if_caught_up(self, peer: str) -> None:
        election.send_timeout_now_if_caught_up(self, peer)

    def on_commit_advanced(self) -> None:
        """The commit index advanced, or a faulty entry at or below it was repaired."""
        conf_before = self.conf
        membership.apply_committed(self)
        if self.role is Role.LEADER and self.id not in self.conf.voters:
            # Our removal committed: tell the others (so they apply it too), then stop leading; the
            # remaining voters elect a leader among themselves.
            self.progress.pop(self.id, None)
            replication.broadcast_append(self)
            election.become_follower(self, self.current_term, None)
            return
        if self.role is Role.LEADER and self.conf != conf_before and replication.maybe_commit(self):
            # The quorum changed with the configuration: entries the remaining voters hold may commit
            # now (as etcd's applyConfChange re-checks). Nothing else would ask again if a removed voter
            # was the one holding them back and no other voter is left to answer (a group shrunk to one).
            # `maybe_commit` came back here for the new commit (read states included): tell the others.
            replication.broadcast_append(self)
            return
        readindex.on_commit(self)
