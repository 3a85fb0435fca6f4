"""jsraft: a JetStream-compatible, Raft-replicated message store that never loses an acknowledged message.

The public API is re-exported here as the layers that provide it land.
"""

__version__ = "0.1.0.dev0"
