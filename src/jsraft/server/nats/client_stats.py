"""`ClientStats`: the client port's counters since the node started (layer L5).

Owns: the counts `/varz` (`monitor_views`) and `/metrics` (`metrics`) report: connections accepted,
messages and bytes in (client publishes) and out (deliveries to clients; bytes are headers and payload,
as nats-server counts them), slow consumers and stale connections closed, authentication and TLS
handshake failures, protocol errors, internal messages dropped. `ClientConn` and `ClientServer` increment them; nothing else writes them.

Imports: attrs.
"""

from __future__ import annotations

import attrs


@attrs.define
class ClientStats:
    connections: int = 0
    in_msgs: int = 0
    in_bytes: int = 0
    out_msgs: int = 0
    out_bytes: int = 0
    slow_consumers: int = 0
    stale_connections: int = 0
    auth_failures: int = 0
    tls_failures: int = 0
    protocol_errors: int = 0
    internal_dropped: int = 0
