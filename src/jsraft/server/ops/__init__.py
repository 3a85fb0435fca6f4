"""Operations (layer L5): what an operator and a harness see of a node.

Modules: `monitor` (the monitoring HTTP port: `/varz`, `/healthz`, `/jsz`, ...), `monitor_views` (its
JSON views), `monitor_parts` (what those read of the node, wired in `node`: never the `Node` itself),
`metrics` (Prometheus), `readiness` (the one definition of "ready"), `lame_duck` (a graceful leave before
a stop: SIGUSR2), `test_hooks` (fault injection for the chaos harness, off unless enabled).

Imports: L0–L4, trio, prometheus_client, and any other server subpackage's public modules: operations
sit on top of the server, and nothing in the server imports them but `node`.
"""
