"""Messages between replicas of one Raft group, and the gateway that checks them (layer L1).

Owns: one frozen class per message kind, with the paper's names, and `validate_message()`, the single
place where a message from the network is checked before the core trusts it. A heartbeat is an
`AppendEntries` with no entries and `heartbeat=True`. `StatusProbe` is jsraft's addition: a repairing
replica, which may not campaign, uses it to learn whether the group can still elect anyone (rule 4).
`TermQuery` is another: a member whose storage was lost with no record of the terms it voted in asks every
voter for its term before it answers anything else (`term_query`).

Invariants:
  1. Every message has `from_id`, `to_id` and `term`; a node never sends a message to itself.
  2. `AppendEntries.entries` are contiguous from `prev_log_index + 1` with terms in
     `[prev_log_term, term]`, non-decreasing. `validate_message()` rejects anything else with
     `PeerProtocolError`: a misbehaving peer is dropped, it never crashes the node.
  3. `RequestVote` with `pre_vote=True`, `StatusProbe` and `TermQuery` never change anyone's term or vote.

Imports: L0, attrs. Reference: Raft paper Fig. 2 and §7 (InstallSnapshot), thesis §9.6 (pre-vote),
§3.10 (TimeoutNow), etcd-io/raft `raftpb`.
"""

from __future__ import annotations

from typing import Union

import attrs

from jsraft.raft.errors import PeerProtocolError
from jsraft.raft.types import Entry, EntryType, SnapshotMeta


@attrs.frozen(kw_only=True)
class AppendEntries:
    from_id: str
    to_id: str
    term: int
    leader_id: str
    prev_log_index: int
    prev_log_term: int
    entries: tuple[Entry, ...] = ()
    leader_commit: int
    heartbeat: bool = False
    # The leader's read-index round when it sent this; echoed back to confirm leadership (read_index).
    read_round: int = 0


@attrs.frozen(kw_only=True)
class AppendEntriesResponse:
    """`match_index` is the highest index known to match the leader on success. On reject,
    `rejected_index` is the request's `prev_log_index` and (`reject_hint_index`, `reject_hint_term`)
    say where the follower's log might match, for fast back-off (term 0: unknown). A `repairing` follower
    also sends its `acked_watermark`: it cannot leave repairing before the leader's log reaches it
    (`repair.pad_for_repairing`)."""

    from_id: str
    to_id: str
    term: int
    success: bool
    match_index: int = 0
    rejected_index: int = 0
    reject_hint_index: int = 0
    reject_hint_term: int = 0
    heartbeat: bool = False
    read_round: int = 0
    repairing: bool = False
    acked_watermark: int = 0


@attrs.frozen(kw_only=True)
class RequestVote:
    """`from_id` is the candidate. With `pre_vote`, `term` is the term it would campaign in."""

    from_id: str
    to_id: str
    term: int
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False
    # Sent after TimeoutNow: voters set aside leader stickiness because the leader asked for this.
    leadership_transfer: bool = False


@attrs.frozen(kw_only=True)
class RequestVoteResponse:
    from_id: str
    to_id: str
    term: int
    vote_granted: bool
    pre_vote: bool = False
    # The voter refused because it is repairing (rule 3); candidates use it to report a halt (rule 4).
    repairing: bool = False
    # The voter's commit index, capped at the candidate's last index, and the voter's term there (0, 0 from
    # a repairing voter): a candidate holding that entry learns the commit from it (`election.learn_commit`).
    commit_index: int = 0
    commit_term: int = 0


@attrs.frozen(kw_only=True)
class InstallSnapshot:
    """One chunk of the snapshot `meta` describes: `data` goes at byte `offset` of `total_bytes`."""

    from_id: str
    to_id: str
    term: int
    leader_id: str
    meta: SnapshotMeta
    offset: int
    data: bytes
    total_bytes: int
    done: bool


@attrs.frozen(kw_only=True)
class InstallSnapshotResponse:
    """`chunk_offset` echoes the chunk answered; `next_offset` is the byte the follower wants next.
    `done` means the snapshot is installed (or was not needed) and `match_index` is valid."""

    from_id: str
    to_id: str
    term: int
    snapshot_index: int
    chunk_offset: int
    next_offset: int
    done: bool = False
    match_index: int = 0


@attrs.frozen(kw_only=True)
class TimeoutNow:
    """From the leader to a transfer target: start an election now (thesis §3.10)."""

    from_id: str
    to_id: str
    term: int


