"""The part of a `StreamConfig` a message store enforces, as a `StoreConfig` (layer L3).

Owns: one mapping, used when a stream is opened and when a CONFIG entry is applied, so every replica
derives the same store limits from the same config bytes.

Invariants:
  1. Fields the stream config does not decide (the store's name, its `block_size`) are kept from the
     store's current config: a config update never changes where or how bytes are laid out.
  2. `s2` compression is served as zstd (jsapi `StreamCompression`), so it maps to `zstd`.

Imports: L1 (`jsapi`), L2 (`store`), attrs.
"""

from __future__ import annotations

import attrs

from jsraft.jsapi.stream_config import StreamCompression, StreamConfig
from jsraft.store.base import Compression, Discard, StoreConfig


def store_config_for(config: StreamConfig, current: StoreConfig | None = None) -> StoreConfig:
    base = current if current is not None else StoreConfig(name=config.name)
    compression = Compression.none if config.compression is StreamCompression.none else Compression.zstd
    return attrs.evolve(
        base,
        max_msgs=config.max_msgs,
        max_bytes=config.max_bytes,
        max_msgs_per_subject=config.max_msgs_per_subject,
        max_msg_size=config.max_msg_size,
        discard=Discard(str(config.discard)),
        discard_new_per_subject=config.discard_new_per_subject,
        compression=compression,
    )
