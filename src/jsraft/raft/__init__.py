"""Raft (layer L1): the sans-IO consensus core. See `core` for the state machine and `types` for values."""

from jsraft.raft.types import ConfState, Entry, EntryType, HardState, SnapshotMeta

__all__ = ["ConfState", "Entry", "EntryType", "HardState", "SnapshotMeta"]
