"""The server (layer L5): one jsraft node — identity, transport, runtime, the meta group, stream groups
and the embedded JetStream API.

Modules: `node` (`Node`, `open_node`: one node, built from its parts), `thread_node` (a node on a
thread of its own, for synchronous callers), `errors` (the server's errors). Subpackages, by what they do:
`settings` (what a node is started with), `nats` (the NATS face: client port, connections, sublist,
routes), `api` (the JetStream API: handlers, codecs, request and response shapes, `JetStreamContext`),
`groups` (the meta and stream groups on a node, their consumers, repair, audit, expiry, and the `$rpc`
request layer), `ops` (monitoring HTTP, metrics, readiness, test hooks). The trio-free replica logic
(stream and meta adapters, consumer replica, publish pipeline, advisories) is in `jsraft.replica`.

Imports: L0–L4, trio (DESIGN.md §1).
"""

from typing import TYPE_CHECKING

from jsraft.server.settings.config import NodeConfig
from jsraft.server.errors import IdentityMismatch, NoLeader, RemoteError, RpcRefused, RpcTimeout, ServerError
from jsraft.server.node import Node, open_node

if TYPE_CHECKING:
    from jsraft.server.api.jetstream import JetStreamContext, PubAck, RawStreamMsg, StreamInfo

# The in-process API (and through it the client package) is imported on first use: `jsraft serve` has no
# use for it (PEP 562 module `__getattr__`; tests/cli/test_lazy_commands.py).
_LAZY = {"JetStreamContext", "PubAck", "RawStreamMsg", "StreamInfo"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from jsraft.server.api import jetstream

        return getattr(jetstream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "IdentityMismatch", "JetStreamContext", "Node", "NodeConfig", "NoLeader", "PubAck", "RawStreamMsg",
    "RemoteError", "RpcRefused", "RpcTimeout", "ServerError", "StreamInfo", "open_node",
]
