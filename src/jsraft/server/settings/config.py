"""`NodeConfig`: what one node is told at start — its name, where its data lives, whom it talks to (layer L5).

Owns: the node's settings, strict decoding from JSON-shaped data (`NodeConfig.from_dict`, an unknown field
is an error naming it), reading a JSON or TOML file (`NodeConfig.from_file`, in `config_file`), and
`validate()` for the cross-field rules.

Invariants (checked by `validate()`):
  1. `name` and `cluster_name` are non-empty and fit the transport handshake; `name` is not among `peers`.
  2. Every peer and seed route address is `host:port` with a port in 1..65535; `cluster_port`/`client_port` and a set
     `monitor_port` are 0..65535 (0: pick an ephemeral port, for tests).
  3. `election_ticks >= 3`: a heartbeat every tick must fit several times in an election timeout, or
     one late tick deposes a healthy leader.
  4. The stream and meta settings are in range: intervals >= 0 (0 turns the periodic action off), a block
     size the store accepts, a catch-up chunk within the wire's bound.
  5. The client settings are in range: `max_payload` within `limits.payload_bytes_max`, a pending bound
     that holds at least one message, positive intervals and counts.
  6. Security settings (`auth_config`) are valid; a secret (`cluster_secret`, `monitor_token`, passwords,
     tokens) never appears in the config's `repr` and is at least `SECRET_CHARS_MIN` long where it guards
     a port (cluster secret, monitor token).
  7. The JetStream account's limits are -1 (unlimited) or >= 0, and a `jetstream_domain` is one subject
     token (it becomes the `$JS.<domain>.API.` prefix).

Imports: L0 (`errors`, `limits`), L1 (`codec`, `jsapi`), L3 (`stream.catchup_wire` bounds, `meta`'s snapshot
interval), attrs, `config_file`.
Reference: DESIGN.md §10 (CLI flags map onto these fields); hashicorp/raft `Config.validate`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from jsraft import limits
from jsraft.codec import structure
from jsraft.errors import InvalidConfig
from jsraft.jsapi import API_LEVEL
from jsraft.jsapi.account_limits import AccountLimits
from jsraft.meta import META_SNAPSHOT_ENTRIES
from jsraft.server.settings.auth_config import ClientAuthConfig, TlsConfig
from jsraft.server.settings.config_file import load_config_file, merge_overrides
from jsraft.stream.catchup_wire import CHUNK_BYTES_DEFAULT, CHUNK_BYTES_MAX

_NAME_BYTES_MAX = 255  # the transport handshake's str8
SECRET_CHARS_MIN = 8


def parse_address(text: str, where: str) -> tuple[str, int]:
    """`"host:port"` -> `(host, port)`; raise `InvalidConfig` naming `where` otherwise."""
    host, sep, port_text = str(text).rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise InvalidConfig(f"node config: {where}: {text!r} is not host:port")
    return host, int(port_text)


@attrs.frozen(kw_only=True)
class NodeConfig:
    name: str
    store_dir: str
    cluster_name: str = "jsraft"
    cluster_host: str = "127.0.0.1"
    cluster_port: int = 6222
    # Whether to open the cluster listener: None listens only when the node has peers (a standalone node,
    # like a nats-server without `cluster {}`, opens no cluster port, so two can share a machine); True
    # always (a node peers will be added to); False never, which a node with peers cannot be.
    cluster_listen: bool | None = None
    # The NATS client listener (`server.client_server`); port 0 picks a free port (`Node.client_port`).
    client_host: str = "127.0.0.1"
    client_port: int = 4222
    # What INFO advertises as `max_payload` (headers included), and how a client is policed: outbound bytes
    # queued before it is a slow consumer, PING interval and unanswered PINGs before it is stale, and how
    # long one write may take (nats-server: max_payload, max_pending, ping_interval, ping_max, write_deadline).
    max_payload: int = limits.payload_bytes_default
    client_pending_bytes_max: int = limits.client_pending_bytes_default
    client_ping_interval_ms: int = 120_000
    client_pings_out_max: int = 2
    client_write_deadline_ms: int = 10_000
    # Lame duck mode (SIGUSR2, `server.ops.lame_duck`): how long the node takes to close its clients, and
    # how long it waits after telling them before it starts (nats-server: lame_duck_duration, 2 min, and
    # lame_duck_grace_period, 10 s; the grace period must be shorter).
    lame_duck_duration_ms: int = 120_000
    lame_duck_grace_period_ms: int = 10_000
    # `jsraft serve` writes its process id there (nats-server's `pid_file`, `-P`); None: nowhere.
    pid_file: str | None = None
    # The monitoring HTTP listener (`server.ops.monitor`), started by `jsraft serve`; None: no monitor.
    monitor_host: str = "127.0.0.1"
    monitor_port: int | None = None
    # Every other node of the cluster: name -> "host:port" of its cluster listener. Empty: a single node.
    peers: dict[str, str] = attrs.field(factory=dict)
    # Seed routes: cluster listeners ("host:port") known only by address — nats-server's bare `--routes`.
    # The node dials them, learns who is there and the rest of the cluster by route gossip
    # (`server.nats.route_gossip`), and routes core NATS across that mesh; no Raft group grows from it,
    # so it is for nodes without named peers (a JetStream cluster names its voters in `peers`).
    seed_routes: list[str] = attrs.field(factory=list)
    tick_ms: int = 100
    election_ticks: int = 10
    # Shorter transport timeouts and eager reconnects for in-process test clusters.
    test_mode: bool = False
    # The chaos test hooks under `/test/` on the monitor (`server.test_hooks`) and a wall clock that can be
    # skewed at run time (`runtime.SkewableClock`). Off by default; never for production.
    test_hooks: bool = False
    # Stream groups (DESIGN §6, §8): a Raft snapshot and WAL compaction every this many applied entries,
    # and also once this many messages or entry bytes applied since the last one (each 0: no such bound;
    # all three 0: only when asked) — what a restart replays; an AUDIT entry every this many ms (0: only after recoveries and repairs); the
    # message store's block size; one catch-up chunk's byte budget; the longest wait between repair tries.
    stream_snapshot_every_entries: int = 4096
    stream_snapshot_every_msgs: int = 32768
    stream_snapshot_every_bytes: int = 64 << 20
    stream_audit_interval_ms: int = 5000
    stream_block_bytes: int = limits.block_bytes_default
    stream_catchup_chunk_bytes: int = CHUNK_BYTES_DEFAULT
    stream_repair_backoff_max_ms: int = 2000
    # The meta group: a snapshot and WAL compaction every this many applied entries (0: only when asked).
    meta_snapshot_every_entries: int = META_SNAPSHOT_ENTRIES
    # The JetStream API level this node runs at (ADR-44): the build's `API_LEVEL` unless lowered, which
    # makes the node behave as an older server would — assets needing more are loaded offline. For tests
    # and for rehearsing a downgrade; never above the build's level.
    api_level: int = API_LEVEL
    # JetStream's domain (nats-server `jetstream { domain }`): served in `$JS.API.INFO` and stream info, and
    # `$JS.<domain>.API.>` reaches the API as `$JS.API.>` does. None: no domain.
    jetstream_domain: str | None = None
    # The JetStream account's limits (`accounts { A { jetstream { max_mem … } } }`); the default: unlimited.
    account_limits: AccountLimits = attrs.field(factory=AccountLimits)
    # Security (`auth_config`; invariant 6). Client port: who may connect and do what, and TLS. Cluster
    # links: a shared secret every node proves in the handshake (a challenge-response HMAC; the secret
    # never crosses the wire), and/or mutual TLS. Monitor: a bearer token for every endpoint, and TLS.
    client_auth: ClientAuthConfig | None = None
    client_tls: TlsConfig | None = None
    cluster_secret: str | None = attrs.field(default=None, repr=False)
    cluster_tls: TlsConfig | None = None
    monitor_token: str | None = attrs.field(default=None, repr=False)
    monitor_tls: TlsConfig | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NodeConfig":
        data = dict(data)
        if "routes" in data:  # nats-server's spelling of the peer list
            if "peers" in data:
                raise InvalidConfig("node config: give either routes or peers, not both")
            data["peers"] = data.pop("routes")
        config = structure(data, cls, where="node config")
        config.validate()
        return config

    @classmethod
    def from_file(cls, path: str, overrides: dict[str, Any] | None = None,
                  defaults: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> "NodeConfig":
        """Read a JSON or TOML config file, apply `overrides` (command-line flags) on top, then `defaults`
        (fills what neither gave, e.g. `jsraft serve`'s store directory and name), decode strictly."""
        names = [field.name for field in attrs.fields(cls)]
        data = merge_overrides(load_config_file(path, names), overrides or {})
        return cls.from_dict(defaults(data) if defaults is not None else data)

    @property
    def routes(self) -> dict[str, str]:
        return self.peers

    @property
    def clustered(self) -> bool:
        return bool(self.peers)

    @property
    def listens_for_cluster(self) -> bool:
        wanted = self.clustered or bool(self.seed_routes)
        return wanted if self.cluster_listen is None else self.cluster_listen

    def seed_addresses(self) -> list[tuple[str, int]]:
        return [parse_address(seed, "seed_routes") for seed in self.seed_routes]

    def peer_addresses(self) -> dict[str, tuple[str, int]]:
        return {name: parse_address(address, f"peers.{name}") for name, address in sorted(self.peers.items())}

    def voters(self) -> tuple[str, ...]:
        return tuple(sorted({self.name, *self.peers}))

    def validate(self) -> "NodeConfig":
        for field in ("name", "cluster_name"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value or len(value.encode()) > _NAME_BYTES_MAX \
                    or any(c.isspace() or c in "/\\" for c in value):
                raise InvalidConfig(f"node config: {field} must be 1..{_NAME_BYTES_MAX} bytes without "
                                    "whitespace or path separators")
        if not self.store_dir:
            raise InvalidConfig("node config: store_dir is required")
        if self.name in self.peers:
            raise InvalidConfig(f"node config: peers must not list this node ({self.name!r})")
        if self.cluster_listen is False and (self.peers or self.seed_routes):
            raise InvalidConfig("node config: a node with peers needs its cluster listener (cluster_listen)")
        if self.peers and self.seed_routes:
            raise InvalidConfig("node config: give peers by name or seed_routes by address, not both (a "
                                "named cluster's Raft voters do not grow by route gossip)")
        self.seed_addresses()  # invariant 2: raises on a malformed address
        for port_field in ("cluster_port", "client_port", "monitor_port"):
            port = getattr(self, port_field)
            if port is not None and not 0 <= port <= 65535:
                raise InvalidConfig(f"node config: {port_field} must be 0..65535")
        self.peer_addresses()  # invariant 2: raises on a malformed address
        if self.tick_ms < 1:
            raise InvalidConfig("node config: tick_ms must be at least 1")
        if self.election_ticks < 3:
            raise InvalidConfig("node config: election_ticks must be at least 3")
        self.account_limits.validate()
        self._validate_stream_fields()
        self._validate_client_fields()
        self._validate_security_fields()
        return self

    def _validate_security_fields(self) -> None:
        if self.client_auth is not None:
            self.client_auth.validate()
        for field in ("client_tls", "cluster_tls", "monitor_tls"):
            tls = getattr(self, field)
            if tls is not None:
                tls.validate(f"node config: {field}")
        if self.cluster_tls is not None and not self.cluster_tls.ca_file:
            raise InvalidConfig("node config: cluster_tls needs a ca_file (cluster links verify each other)")
        for field in ("cluster_secret", "monitor_token"):
            value = getattr(self, field)
            if value is not None and len(value) < SECRET_CHARS_MIN:
                raise InvalidConfig(f"node config: {field} must be at least {SECRET_CHARS_MIN} characters")

    def _validate_stream_fields(self) -> None:
        if min(self.stream_snapshot_every_entries, self.stream_snapshot_every_msgs,
               self.stream_snapshot_every_bytes, self.stream_audit_interval_ms) < 0:
            raise InvalidConfig("node config: stream_snapshot_every_entries, stream_snapshot_every_msgs, "
                                "stream_snapshot_every_bytes and stream_audit_interval_ms must be at least 0")
        if self.meta_snapshot_every_entries < 0:
            raise InvalidConfig("node config: meta_snapshot_every_entries must be at least 0")
        if self.jetstream_domain is not None and (not self.jetstream_domain or any(
                c.isspace() or c in ".*>" for c in self.jetstream_domain)):
            raise InvalidConfig("node config: jetstream_domain must be one subject token (no '.', '*', '>')")
        if not 0 <= self.api_level <= API_LEVEL:
            raise InvalidConfig(f"node config: api_level must be 0..{API_LEVEL} (this build's level)")
        if not limits.block_bytes_min <= self.stream_block_bytes <= limits.block_bytes_max:
            raise InvalidConfig(f"node config: stream_block_bytes must be {limits.block_bytes_min}.."
                                f"{limits.block_bytes_max}")
        if not 1 <= self.stream_catchup_chunk_bytes <= CHUNK_BYTES_MAX:
            raise InvalidConfig(f"node config: stream_catchup_chunk_bytes must be 1..{CHUNK_BYTES_MAX}")
        if self.stream_repair_backoff_max_ms < 1:
            raise InvalidConfig("node config: stream_repair_backoff_max_ms must be at least 1")

    def _validate_client_fields(self) -> None:
        if not 1 <= self.max_payload <= limits.payload_bytes_max:
            raise InvalidConfig(f"node config: max_payload must be 1..{limits.payload_bytes_max}")
        if self.client_pending_bytes_max < self.max_payload:
            raise InvalidConfig("node config: client_pending_bytes_max must be at least max_payload")
        if min(self.client_ping_interval_ms, self.client_pings_out_max, self.client_write_deadline_ms) < 1:
            raise InvalidConfig("node config: client_ping_interval_ms, client_pings_out_max and "
                                "client_write_deadline_ms must be at least 1")
        if self.lame_duck_grace_period_ms < 0 or self.lame_duck_duration_ms <= self.lame_duck_grace_period_ms:
            raise InvalidConfig(f"node config: lame duck grace period ({self.lame_duck_grace_period_ms} ms) should be "
                                f"strictly lower than lame duck duration ({self.lame_duck_duration_ms} ms)")
