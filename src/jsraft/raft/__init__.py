"""Raft (layer L1): the sans-IO consensus core. See `core` for the state machine and `types` for values.

Modules: `core` (RaftNode, the message gateway and dispatch), `log` (in-memory log view), `messages`,
`election`, `append` (follower side of replication), `replication` (leader side), `snapshot`,
`membership`, `readindex`, `repair` (storage-fault rules 2–4 and 7), `rules` (the named rule hooks),
`quiesce` (when an idle replica may stop ticking), `vote_fence` (no vote where a lost one may be),
`term_query` (a member that lost its storage with no bound on its votes asks every voter's term),
`ready` (the Ready contract), `progress`, `config`, `status`, `errors`, `types`.
"""

from jsraft.raft.config import RaftConfig, RestoredState
from jsraft.raft.core import RaftNode
from jsraft.raft.errors import BadConfChange, NotLeader, PeerProtocolError, ProposalDropped, RaftError
from jsraft.raft.membership import ConfChange, ConfChangeType, decode_conf_change, encode_conf_change
from jsraft.raft.messages import (
    AppendEntries, AppendEntriesResponse, InstallSnapshot, InstallSnapshotResponse, Message, RequestVote,
    RequestVoteResponse, StatusProbe, StatusProbeResponse, TermQuery, TermQueryResponse, TimeoutNow,
)
from jsraft.raft.ready import ReadState, Ready, Snapshot
from jsraft.raft.repair import RestoreVerdict
from jsraft.raft.status import Role, Status
from jsraft.raft.types import ConfState, Entry, EntryType, HardState, SnapshotMeta

__all__ = [
    "AppendEntries", "AppendEntriesResponse", "BadConfChange", "ConfChange", "ConfChangeType", "ConfState",
    "Entry", "EntryType", "HardState", "InstallSnapshot", "InstallSnapshotResponse", "Message", "NotLeader",
    "PeerProtocolError", "ProposalDropped", "RaftConfig", "RaftError", "RaftNode", "ReadState", "Ready",
    "RequestVote", "RequestVoteResponse", "RestoreVerdict", "RestoredState", "Role", "Snapshot",
    "SnapshotMeta", "Status", "StatusProbe", "StatusProbeResponse", "TermQuery", "TermQueryResponse",
    "TimeoutNow", "decode_conf_change", "encode_conf_change",
]
