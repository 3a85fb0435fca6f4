"""The JetStream API level this build implements, and the `_nats.*` metadata that carries it (ADR-44).

Owns: `API_LEVEL`, the metadata keys, the level a stream config requires, and the metadata a response
serves. It lives in `jsapi` (L1) because `meta`, `stream` and `consumer` (L3 siblings) all need it.

Stamping, as nats-server 2.11+ does it:
  1. On create/update the meta leader computes the level the config's features need
     (`stream_required_level`) and records it in the assignment (`required_level`), which is what a
     node compares with its own `API_LEVEL` when it loads the asset. The stored config stays the raw
     JSON bytes the client sent: the stamp is *not* written into them.
  2. A response serving a config adds `_nats.req.level` (the recorded level) and the dynamic
     `_nats.ver` / `_nats.level` (this node's version and level) to its `metadata`
     (`served_metadata`). Dynamic keys are never stored.
  3. A client-sent `_nats.*` key is ignored and overwritten: only the server decides levels, so a
     config copied from an INFO response and sent back compares equal to the stored one
     (`without_dynamic_metadata`).
  4. A stream *list* (`STREAM.LIST`) serves the stored config as nats-server stores it: `_nats.req.level`
     but neither dynamic key (`listed_metadata`); create, update and info serve all three.

Invariants:
  1. `API_LEVEL` only grows between releases; a config whose required level is above it is loaded
     offline (DESIGN §9), never half-started.

Imports: L1 (`jsapi.stream_config`), attrs. Reference: ADR-44 (versioning for JetStream assets),
nats-server `server/jetstream_versioning.go` (setStaticStreamMetadata, JSApiLevel).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from jsraft.jsapi.stream_config import StreamConfig

# nats-server 2.11 reports level 1 (per-message TTL, subject delete markers, consumer pause, priority
# groups), 2.12 reports 2 (counters, atomic batches, schedules, async persist). jsraft's StreamConfig
# has none of those fields yet, so the honest level is 0: a client that sees 0 will not try them. Raise
# this, and add the feature to `stream_required_level`, when the first level-1 feature lands.
API_LEVEL = 0

REQUIRED_LEVEL_KEY = "_nats.req.level"
SERVER_VERSION_KEY = "_nats.ver"
SERVER_LEVEL_KEY = "_nats.level"
_DYNAMIC_PREFIX = "_nats."


def stream_required_level(config: StreamConfig) -> int:
    """The API level `config`'s features need (nats-server `setStaticStreamMetadata`).

    Every field this build's `StreamConfig` can hold exists since level 0 (nats-server 2.10), so the
    answer is 0; the assignment still records it so a newer build's higher level survives a round trip
    through this one and makes this node load the asset offline.
    """
    del config  # no level-1 field is representable yet; see API_LEVEL
    return 0


def without_dynamic_metadata(config: StreamConfig) -> StreamConfig:
    """`config` without any `_nats.*` metadata key: the form two configs are compared in."""
    kept = tuple(pair for pair in config.metadata if not pair[0].startswith(_DYNAMIC_PREFIX))
    return config if len(kept) == len(config.metadata) else attrs.evolve(config, metadata=kept)


def served_metadata(
    metadata: Mapping[str, str] | Iterable[tuple[str, str]], *, required_level: int, server_version: str
) -> dict[str, str]:
    """The `metadata` object a response serves: the user's keys plus the three `_nats.*` stamps."""
    pairs = metadata.items() if isinstance(metadata, Mapping) else metadata
    served = {key: value for key, value in pairs if not key.startswith(_DYNAMIC_PREFIX)}
    served[REQUIRED_LEVEL_KEY] = str(required_level)
    served[SERVER_VERSION_KEY] = server_version
    served[SERVER_LEVEL_KEY] = str(API_LEVEL)
    return served


def listed_metadata(served: Mapping[str, str]) -> dict[str, str]:
    """The `metadata` of a config in a stream list: a served one without the dynamic keys (rule 4)."""
    return {key: value for key, value in served.items() if key not in (SERVER_VERSION_KEY, SERVER_LEVEL_KEY)}