@attrs.frozen(kw_only=True)
class StatusProbe:
    """From a replica that cannot campaign and knows no leader: are you repairing, who leads?"""

    from_id: str
    to_id: str
    term: int
    repairing: bool


@attrs.frozen(kw_only=True)
class StatusProbeResponse:
    from_id: str
    to_id: str
    term: int
    repairing: bool
    leader_id: str | None = None


@attrs.frozen(kw_only=True)
class TermQuery:
    """From a member whose current term is unknown (`term_query`): what is your term? `query_id` is this
    query's nonce, echoed in the answer, so an answer to an earlier incarnation's query never counts."""

    from_id: str
    to_id: str
    term: int
    query_id: int


@attrs.frozen(kw_only=True)
class TermQueryResponse:
    """`term` is at least the answering voter's durable current term; `term_known` is False when the voter
    does not know its own term either (its answer proves nothing)."""

    from_id: str
    to_id: str
    term: int
    query_id: int
    term_known: bool = True


Message = Union[
    AppendEntries, AppendEntriesResponse, RequestVote, RequestVoteResponse, InstallSnapshot,
    InstallSnapshotResponse, TimeoutNow, StatusProbe, StatusProbeResponse, TermQuery, TermQueryResponse,
]
MESSAGE_TYPES: tuple[type, ...] = Message.__args__  # type: ignore[attr-defined]


def validate_message(message: object, node_id: str, snapshot_bytes_max: int) -> None:
    """The gateway: raise `PeerProtocolError` unless `message` is well-formed and addressed to `node_id`."""
    if type(message) not in MESSAGE_TYPES:
        raise PeerProtocolError(f"unknown message type {type(message).__name__}")
    if message.to_id != node_id:  # type: ignore[attr-defined]
        raise PeerProtocolError(f"message for {message.to_id!r} delivered to {node_id!r}")  # type: ignore[attr-defined]
    if not message.from_id or message.from_id == node_id:  # type: ignore[attr-defined]
        raise PeerProtocolError("message from an empty or own node id")
    if message.term < 0:  # type: ignore[attr-defined]
        raise PeerProtocolError("negative term")
    if isinstance(message, AppendEntries):
        _validate_append(message)
    elif isinstance(message, InstallSnapshot):
        _validate_snapshot_chunk(message, snapshot_bytes_max)
    elif isinstance(message, RequestVote):
        if message.last_log_index < 0 or message.last_log_term < 0 or message.last_log_term > message.term:
            raise PeerProtocolError("RequestVote with an impossible last log position")


def _validate_append(message: AppendEntries) -> None:
    if message.leader_id != message.from_id:
        raise PeerProtocolError("AppendEntries leader_id differs from its sender")
    if min(message.prev_log_index, message.prev_log_term, message.leader_commit, message.read_round) < 0:
        raise PeerProtocolError("AppendEntries with a negative field")
    if message.prev_log_term > message.term:
        raise PeerProtocolError("AppendEntries prev_log_term above its term")
    expected_index = message.prev_log_index + 1
    previous_term = max(message.prev_log_term, 1)
    for entry in message.entries:
        if not isinstance(entry, Entry) or not isinstance(entry.type, EntryType):
            raise PeerProtocolError("AppendEntries carries something that is not an entry")
        if entry.index != expected_index:
            raise PeerProtocolError(f"AppendEntries entries not contiguous at {expected_index}")
        if not previous_term <= entry.term <= message.term:
            raise PeerProtocolError(f"AppendEntries entry {entry.index} has term {entry.term} out of order")
        previous_term = entry.term
        expected_index += 1


def _validate_snapshot_chunk(message: InstallSnapshot, snapshot_bytes_max: int) -> None:
    if message.leader_id != message.from_id:
        raise PeerProtocolError("InstallSnapshot leader_id differs from its sender")
    if message.meta.index < 1 or not 1 <= message.meta.term <= message.term:
        raise PeerProtocolError("InstallSnapshot with an impossible snapshot position")
    if message.offset < 0 or message.offset + len(message.data) > message.total_bytes:
        raise PeerProtocolError("InstallSnapshot chunk outside the announced size")
    if message.total_bytes > snapshot_bytes_max:
        raise PeerProtocolError(f"InstallSnapshot of {message.total_bytes} bytes exceeds snapshot_bytes_max")
    if message.done and message.offset + len(message.data) != message.total_bytes:
        raise PeerProtocolError("InstallSnapshot last chunk does not end at the announced size")
