"""Stream groups (layer L3): the deterministic stream state machine and what its leader decides.

Public surface (see each module's docstring for its rules):

  entries   binary log entries: `encode_msgs`, `encode_delete`, `encode_purge`, `encode_expire`,
            `encode_config`, `encode_audit`, `decode_entry`
  leader    `StreamLeader`: accept/reject publishes before proposing, coalesce them, expiry and audits
  machine   `StreamStateMachine`: apply committed entries, snapshots, restore -> `RepairPlan`
  catchup   `serve_catchup` (leader) and `CatchupSession` (follower): range catch-up
  drift     `plan_repair`: DESIGN §8's reactions table; `Finding`, `RepairPlan`
  audit     `judge_audit`, `ReplicaBoard`, advisories

Imports: L0-L2 only (never `meta` or `consumer`, never trio, sockets or clocks).
Reference: DESIGN.md §2, §6, §8.
"""

from jsraft.stream.audit import (
    AUDIT_SPLIT_ADVISORY,
    DRIFT_ADVISORY,
    DRIFT_REPAIRED_ADVISORY,
    Advisory,
    AuditVerdict,
    ReplicaBoard,
    ReplicaState,
    ReplicaStatus,
    judge_audit,
)
from jsraft.stream.catchup import CatchupResult, CatchupSession, serve_catchup
from jsraft.stream.catchup_wire import (
    CatchupChunk,
    CatchupRefusal,
    CatchupRequest,
    RefusalCode,
    decode_catchup,
    encode_chunk,
    encode_refusal,
    encode_request,
)
from jsraft.stream.drift import Finding, FindingKind, RepairPlan, plan_repair
from jsraft.stream.entries import EntryKind, decode_entry
from jsraft.stream.errors import (
    CatchupFailed,
    MalformedCatchup,
    MalformedEntry,
    MalformedSnapshot,
    StaleSnapshot,
    RepairSourceRefused,
    StreamNotHealthy,
)
from jsraft.stream.leader import Decision, LeaderProposal, StreamLeader
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.results import ApplyResult, AuditReport, Health
from jsraft.stream.outcomes import ApiError, PubOutcome
from jsraft.stream.snapshot import GroupState, StreamSnapshot, decode_snapshot, encode_snapshot
from jsraft.stream.store_config import store_config_for

__all__ = [
    "AUDIT_SPLIT_ADVISORY",
    "DRIFT_ADVISORY",
    "DRIFT_REPAIRED_ADVISORY",
    "Advisory",
    "ApiError",
    "ApplyResult",
    "AuditReport",
    "AuditVerdict",
    "CatchupChunk",
    "CatchupFailed",
    "CatchupRefusal",
    "CatchupRequest",
    "CatchupResult",
    "CatchupSession",
    "Decision",
    "EntryKind",
    "Finding",
    "FindingKind",
    "GroupState",
    "Health",
    "LeaderProposal",
    "MalformedCatchup",
    "MalformedEntry",
    "MalformedSnapshot",
    "PubOutcome",
    "RefusalCode",
    "RepairPlan",
    "ReplicaBoard",
    "ReplicaState",
    "ReplicaStatus",
    "StreamLeader",
    "StaleSnapshot",
    "RepairSourceRefused",
    "StreamNotHealthy",
    "StreamSnapshot",
    "StreamStateMachine",
    "decode_catchup",
    "decode_entry",
    "decode_snapshot",
    "encode_chunk",
    "encode_refusal",
    "encode_request",
    "encode_snapshot",
    "judge_audit",
    "plan_repair",
    "serve_catchup",
    "store_config_for",
]
