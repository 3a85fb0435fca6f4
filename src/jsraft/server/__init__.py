"""The server (layer L5): one jsraft node — identity, transport, runtime, the meta group, stream groups
and the embedded JetStream API.

Modules: `config` (`NodeConfig`), `identity` (`node.json`), `errors`, `rpc` (request/response over the
transport), `router` (to the leader), `handlers` (what a request does), `meta_adapter` / `meta_service`
(the meta group), `stream_adapter` / `stream_replica` / `streams` (stream groups), `node` (`Node`,
`open_node`), `jetstream` (`JetStreamContext`), `client_server` / `client_conn` / `sublist` (the NATS
client port), `stream_publish` (client publishes on stream subjects, answered with PubAcks).

Imports: L0–L4, trio (DESIGN.md §1).
"""

from jsraft.server.config import NodeConfig
from jsraft.server.errors import IdentityMismatch, NoLeader, RemoteError, RpcRefused, RpcTimeout, ServerError
from jsraft.server.jetstream import JetStreamContext, PubAck, RawStreamMsg, StreamInfo
from jsraft.server.node import Node, open_node

__all__ = [
    "IdentityMismatch", "JetStreamContext", "Node", "NodeConfig", "NoLeader", "PubAck", "RawStreamMsg",
    "RemoteError", "RpcRefused", "RpcTimeout", "ServerError", "StreamInfo", "open_node",
]
