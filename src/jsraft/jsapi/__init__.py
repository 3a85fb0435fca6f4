"""JetStream API values (layer L1): configs and their JSON shapes, shared by `meta`, `stream` and `server`.

Field names are exactly the JetStream JSON API's, so code, JSON, CLI and docs line up (STYLE.md).
"""

from jsraft.jsapi.stream_config import (
    DUPLICATE_WINDOW_DEFAULT_NS,
    Discard,
    Placement,
    Retention,
    StorageType,
    StreamCompression,
    StreamConfig,
    parse_stream_config,
    validate_stream_name,
)

__all__ = [
    "DUPLICATE_WINDOW_DEFAULT_NS",
    "Discard",
    "Placement",
    "Retention",
    "StorageType",
    "StreamCompression",
    "StreamConfig",
    "parse_stream_config",
    "validate_stream_name",
]
