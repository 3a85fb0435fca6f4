"""`state()` at the edges, and the lifecycle (sync, close).

Method: drive a store into each edge the protocol names — brand new, fully purged, compacted past its
end, skipped while empty, interior gaps, deleted tail — and assert the exact `StoreState`; then check
that a closed store refuses every call with `StoreClosed`.
"""

from __future__ import annotations

import pytest
from store_helpers import assert_consistent, put, put_many

from jsraft.errors import StoreClosed
from jsraft.store.base import StoreState


def empty(first_seq: int, last_seq: int) -> StoreState:
    return StoreState(
        first_seq=first_seq, last_seq=last_seq, msgs=0, bytes=0, num_deleted=0, num_subjects=0, digest=0
    )


def test_brand_new(make_store) -> None:
    assert make_store().state() == empty(0, 0)


def test_full_purge_reports_first_after_last(make_store) -> None:
    store = make_store()
    put_many(store, ["a"] * 10)
    store.purge()
    assert store.state() == empty(11, 10)


def test_compact_past_last(make_store) -> None:
    store = make_store()
    put_many(store, ["a", "b", "c"])
    store.compact(10)
    assert store.state() == empty(10, 9)


def test_skip_on_empty_store(make_store) -> None:
    store = make_store()
    store.skip(1, 5)
    assert store.state() == empty(6, 5)


def test_deleting_every_message_one_by_one(make_store) -> None:
    store = make_store()
    put_many(store, ["a", "b", "c"])
    for seq in (2, 3, 1):
        store.delete(seq)
    assert store.state() == empty(4, 3)


def test_gaps_subjects_and_timestamps(make_store) -> None:
    store = make_store()
    put_many(store, ["a", "b", "c", "a", "d"])  # timestamps seq * 10
    store.delete(2)
    store.delete(5)  # the tail: last_seq stays 5
    state = assert_consistent(store)
    assert (state.first_seq, state.last_seq, state.msgs, state.num_deleted) == (1, 5, 3, 2)
    assert state.num_subjects == 2  # a, c (b and d are gone)
    assert (state.first_timestamp_ns, state.last_timestamp_ns) == (10, 40)
    store.delete(1)
    state = assert_consistent(store)
    assert (state.first_seq, state.num_deleted, state.first_timestamp_ns) == (3, 1, 30)


def test_sync_keeps_state(make_store) -> None:
    store = make_store()
    put(store, "a")
    before = store.state()
    store.sync()
    assert store.state() == before


CALLS = {
    "append": lambda s: s.append(2, "a", b"", b"x", 1),
    "append_batch": lambda s: s.append_batch([(2, "a", b"", b"x", 1)]),
    "skip": lambda s: s.skip(2),
    "load": lambda s: s.load(1),
    "load_last": lambda s: s.load_last(),
    "load_next": lambda s: s.load_next(None, 1),
    "delete": lambda s: s.delete(1),
    "erase": lambda s: s.erase(1),
    "purge": lambda s: s.purge(),
    "compact": lambda s: s.compact(2),
    "truncate": lambda s: s.truncate(1),
    "expire": lambda s: s.expire(100),
    "subject_counts": lambda s: s.subject_counts(),
    "state": lambda s: s.state(),
    "digest_ranges": lambda s: s.digest_ranges(),
    "faults": lambda s: s.faults(),
    "scan": lambda s: s.scan(),
    "update_config": lambda s: s.update_config(s.config),
    "sync": lambda s: s.sync(),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_closed_store_refuses_every_call(make_store, call: str) -> None:
    store = make_store()
    put(store, "a")
    store.close()
    with pytest.raises(StoreClosed) as error:
        CALLS[call](store)
    assert error.value.err_code == 10077
    store.close()  # closing twice is harmless
