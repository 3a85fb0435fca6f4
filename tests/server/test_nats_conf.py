"""nats-server's configuration file format read by `NodeConfig.from_file` (`nats_conf`, `nats_conf_map`).

Method: config files written to tmp_path in nats-server's syntax (every separator, comments, includes,
variables, sizes, durations) and decoded into `NodeConfig`s whose fields are compared with what the
file said; unsupported keys must show up as warnings (caplog), unsafe ones as `InvalidConfig` naming
the key. The format chooser must keep JSON and TOML files with `NodeConfig`'s names working.
"""

from __future__ import annotations

import logging

import attrs
import pytest

from jsraft.errors import InvalidConfig
from jsraft.jsapi.account_limits import AccountLimits
from jsraft.server import NodeConfig
from jsraft.server.settings.config_file import config_format
from jsraft.server.settings.nats_conf import parse_nats_conf

FULL = """
# a nats-server style file
server_name: n1
listen: 127.0.0.1:4333   // trailing comment
http_port = 8333
max_payload 2MB
ping_interval: "30s"
jetstream {
  store_dir: "{dir}"
  max_file_store: 1GB
}
SECRET = "route-secret-value"
cluster {
  name: "east"
  listen: "127.0.0.1:6333"
  routes = [
    nats://n2@127.0.0.1:6334
    "n3=nats://127.0.0.1:6335"
  ]
  authorization { user: route, password: $SECRET }
}
authorization {
  users = [
    {user: admin, password: "admin-pw"}
    {user: reader, password: "$2a$04$abcdefghijklmnopqrstuu5wM1rB7Ad1cGJ8uyo4I6VIlpbu8NMV2",
     permissions: {publish: ["$JS.API.STREAM.INFO.*"], subscribe: {allow: "_INBOX.>", deny: ["secret.>"]},
                   allow_responses: {max: 2, expires: "1m"}}}
  ]
  timeout: 1.5
}
tls {
  cert_file: "./server-cert.pem"
  key_file: "./server-key.pem"
  ca_file: "./ca.pem"
  verify: true
  handshake_first: true
  timeout: 3
}
include "extra.conf"
debug: true
"""


def write(tmp_path, text: str, name: str = "server.conf"):
    path = tmp_path / name
    path.write_text(text.replace("{dir}", str(tmp_path / "data")))
    return str(path)


def test_a_full_nats_server_file(tmp_path, caplog):
    (tmp_path / "extra.conf").write_text("write_deadline: 5s\nlame_duck_duration: \"30s\"\nlame_duck_grace_period: 2.5\n")
    with caplog.at_level(logging.WARNING, logger="jsraft.config"):
        config = NodeConfig.from_file(write(tmp_path, FULL))
    assert (config.name, config.client_host, config.client_port, config.monitor_port) == ("n1", "127.0.0.1", 4333, 8333)
    assert config.store_dir == str(tmp_path / "data") and config.max_payload == 2 << 20
    assert config.client_ping_interval_ms == 30_000 and config.client_write_deadline_ms == 5000
    assert (config.lame_duck_duration_ms, config.lame_duck_grace_period_ms) == (30_000, 2_500)
    assert (config.cluster_name, config.cluster_host, config.cluster_port) == ("east", "127.0.0.1", 6333)
    assert config.peers == {"n2": "127.0.0.1:6334", "n3": "127.0.0.1:6335"}
    assert config.cluster_secret == "route:route-secret-value"
    auth = config.client_auth
    assert [user.user for user in auth.users] == ["admin", "reader"] and auth.timeout_ms == 1500
    reader = auth.users[1].permissions
    assert reader.publish.allow == ("$JS.API.STREAM.INFO.*",) and reader.subscribe.deny == ("secret.>",)
    assert reader.subscribe.allow == ("_INBOX.>",)
    assert (reader.allow_responses.max, reader.allow_responses.expires_ms) == (2, 60_000)
    tls = config.client_tls
    assert (tls.cert_file, tls.verify, tls.handshake_first, tls.timeout_ms) == ("./server-cert.pem", True, True, 3000)
    warnings = " ".join(record.getMessage() for record in caplog.records)
    assert "jetstream.max_file_store is not supported" in warnings and "debug is not supported" in warnings
    assert "route-secret-value" not in repr(config) and "admin-pw" not in repr(config)


@pytest.mark.parametrize("text, message", [
    ("authorization { user: a, password: b, colour: red }", "authorization: unsupported key(s) colour"),
    ("tls { cert_file: a, key_file: b, verify_and_map: true }", "tls: unsupported key(s) verify_and_map"),
    ("authorization { users: [ {user: a, password: b, permissions: {publsh: x}} ] }", "publsh"),
    ("operator: ./no-such-op.jwt\nresolver: MEMORY", "cannot read operator JWT file './no-such-op.jwt'"),
    ("trusted_keys: [ODWIIE]\nresolver: MEMORY", "trusted key 'ODWIIE' is not an operator public key"),
    ("system_account: AAAA", "system_account is not supported by jsraft"),
    ("resolver: MEMORY", "an account resolver needs an operator"),
    ("accounts { a { users: [{user: x}], jetstream: enabled }, b { users: [{user: y}], jetstream: {} } }",
     "JetStream in more than one account (a, b)"),
    ("cluster { routes: [ nats://127.0.0.1:6222 ] }", "must name its node"),
    ("port: $NOT_DEFINED_ANYWHERE_XYZ", "variable $NOT_DEFINED_ANYWHERE_XYZ is not defined"),
    ("cluster { name: x", "not closed"),
    ("https_port: 8443", "https_port needs a tls"),
    ("lame_duck_duration: 5s\nlame_duck_grace_period: 5s", "lame duck grace period (5000 ms) should be strictly "
     "lower than lame duck duration (5000 ms)"),
    ("lame_duck_grace_period: \"3m\"", "lame duck grace period (180000 ms) should be strictly lower"),
    ("lame_duck_duration: soon", "lame_duck_duration: 'soon' is not a duration"),
])
def test_unsafe_or_malformed_files_are_refused(tmp_path, text, message):
    with pytest.raises(InvalidConfig, match=".*") as raised:
        NodeConfig.from_file(write(tmp_path, text + "\n"), {"name": "n1", "store_dir": str(tmp_path / "d")})
    assert message in str(raised.value)


