"""The NATS face of a node (layer L5): the client port, its connections and subscriptions, and the routes
that carry client messages between nodes.

Modules: `client_server` (`ClientServer`: the listener, the sublist, internal subscriptions — the port
the rest of the server uses), `client_accept`, `client_conn`, `client_out`, `client_auth`, `client_subs`,
`client_stats` (one client connection: handshake, protocol, outbound buffer, security, subscriptions,
counters), `client_deliver` (the node's deliveries shown on another subject, a batch at once),
`ack_shortcut` (JetStream acks straight to the consumer hub while nothing else listens), `auth`
(who may connect), `credentials` (what the authenticators share), `jwt_auth` / `jwt_claims` (operator
mode: user JWTs), `permissions` (what a connection may publish and subscribe), `tls`, `sublist` (subject interest),
`routes` / `route_interest` / `route_wire` (interest and messages between nodes), `route_gossip` (a
core-NATS mesh grown from seed routes), `cluster_urls` (INFO's `connect_urls`).

Imports: L0–L4, trio, `jsraft.server.settings`, `jsraft.server.errors`. Never the JetStream API (`api`),
the groups (`groups`) or operations (`ops`): the NATS face knows nothing of JetStream.
"""
