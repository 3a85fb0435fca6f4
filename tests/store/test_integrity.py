"""Integrity on an undamaged store: scan finds nothing, faults stay empty, repairs are refused.

Method: after a mix of every kind of change (and, for the file store, a reopen), `scan()` and
`faults()` must both be empty and leave the state as it was; `repair`/`repair_deleted` of sequences
that are not damaged must be refused (a store never overwrites what it holds intact). Damage itself
is injected by the store-specific tests (`test_memstore_scan.py`, `test_filestore_*.py`).
"""

from __future__ import annotations

import pytest
from store_helpers import HEADERS, assert_consistent, put, put_many

from jsraft.errors import BadRequest


@pytest.fixture
def busy(make_store):
    store = make_store({"max_msgs_per_subject": 4})
    put_many(store, [f"s.{i % 7}" for i in range(60)])
    put(store, "h", b"with headers", HEADERS)
    store.delete(50)
    store.purge(subject="s.3")
    store.compact(30)
    store.skip(store.state().last_seq + 1, 3)
    put(store, "tail")
    return store


def test_scan_of_an_intact_store_finds_nothing(busy, reopen) -> None:
    before = busy.state()
    assert busy.scan() == []
    assert busy.faults() == []
    assert busy.state() == before
    busy.sync()
    busy = reopen(busy)
    assert busy.scan() == []
    assert busy.faults() == []
    assert busy.state() == before
    assert_consistent(busy)


def test_repairs_of_intact_sequences_are_refused(busy) -> None:
    live = busy.load_last()
    before = busy.state()
    with pytest.raises(BadRequest):
        busy.repair(live.seq, live.subject, live.headers, live.payload, live.timestamp_ns)
    with pytest.raises(BadRequest):
        busy.repair_deleted(live.seq, live.seq)
    assert busy.state() == before
    assert busy.load(live.seq) == live