def test_syntax_details():
    conf = parse_nats_conf("a = 1; b: $a\nc { d 64MB, e: [1, 'x' # c\n y], f 1k }\nlisten: 127.0.0.1:4222\n"
                           "g: yes\nh = 2.5\nblock\n{\n k: v\n}\n", "x.conf")
    assert conf == {"a": 1, "b": 1, "c": {"d": 64 << 20, "e": [1, "x", "y"], "f": 1000},
                    "listen": "127.0.0.1:4222", "g": True, "h": 2.5, "block": {"k": "v"}}


def test_include_cycles_are_bounded(tmp_path):
    (tmp_path / "loop.conf").write_text("include loop.conf\n")
    with pytest.raises(InvalidConfig, match="nest deeper"):
        parse_nats_conf("include loop.conf\n", str(tmp_path / "main.conf"))


@pytest.mark.parametrize("name, text, fmt", [
    ("n.json", "{}", "json"), ("n.toml", "port = 1", "toml"), ("n.conf", '{"name": "a"}', "json"),
    ("n.conf", 'name = "a"\nclient_port = 1\n', "toml"), ("n.conf", "port = 4222\n", "nats"),
    ("n", "port: 4222\n", "nats"), ("n.cfg", "cluster { name: x }\n", "nats"),
])
def test_the_format_is_told_apart(name, text, fmt):
    assert config_format(name, text, ["name", "client_port"]) == fmt


@pytest.mark.parametrize("accounts, expected", [
    # the only account is the main one (JetStream's); with several, the one with jetstream enabled
    ("A { users: [{user: a, password: p}] }", {"a": None}),
    ("A { users: [{user: a, password: p}] }, B { users: [{user: b, password: p}], jetstream: enabled }",
     {"a": "A", "b": None}),
    # several and none with JetStream: every account isolated, JetStream serves none of them
    ("A { users: [{user: a, password: p}] }, B { users: [{user: b, password: p}] }", {"a": "A", "b": "B"}),
])
def test_accounts_tag_their_users(tmp_path, accounts, expected):
    config = NodeConfig.from_file(write(tmp_path, f"accounts {{ {accounts} }}\n"),
                                  {"name": "n1", "store_dir": str(tmp_path / "d")})
    assert {user.user: user.account for user in config.client_auth.users} == expected


def test_jetstream_domain_and_the_account_limits(tmp_path):
    text = """
jetstream { domain: "hub" }
accounts {
  A {
    users: [{user: a}]
    jetstream { mem: 64MB, max_file: 1GB, streams: 10, consumers: 20, max_ack_pending: 100,
                mem_max_stream_bytes: 2048, disk_max_stream_bytes: 4k, max_stream_bytes: true }
  }
  B { users: [{user: b}] }
}
"""
    config = NodeConfig.from_file(write(tmp_path, text), {"name": "n1", "store_dir": str(tmp_path / "d")})
    assert config.jetstream_domain == "hub"
    assert attrs.asdict(config.account_limits) == {
        "max_memory": 64 << 20, "max_storage": 1 << 30, "max_streams": 10, "max_consumers": 20,
        "max_ack_pending": 100, "memory_max_stream_bytes": 2048, "storage_max_stream_bytes": 4000,
        "max_bytes_required": True}
    bare = NodeConfig.from_file(write(tmp_path, "accounts { A { users: [{user: a}], jetstream: enabled } }\n"),
                                {"name": "n1", "store_dir": str(tmp_path / "d")})
    assert bare.jetstream_domain is None and bare.account_limits == AccountLimits()  # every limit -1


@pytest.mark.parametrize("text, message", [
    ("accounts { A { jetstream { max_mem: 1GB, max_flies: 3 } } }", "accounts.jetstream.max_flies: unknown"),
    ("accounts { A { jetstream { max_streams: lots } } }", "max_streams: expected a size or number"),
    ("accounts { A { jetstream { max_bytes_required: 1 } } }", "max_bytes_required: expected a boolean"),
    ("accounts { A { jetstream { max_streams: -5 } } }", "max_streams must be -1 (unlimited) or a number >= 0"),
    ('jetstream { domain: "a.b" }', "jetstream_domain must be one subject token"),
])
def test_bad_account_limits_or_domain_are_refused(tmp_path, text, message):
    with pytest.raises(InvalidConfig) as raised:
        NodeConfig.from_file(write(tmp_path, text + "\n"), {"name": "n1", "store_dir": str(tmp_path / "d")})
    assert message in str(raised.value)
