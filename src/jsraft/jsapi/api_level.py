"""The JetStream API level this build implements, and the `_nats.*` metadata that carries it (ADR-44).

Owns: `FEATURES` (every versioned feature jsraft serves, with the level that introduced it) and the
`API_LEVEL` computed from it; the `_nats.ver` matching a level; the metadata keys; the level a stream or
consumer config requires; and the metadata a response serves. It lives in `jsapi` (L1) because `meta`,
`stream` and `consumer` (L3 siblings) all need it.

Stamping, with the rules of nats-server's `setStaticStreamMetadata` / `setStaticConsumerMetadata`:
  1. On create/update the meta leader computes the level the stream config's features need
     (`stream_required_level`) and records it in the assignment (`required_level`), which is what a
     node compares with its own level when it loads the asset. A consumer's level is computed from its
     config and pause state (`consumer_required_level`) wherever the consumer is loaded. The stored
     config stays the raw JSON bytes the client sent: the stamp is *not* written into them, so a newer
     build's config survives a round trip through this one byte for byte.
  2. A response serving a config adds `_nats.req.level` (the computed level) and the dynamic
     `_nats.ver` / `_nats.level` (the serving node's version and level) to its `metadata`
     (`served_metadata`). Dynamic keys are never stored.
  3. A client-sent `_nats.req.level`, `_nats.ver` or `_nats.level` is replaced: only the server decides
     levels, so a config copied from an INFO response and sent back compares equal to the stored one
     (`without_dynamic_metadata`). Any other key, `_nats.`-prefixed or not, is the user's and is kept,
     as nats-server keeps it.
  4. A *list* (`STREAM.LIST`, `CONSUMER.LIST`) serves the config as nats-server stores it:
     `_nats.req.level` but neither dynamic key (`listed_metadata`); create, update and info serve all three.

Invariants:
  1. A feature is listed in `FEATURES` only when the running node serves it (a test checks each one
     through the API). `API_LEVEL` is the highest level all of whose stream features jsraft serves:
     level 2 (nats-server 2.12) needs every one of `LEVEL_2_FIELDS`; until then jsraft reports level 1
     (nats-server 2.11), however many of them it serves. It only grows between releases.
  2. A config whose required level is above the node's level is loaded offline (DESIGN §9), never
     half-started.

Imports: L1 (`jsapi.stream_config`, `jsapi.consumer_config`), attrs. Reference: ADR-44 (versioning for
JetStream assets), nats-server `server/jetstream_versioning.go`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from jsraft.jsapi.consumer_config import ConsumerConfig
from jsraft.jsapi.stream_config import PersistMode, StreamConfig


@attrs.frozen
class Feature:
    level: int
    name: str


# What jsraft serves of each API level. Level 1 (nats-server 2.11) also holds priority groups, which
# jsraft refuses with a clear error (`priority_*` fields are unknown fields); level 2 (2.12) is its four
# stream features: counters, atomic batches, schedules, async persistence.
FEATURES = (
    Feature(1, "per-message TTL: stream allow_msg_ttl and the Nats-TTL header (ADR-43)"),
    Feature(1, "consumer pause: pause_until and $JS.API.CONSUMER.PAUSE"),
    Feature(1, "subject delete markers: stream subject_delete_marker_ttl (ADR-48, stream.markers)"),
    Feature(2, "counters: stream allow_msg_counter and the Nats-Incr header (ADR-49, stream.counters)"),
    Feature(2, "message schedules: stream allow_msg_schedules and `@at` Nats-Schedule (ADR-51, stream.schedules)"),
    Feature(2, "atomic batch publish: stream allow_atomic and Nats-Batch-* (ADR-50, stream.batches)"),
    Feature(2, "async persistence: stream persist_mode async (R1 file streams, replica.publish_pipeline)"),
)
# nats-server 2.12's level-2 stream fields (`setStaticStreamMetadata`), and those jsraft serves.
LEVEL_2_FIELDS = ("allow_msg_counter", "allow_atomic", "allow_msg_schedules", "persist_mode")
LEVEL_2_SERVED = ("allow_msg_counter", "allow_msg_schedules", "allow_atomic", "persist_mode")
API_LEVEL = 2 if set(LEVEL_2_FIELDS) <= set(LEVEL_2_SERVED) else 1

# The nats-server release that introduced each level: what `_nats.ver` says for a node at that level.
_VERSION_FOR_LEVEL = {0: "2.10.0", 1: "2.11.0", 2: "2.12.0"}

REQUIRED_LEVEL_KEY = "_nats.req.level"
SERVER_VERSION_KEY = "_nats.ver"
SERVER_LEVEL_KEY = "_nats.level"
_VERSIONING_KEYS = (REQUIRED_LEVEL_KEY, SERVER_VERSION_KEY, SERVER_LEVEL_KEY)


def version_for_level(level: int) -> str:
    """The `_nats.ver` a node at API `level` reports: the nats-server release that introduced it."""
    return _VERSION_FOR_LEVEL[level]


def stream_required_level(config: StreamConfig) -> int:
    """The API level `config`'s features need (nats-server `setStaticStreamMetadata`): 2 for counters,
    schedules, atomic batches and async persistence, 1 for TTLs."""
    if config.allow_msg_counter or config.allow_msg_schedules or config.allow_atomic \
            or config.persist_mode is PersistMode.async_:
        return 2
    if config.allow_msg_ttl or config.subject_delete_marker_ttl > 0:
        return 1
    return 0


def consumer_required_level(config: ConsumerConfig, paused_until_ns: int | None = None) -> int:
    """The API level a consumer needs (nats-server `setStaticConsumerMetadata`): 1 while it has a
    non-zero `pause_until`. `paused_until_ns`, when given, is the pause a PAUSE request set since the
    create (nats-server rewrites the config's `pause_until` then); 0 means resumed."""
    until_ns = config.pause_until_ns if paused_until_ns is None else paused_until_ns
    return 1 if until_ns > 0 else 0


def without_dynamic_metadata(config: StreamConfig) -> StreamConfig:
    """`config` without the versioning keys: the form two configs are compared in (rule 3)."""
    kept = tuple(pair for pair in config.metadata if pair[0] not in _VERSIONING_KEYS)
    return config if len(kept) == len(config.metadata) else attrs.evolve(config, metadata=kept)


def served_metadata(
    metadata: Mapping[str, str] | Iterable[tuple[str, str]], *, required_level: int, api_level: int = API_LEVEL
) -> dict[str, str]:
    """The `metadata` object a response serves: the user's keys plus the three `_nats.*` stamps of a node
    at `api_level` (rules 2 and 3)."""
    pairs = metadata.items() if isinstance(metadata, Mapping) else metadata
    served = {key: value for key, value in pairs if key not in _VERSIONING_KEYS}
    served[REQUIRED_LEVEL_KEY] = str(required_level)
    served[SERVER_VERSION_KEY] = version_for_level(api_level)
    served[SERVER_LEVEL_KEY] = str(api_level)
    return served


def listed_metadata(served: Mapping[str, str]) -> dict[str, str]:
    """The `metadata` of a config in a list: a served one without the dynamic keys (rule 4)."""
    return {key: value for key, value in served.items() if key not in (SERVER_VERSION_KEY, SERVER_LEVEL_KEY)}
