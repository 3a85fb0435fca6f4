"""jsraft: a JetStream-compatible, Raft-replicated message store that never loses an acknowledged message.

The public API is re-exported here as the layers that provide it land.
"""

__version__ = "0.1.0.dev0"

# The server is imported on first use, not with the package: `import jsraft.store` (or the simulator)
# must not pull in trio and the whole node.
_SERVER_EXPORTS = ("JetStreamContext", "Node", "NodeConfig", "PubAck", "StreamInfo", "open_node")
# `start_in_thread` runs a node on a thread of its own, for asyncio and synchronous programs.
_THREAD_EXPORTS = ("ThreadNode", "start_in_thread")

__all__ = ["__version__", *_SERVER_EXPORTS, *_THREAD_EXPORTS]


def __getattr__(name: str) -> object:
    if name in _SERVER_EXPORTS:
        from jsraft import server

        return getattr(server, name)
    if name in _THREAD_EXPORTS:
        from jsraft.server import thread_node

        return getattr(thread_node, name)
    if name == "client":  # `jsraft.client.connect(...)` after a bare `import jsraft`
        import jsraft.client

        return jsraft.client
    raise AttributeError(f"module 'jsraft' has no attribute {name!r}")
