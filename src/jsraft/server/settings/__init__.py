"""Server settings (layer L5): what a node is started with, read and checked before anything runs.

Modules: `config` (`NodeConfig`, the one value a node is built from), `config_file` (a config file into
`NodeConfig` fields), `nats_conf` (the nats-server config syntax), `nats_conf_map` (its keys onto
`NodeConfig`), `auth_config` (security settings as values: users, permissions, TLS files), `identity`
(`<store_dir>/node.json`: node name, cluster name, storage UUID).

Imports: L0–L4, and from the server only `jsraft.server.errors`; never another server subpackage.
"""
