"""The meta group (layer L3): which streams and consumers exist, with which config, on which peers.

Modules: `machine` (MetaStateMachine, the public face), `entries` (log entry kinds and encoding),
`assignment` (stream/consumer assignments, offline loading), `placement`, `rules` (checks shared by
leader and apply), `leader` (proposals and in-flight accounting), `apply`, `state`, `snapshot` (the
snapshot frame) with `snapshot_document` (its JSON document), `wire` (canonical JSON + blobs),
`quarantine` (unknown local stream directories), `reconcile` (stream groups after a snapshot restore),
`errors`.

Deterministic and synchronous: no trio, socket, time, threading or module-level random (DESIGN §1).
Reference: DESIGN.md §5 and §9.
"""

from jsraft.meta.apply import Applied
from jsraft.meta.assignment import ConsumerAssignment, StreamAssignment, level_reason, load_consumer, load_stream
from jsraft.meta.entries import (
    CreateConsumer,
    CreateStream,
    DeleteConsumer,
    DeleteStream,
    EntryKind,
    MetaEntry,
    PeerAdd,
    PeerRemove,
    PeerSeen,
    Replacement,
    ServerReadmit,
    UpdateStream,
    decode_entry,
    encode_entry,
    group_name,
)
from jsraft.meta.errors import (
    ClusterNoPeers,
    ClusterPeerNotMember,
    ClusterServerNotMember,
    ConsumerAlreadyExists,
    ConsumerNotFound,
    ConsumerOffline,
    InsufficientResources,
    MalformedMetaEntry,
    MalformedMetaSnapshot,
    MaximumConsumersLimit,
    MaximumStreamsLimit,
    MetaProposalsFull,
    QuarantineConflict,
    ReplicasNotSupported,
    RequiredApiLevel,
    ServerReadmitRefused,
    StreamNameExist,
    StreamOffline,
    StreamSubjectOverlap,
)
from jsraft.meta.leader import Proposal
from jsraft.meta.machine import META_SNAPSHOT_ENTRIES, PENDING_PROPOSALS_MAX, MetaStateMachine
from jsraft.meta.placement import PeerInfo, place, replace_peer
from jsraft.meta.quarantine import (
    MetaProgress,
    Quarantined,
    QuarantineReport,
    list_quarantined,
    quarantine_unknown_streams,
    restore_quarantined,
)
from jsraft.meta.reconcile import RestorePlan, plan_restore

__all__ = [
    "META_SNAPSHOT_ENTRIES", "PENDING_PROPOSALS_MAX", "Applied", "ClusterNoPeers", "ClusterPeerNotMember",
    "ClusterServerNotMember",
    "ConsumerAlreadyExists", "ConsumerAssignment", "ConsumerNotFound", "ConsumerOffline", "CreateConsumer",
    "CreateStream", "DeleteConsumer", "DeleteStream", "EntryKind", "InsufficientResources",
    "MalformedMetaEntry", "MalformedMetaSnapshot", "MaximumConsumersLimit", "MaximumStreamsLimit",
    "MetaEntry", "MetaProgress", "MetaProposalsFull", "MetaStateMachine", "PeerAdd", "PeerInfo",
    "PeerRemove", "PeerSeen", "Proposal", "QuarantineConflict", "QuarantineReport", "Quarantined", "Replacement",
    "ReplicasNotSupported", "RequiredApiLevel", "RestorePlan", "ServerReadmit", "ServerReadmitRefused",
    "StreamAssignment", "StreamNameExist",
    "StreamOffline", "StreamSubjectOverlap", "UpdateStream", "decode_entry", "encode_entry", "group_name",
    "level_reason", "list_quarantined", "load_consumer", "load_stream", "place", "plan_restore",
    "quarantine_unknown_streams", "replace_peer", "restore_quarantined",
]
