"""`MonitorParts`: what the monitoring views, the metrics and the test hooks read of a node, named —
instead of the whole `Node` (layer L5).

Owns: the one frozen bundle `server.node` wires for `Monitor`, `monitor_views` and `metrics.NodeCollector`:
the node's name and config, its meta state and open stream replicas, the runtime's group status and
group names, the readiness rule, the meta leader's removal notice, the client port, the JetStream API's
request counters and bulk-get counters, the cluster links, the bound addresses, and the test hooks'
own parts (`HookParts`).

Invariants:
  1. Every part is bound once, when the node is built (`Node._build`); no part is the `Node`, so what
     a view can read is read off this class (tests/test_architecture.py: no ops module names `Node`).
  2. Read-only by construction: every part is a reader (a value, a mapping the node keeps current, or a
     callable answering from the node's state); none of them proposes or opens anything (monitor
     invariant 2).
  3. What changes while the node runs (the addresses bound, the links, the counters) is reached through
     a callable, never copied when the parts are built.

Imports: stdlib, attrs, L3 (`meta`), L4 (`runtime`, `transport` types), `server.settings`, `server.nats`
(the client port), `server.groups`, `server.api` (bulk-get counters), ops siblings. Must not import
`server.node` or prometheus_client (the node builds these parts whether or not a monitor runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from jsraft.server.ops.readiness import Readiness
from jsraft.server.ops.test_hooks import HookParts

if TYPE_CHECKING:
    from jsraft.meta import MetaStateMachine
    from jsraft.runtime import GroupStatus
    from jsraft.server.api.bulk_get import BulkGets
    from jsraft.server.groups.meta_members import RemovedNotice
    from jsraft.server.groups.stream_replica import StreamReplica
    from jsraft.server.nats.client_server import ClientServer
    from jsraft.server.settings.config import NodeConfig
    from jsraft.transport.peer import PeerStatus

Address = tuple[str, int]


@attrs.frozen(kw_only=True)
class MonitorParts:
    name: str
    config: NodeConfig
    meta: MetaStateMachine
    replicas: Mapping[str, StreamReplica]  # the stream manager's own mapping, kept current by it
    readiness: Readiness  # the one definition of ready (`/varz`, `/healthz`, `jsraft_node_ready`)
    status: Callable[[str], GroupStatus]  # `NodeRuntime.status`; `JsraftError` for a group not open here
    group_names: Callable[[], list[str]]  # `NodeRuntime.group_names`, the meta group included
    removed_notice: Callable[[], RemovedNotice | None]  # the meta leader told this server it was removed
    clients: ClientServer  # the client port: server id, options, connections, subject index, counters
    api_counts: Callable[[], tuple[int, int]]  # JetStream API requests answered, and with an error
    bulk: BulkGets  # its `local_chunks` and `leader_chunks` counters
    peer_links: Callable[[], Mapping[str, PeerStatus]]  # `Transport.peer_status`
    cluster_address: Callable[[], Address | None]  # invariant 3: bound once running
    client_address: Callable[[], Address | None]
    hooks: HookParts  # served only with the node's test hooks on (test_hooks invariant 1)

    def client_port(self) -> int | None:
        """The NATS client port bound, once running."""
        address = self.client_address()
        return address[1] if address else None
