"""Message stores (layer L2): `MemStore` and `FileStore` behind the `StreamStore` protocol."""

from jsraft.store.base import (
    DIGEST_RANGE_SEQS,
    UNLIMITED,
    Compression,
    Discard,
    Fault,
    FaultKind,
    StoreConfig,
    StoredMsg,
    StoreState,
    StreamStore,
    msg_size,
)

__all__ = [
    "DIGEST_RANGE_SEQS",
    "UNLIMITED",
    "Compression",
    "Discard",
    "Fault",
    "FaultKind",
    "StoreConfig",
    "StoreState",
    "StoredMsg",
    "StreamStore",
    "msg_size",
]
