"""`ApiParts`: what the JetStream API's endpoints use of a node, named — instead of the whole `Node` (L5).

Owns: the one frozen bundle `server.node` wires for `JsApi`, its endpoints and the embedded
`JetStreamContext`: this node's streams (`LocalStreams`), its config, the routes a request can take
(`call_meta`, `call_stream`, `call_peer`, and `handle` for a method served right here), the runtime (group
status, leadership transfer, accepting data loss), who is online, when each peer was last heard per group,
whether the meta group is ready, the advisory log, and the interest routes (a flush, a peer's interest).

Invariants:
  1. Every part is bound once, when the node is built; an endpoint never reaches the node through a
     part (none of them is the `Node`), so what an endpoint can touch is read off this class.
  2. Parts that are built after the API (the interest routes) are reached through a callable, never
     captured as `None`.

Imports: stdlib, attrs, L3 (`meta`), L3½ (`replica.advisories`), L4 (`runtime`), `server.settings`,
`server.groups`. Must not import `server.node`.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from jsraft.meta import MetaStateMachine
from jsraft.replica.advisories import AdvisoryLog
from jsraft.runtime import NodeRuntime
from jsraft.server.groups.router import Local
from jsraft.server.groups.stream_lookup import CallMeta, CallPeer, CallStream, LocalStreams
from jsraft.server.settings.config import NodeConfig


@attrs.frozen(kw_only=True)
class ApiParts:
    local: LocalStreams  # this node's name, meta state and open stream replicas
    config: NodeConfig
    call_meta: CallMeta
    call_stream: CallStream
    call_peer: CallPeer  # `Rpc.call`: one named peer
    handle: Local  # `Handlers.handle`: a method served on this node, (from_node, method, args, blobs)
    runtime: NodeRuntime
    online: Callable[[], set[str]]  # this node and every connected peer
    raft_heard_ns: dict[str, dict[str, int]]  # group -> peer -> monotonic ns last heard (stream info `active`)
    meta_ready: Callable[[], bool]  # `MetaService.ready`
    advisories: AdvisoryLog
    flush_routes: Callable[[], None]  # invariant 2
    peer_interest: Callable[[str], bool]  # whether a peer's client subscription matches a subject (invariant 2)

    @property
    def name(self) -> str:
        return self.local.name

    @property
    def meta(self) -> MetaStateMachine:
        return self.local.meta

    @property
    def tick_s(self) -> float:
        return self.config.tick_ms / 1000

    def stream_for_subject(self, subject: str) -> str:
        """The stream that takes a publish on `subject`, in O(tokens) (`stream_lookup` invariant 3)."""
        return self.local.stream_for_subject(subject)
