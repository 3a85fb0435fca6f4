"""Operating errors of the meta group (layer L3).

Owns: the conditions a create/update/delete/peer request can be refused with, with nats-server's
`err_code` and `code` from `server/errors.json` (constant named on each class), plus jsraft's own
codes for a malformed meta entry or snapshot and for quarantine. jsraft codes 20300–20399 are reserved
for `meta` (20100–20199 are Raft's).

Invariants:
  1. An `err_code` here is never reused or renumbered (same rule as `jsraft.errors`).
  2. A refusal leaves the meta state unchanged: these are raised by validators before anything is
     proposed, or returned in an `Applied` result for an entry that changed nothing.

Imports: L0 only. Reference: nats-server `server/errors.json`, `server/jetstream_cluster.go`.
"""

from __future__ import annotations

from jsraft.errors import BadRequest, JsraftError


class StreamNameExist(BadRequest):
    """JSStreamNameExistErr: a create names an existing stream with a different configuration."""

    err_code = 10058
    default_description = "stream name already in use with a different configuration"


class StreamSubjectOverlap(BadRequest):
    """JSStreamSubjectOverlapErr: the subjects overlap an existing (or in-flight) stream's."""

    err_code = 10065
    default_description = "subjects overlap with an existing stream"


class ClusterNoPeers(BadRequest):
    """JSClusterNoPeersErrF: not enough eligible peers (online, matching cluster and tags)."""

    err_code = 10005
    default_description = "no suitable peers for placement"


class InsufficientResources(JsraftError):
    """JSInsufficientResourcesErr: more replicas than the cluster has peers, or a node without the file
    descriptors a new replica would hold open (`server.groups.replica_descriptors`)."""

    err_code = 10023
    http_code = 503
    default_description = "insufficient resources"


class MaximumStreamsLimit(BadRequest):
    """JSMaximumStreamsLimitErr."""

    err_code = 10027
    default_description = "maximum number of streams reached"


class ReplicasNotSupported(JsraftError):
    """JSStreamReplicasNotSupportedErr: R>1 asked of a node that is not clustered."""

    err_code = 10074
    http_code = 500
    default_description = "replicas > 1 not supported in non-clustered mode"


class MaximumConsumersLimit(BadRequest):
    """JSMaximumConsumersLimitErr: the stream's `max_consumers` is reached."""

    err_code = 10026
    default_description = "maximum consumers limit reached"


class ConsumerNotFound(JsraftError):
    """JSConsumerNotFoundErr."""

    err_code = 10014
    http_code = 404
    default_description = "consumer not found"


class ConsumerAlreadyExists(BadRequest):
    """JSConsumerAlreadyExists: a create names an existing consumer with a different configuration."""

    err_code = 10148
    default_description = "consumer already exists"


class ClusterPeerNotMember(BadRequest):
    """JSClusterPeerNotMemberErr: a peer remove names a node the meta state does not know."""

    err_code = 10040
    default_description = "peer not a member"


class ClusterServerNotMember(BadRequest):
    """JSClusterServerNotMemberErr: `SERVER.REMOVE` names a server that is not in the meta group."""

    err_code = 10044
    default_description = "server is not a member of the cluster"


class StreamOffline(JsraftError):
    """JSStreamOfflineReasonErrF: the stream is loaded offline (DESIGN §9); only deletion is allowed."""

    err_code = 10194
    http_code = 500
    default_description = "stream is offline"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"stream is offline: {reason}")


class ConsumerOffline(JsraftError):
    """JSConsumerOfflineReasonErrF: the consumer is loaded offline; only deletion is allowed."""

    err_code = 10195
    http_code = 500
    default_description = "consumer is offline"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"consumer is offline: {reason}")


class RequiredApiLevel(JsraftError):
    """JSRequiredApiLevelErr: a request's `Nats-Required-Api-Level` is above this node's level."""

    err_code = 10185
    http_code = 412
    default_description = "JetStream minimum api level required"


# --- jsraft's own (20300–20399) ----------------------------------------------------------------


class MalformedMetaEntry(JsraftError):
    """A meta log entry that does not decode under this build's rules.

    The runtime must stop applying the meta log when it meets one (never skip it): skipping would make
    this replica's state differ from every other replica's.
    """

    err_code = 20300
    http_code = 500
    default_description = "malformed meta entry"


class MalformedMetaSnapshot(JsraftError):
    """A meta snapshot whose frame, checksum or content does not decode."""

    err_code = 20301
    http_code = 500
    default_description = "malformed meta snapshot"


class MetaProposalsFull(JsraftError):
    """The meta leader already has `pending_proposals_max` proposals in flight; retry later."""

    err_code = 20302
    http_code = 503
    default_description = "too many meta proposals in flight"


class QuarantineConflict(JsraftError):
    """Restoring a quarantined directory would overwrite an existing stream directory."""

    err_code = 20303
    http_code = 500
    default_description = "quarantine restore conflict"


class ServerReadmitRefused(JsraftError):
    """A `SERVER_READMIT` that does not apply: the server is a peer, or it returned with the very storage
    it was removed with (it must be wiped to rejoin)."""

    err_code = 20304
    http_code = 409
    default_description = "server can not be readmitted"
