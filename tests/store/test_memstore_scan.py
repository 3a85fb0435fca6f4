"""MemStore only: memory is not a fault domain, so `scan()` treats a damaged record as a bug.

Method: MemStore keeps each message's canonical record. On an intact store `scan()` returns [] and
re-checks the running totals; overwriting a stored record (the only way to damage memory on purpose)
must make `scan()` crash with `InvariantViolation` rather than report or "repair" anything, and
`faults()` stays empty while `repair`/`repair_deleted` are refused.
"""

from __future__ import annotations

import pytest
from store_helpers import put_many

from jsraft.errors import BadRequest, InvariantViolation
from jsraft.store.memstore import MemStore


@pytest.fixture
def store() -> MemStore:
    store = MemStore()
    put_many(store, ["a", "b", "c", "d"])
    store.delete(2)
    return store


def test_scan_of_intact_store(store: MemStore) -> None:
    assert store.scan() == []
    assert store.faults() == []


@pytest.mark.parametrize("byte", [-1, 0, 8, 30])
def test_damaged_record_is_a_bug_not_a_fault(store: MemStore, byte: int) -> None:
    entry = store._msgs[3]  # a test may reach inside: there is no other way to damage memory
    record = bytearray(entry.record)
    record[byte] ^= 0x01
    entry.record = bytes(record)
    with pytest.raises(InvariantViolation):
        store.scan()
    assert store.faults() == []


def test_drifted_totals_are_a_bug(store: MemStore) -> None:
    store._bytes += 1
    with pytest.raises(InvariantViolation):
        store.scan()


def test_repairs_are_refused(store: MemStore) -> None:
    with pytest.raises(BadRequest):
        store.repair(2, "b", b"", b"x", 20)
    with pytest.raises(BadRequest):
        store.repair_deleted(2, 2)
