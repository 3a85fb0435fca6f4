"""The Raft groups a node runs (layer L5): the meta group, stream groups with their consumers, repair,
audit and expiry, and the request layer between nodes.

Modules: `meta_service` / `meta_members` (the meta group), `first_election` (a new group's first leader),
`streams` (`StreamManager`: the stream replicas this node runs), `stream_replica` (one stream group),
`stream_format` (a new replica's directory, formatted whole with one fsync per file and directory),
`replica_descriptors` (the file descriptors a replica holds, the headroom a create needs, and running out),
`memory_stream` (a `storage: memory` replica's store, and when its lost messages are lost for good),
`stream_options`, `stream_config_follow`, `stream_members`, `stream_audit`, `stream_expiry`,
`stream_repair` / `repair_serve` / `repair_build` (repair, both sides, and its replacement store),
`stream_handover` (whether a peer could lead in place of an unfit leader), `stream_republish` (a stream's
`republish` wired to this node's leadership and client port),
`stream_publish` / `publish_batch` (client publishes into streams), `consumer_service` (the consumers led
with their stream; their pull and push leading and events are trio-free, in `jsraft.replica`),
`consumer_proposals` (how a consumer pass proposes its ops and sends what they decided, and the info
barrier), `consumer_acks` (the acks a consumer pass turns into ops), `interest_waits` (the push
consumers led on this node waiting for a subscriber, which a new client subscription wakes), `handlers`
(what a request does), `rpc` (request/response over the transport),
`router` (to the leader), `stream_lookup` (a stream found on this node: `LocalStreams`,
`require_stream`, the stream a publish subject belongs to, the call signatures the services take instead
of `Node`), `consumer_errors` (the consumer errors the leader and the API raise),
`versioning` (API levels and offline assets: what this node cannot run, and why).

Imports: L0–L4 (and the deterministic replica core, `jsraft.replica`), trio, `jsraft.server.settings`,
`jsraft.server.errors`, the NATS face (`stream_publish` opens the client port; `stream_lookup` finds a
publish's stream with its subject trie, `nats.sublist`). Never `api` or `ops`.
"""
