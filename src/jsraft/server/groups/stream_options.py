"""`StreamOptions`: the node settings every stream replica of this node runs with (layer L5).

Owns: one value derived from `NodeConfig` once, at node start, and handed to each `StreamReplica`: how
often its Raft group snapshots and compacts, how often its leader audits, the store's block size, the
catch-up chunk budget, the repair retry bounds, and the API level the node runs at.

Invariants:
  1. A value of 0 in the config turns the periodic action off (`snapshot_every_entries`,
     `snapshot_every_msgs` or `snapshot_every_bytes` None, audits only when asked); each snapshot bound
     applies on its own (a snapshot is due when any one is reached); everything else was range-checked by `NodeConfig.validate` (config invariant 4).

Imports: L0 (`errors`), L1 (`jsapi`), L2 (`store.base`), L3 (`stream.catchup_wire`, `stream.store_config`), L3½
(`replica.snapshot_pace`), attrs, server siblings (`config`).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from jsraft import limits
from jsraft.errors import JsraftError
from jsraft.jsapi import API_LEVEL, StreamConfig
from jsraft.replica.snapshot_pace import SnapshotBound, SnapshotPace
from jsraft.server.settings.config import NodeConfig
from jsraft.store.base import StoreConfig
from jsraft.stream.catchup_wire import CHUNK_BYTES_DEFAULT
from jsraft.stream.store_config import store_config_for

AUDIT_REPORT_TIMEOUT_S = 2.0  # how long a leader waits for the replicas' reports of one AUDIT


@attrs.frozen(kw_only=True)
class StreamOptions:
    snapshot_every_entries: int | None = 4096
    # Also snapshot after this many messages or entry bytes applied (replica/snapshot_pace.py): a MSGS
    # entry holds up to 8,192 messages, and a restart replays everything since the last snapshot.
    snapshot_every_msgs: int | None = 32768
    snapshot_every_bytes: int | None = 64 << 20
    audit_interval_s: float = 5.0  # 0: audits only after recoveries, repairs and leader changes
    audit_report_timeout_s: float = AUDIT_REPORT_TIMEOUT_S
    block_bytes: int = limits.block_bytes_default
    catchup_chunk_bytes: int = CHUNK_BYTES_DEFAULT
    repair_backoff_min_s: float = 0.05
    repair_backoff_max_s: float = 2.0
    rpc_timeout_s: float = 5.0
    tick_s: float = 0.1
    api_level: int = API_LEVEL  # the node's JetStream API level: a consumer needing more stops its stream

    @classmethod
    def of(cls, config: NodeConfig) -> "StreamOptions":
        tick_s = config.tick_ms / 1000
        return cls(snapshot_every_entries=config.stream_snapshot_every_entries or None,
                   snapshot_every_msgs=config.stream_snapshot_every_msgs or None,
                   snapshot_every_bytes=config.stream_snapshot_every_bytes or None,
                   audit_interval_s=config.stream_audit_interval_ms / 1000,
                   audit_report_timeout_s=max(AUDIT_REPORT_TIMEOUT_S, 20 * tick_s),
                   block_bytes=config.stream_block_bytes,
                   catchup_chunk_bytes=config.stream_catchup_chunk_bytes,
                   repair_backoff_min_s=min(tick_s, config.stream_repair_backoff_max_ms / 1000),
                   repair_backoff_max_s=config.stream_repair_backoff_max_ms / 1000,
                   rpc_timeout_s=2.0 if config.test_mode else 5.0, tick_s=tick_s, api_level=config.api_level)


def snapshot_pace(options: StreamOptions, request: Callable[[], None]) -> SnapshotPace:
    """A replica's `SnapshotPace` at the options' messages/bytes bound; `request` is the runtime's
    `request_snapshot` for its group (a group not running yet or any more: asked again next entry)."""

    def due() -> bool:
        try:
            request()
        except JsraftError:
            return False
        return True

    return SnapshotPace(SnapshotBound(msgs=options.snapshot_every_msgs, bytes=options.snapshot_every_bytes), due)


def replica_store_config(config: StreamConfig, options: StreamOptions) -> StoreConfig:
    """The store config a replica of `config` opens its store with (its open and `stream_format` alike)."""
    return store_config_for(config, StoreConfig(name=config.name, block_size=options.block_bytes))
