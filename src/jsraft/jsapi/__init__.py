"""JetStream API values (layer L1): configs and their JSON shapes, shared by `meta`, `stream` and `server`.

Field names are exactly the JetStream JSON API's, so code, JSON, CLI and docs line up (STYLE.md).

Modules: `stream_config` (`StreamConfig`), `stream_transforms` (its `subject_transform` and `republish`
defaults and checks), `subject_transform` (nats-server's subject transforms, compiled and applied),
`consumer_config` / `consumer_checks` (`ConsumerConfig`), `account_limits`, `api_level` (ADR-44 levels).
"""

from jsraft.jsapi.api_level import (
    API_LEVEL,
    FEATURES,
    REQUIRED_LEVEL_KEY,
    SERVER_LEVEL_KEY,
    SERVER_VERSION_KEY,
    consumer_required_level,
    listed_metadata,
    served_metadata,
    stream_required_level,
    version_for_level,
    without_dynamic_metadata,
)
from jsraft.jsapi.stream_config import (
    DUPLICATE_WINDOW_DEFAULT_NS,
    Discard,
    Placement,
    ReplicasCountCannotBeNegative,
    Retention,
    StorageType,
    StreamCompression,
    StreamConfig,
    parse_stream_config,
    validate_stream_name,
)

__all__ = [
    "API_LEVEL",
    "FEATURES",
    "REQUIRED_LEVEL_KEY",
    "SERVER_LEVEL_KEY",
    "SERVER_VERSION_KEY",
    "consumer_required_level",
    "DUPLICATE_WINDOW_DEFAULT_NS",
    "Discard",
    "Placement",
    "ReplicasCountCannotBeNegative",
    "Retention",
    "StorageType",
    "StreamCompression",
    "StreamConfig",
    "listed_metadata",
    "parse_stream_config",
    "served_metadata",
    "stream_required_level",
    "validate_stream_name",
    "version_for_level",
    "without_dynamic_metadata",
]
