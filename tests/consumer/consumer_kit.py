"""Helpers for the consumer tests: a store with messages, a consumer set, ops by name."""

from __future__ import annotations

import json

from jsraft.consumer import ConsumerSet, CreateOp, encode_ops
from jsraft.jsapi.stream_config import Retention
from jsraft.store.memstore import MemStore

SECOND = 1_000_000_000


def store_with(subjects: list[str], *, first_ts: int = 1_000 * SECOND, step_ts: int = SECOND,
               payload: bytes = b"data") -> MemStore:
    """A MemStore holding one message per subject, seqs 1.., timestamps `first_ts + i*step_ts`."""
    store = MemStore()
    for i, subject in enumerate(subjects):
        store.append(i + 1, subject, b"", payload, first_ts + i * step_ts)
    return store


def config_bytes(**fields) -> bytes:
    return json.dumps(fields).encode()


class Cluster:
    """A consumer set over a store, with a running log index, so a test reads like a log."""

    def __init__(self, store: MemStore, retention: Retention = Retention.limits) -> None:
        self.store = store
        self.set = ConsumerSet(store, retention)
        self.index = 0

    def apply(self, *ops):
        self.index += 1
        return self.set.apply(self.index, encode_ops(list(ops)))

    def create(self, name: str, created_ns: int = 1, **fields):
        fields.setdefault("durable_name", name)
        return self.apply(CreateOp(name=name, config=config_bytes(**fields), created_ns=created_ns))

    def state(self, name: str):
        return self.set.consumers[name].state
