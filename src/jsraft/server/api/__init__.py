"""The JetStream API of a node (layer L5): `$JS.API.*` and jsraft's own API subjects, their codecs,
request and response shapes, and the embedded `JetStreamContext`.

Modules: `jsapi_handlers` (`JsApi`: the API subjects on the client port), `api_parts` (`ApiParts`: what
the endpoints use of the node, wired once by `server.node`), `jsapi_codec` (JSON shapes and error bodies),
`jsapi_account` (the account info, its limits and domain), `jsapi_stream`, `jsapi_consumer`, `jsapi_data`,
`jsapi_direct`, `jsapi_snapshot` (the endpoints), `direct_batch`, `bulk_get`, `snapshot_format`, `snapshot_leader` (batched reads, bulk reads,
snapshots and restores), `consumer_admin`, `consumer_control`, `consumer_hub` (the consumer API), `group_ops` (the operator's view of a stream's Raft group), `jetstream` /
`jetstream_pull` (`JetStreamContext`: the in-process API), `header_block` (NATS header blocks, apart from
`jetstream` so the handlers do not import the client package).

Imports: L0–L4, trio, `jsraft.server.groups`, `jsraft.server.settings`, `jsraft.server.errors`; of the
NATS face only its port, `jsraft.server.nats.client_server` — never its internals. Never `ops`.
"""
