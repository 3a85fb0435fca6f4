"""Append and append_batch: what is stored, how it is counted, and that it persists.

Method: append known messages, then assert the exact state tuple (bytes via `msg_size`) and that every
message loads back field for field; batches must equal the same appends made one by one; for the file
store, `reopen` must give back the same state and messages.
"""

from __future__ import annotations

from store_helpers import HEADERS, assert_consistent, live_messages, put, size_of, snapshot

from jsraft.store.base import StoredMsg, StoreState, msg_size


def test_byte_accounting_matches_nats_server() -> None:
    assert msg_size(3, 0, 5) == 38
    assert msg_size(3, 18, 5) == 60
    assert len(HEADERS) == 18


def test_brand_new_store_is_all_zero(make_store) -> None:
    assert make_store().state() == StoreState(
        first_seq=0, last_seq=0, msgs=0, bytes=0, num_deleted=0, num_subjects=0, digest=0
    )


def test_appends_give_exact_state(make_store) -> None:
    store = make_store()
    store.append(1, "foo", b"", b"hello", 100)
    store.append(2, "bar", HEADERS, b"", 200)
    store.append(3, "foo", b"", b"again", 300)
    state = assert_consistent(store)
    seqs_and_counts = (state.first_seq, state.last_seq, state.msgs, state.num_deleted, state.num_subjects)
    assert seqs_and_counts == (1, 3, 3, 0, 2)
    assert state.bytes == 38 + size_of("bar", b"", HEADERS) + 38
    assert (state.first_timestamp_ns, state.last_timestamp_ns) == (100, 300)


def test_every_field_loads_back(make_store) -> None:
    store = make_store()
    cases = [
        ("a", b"", b""),
        ("orders.eu.new", HEADERS, bytes(range(256))),
        ("ünï.cødé", b"", b"\x00\xff" * 100),
    ]
    for seq, (subject, headers, payload) in enumerate(cases, start=1):
        store.append(seq, subject, headers, payload, seq * 1_000_000_007)
    for seq, (subject, headers, payload) in enumerate(cases, start=1):
        assert store.load(seq) == StoredMsg(
            subject=subject, seq=seq, headers=headers, payload=payload, timestamp_ns=seq * 1_000_000_007
        )
    # Subjects count for their UTF-8 length.
    assert store.state().bytes == sum(size_of(s, p, h) for s, h, p in cases)


def test_batch_equals_one_by_one(make_store) -> None:
    batch = [(seq, f"s.{seq % 3}", HEADERS if seq % 2 else b"", b"p" * seq, seq * 7) for seq in range(1, 21)]
    one_by_one = make_store()
    for message in batch:
        one_by_one.append(*message)
    batched = make_store()
    batched.append_batch(batch[:5])
    batched.append_batch(batch[5:])
    assert batched.state() == one_by_one.state()
    assert list(live_messages(batched)) == list(live_messages(one_by_one))
    assert_consistent(batched)


def test_empty_batch_changes_nothing(make_store) -> None:
    store = make_store()
    put(store, "a")
    before = store.state()
    store.append_batch([])
    assert store.state() == before


def test_zero_timestamp_and_empty_message(make_store) -> None:
    store = make_store()
    store.append(1, "a", b"", b"", 0)
    assert store.load(1).timestamp_ns == 0
    assert store.state().bytes == size_of("a")


def test_appends_survive_reopen(make_store, reopen) -> None:
    store = make_store()
    for i in range(50):
        put(store, f"sub.{i % 4}", payload=bytes([i]) * i, headers=HEADERS if i % 5 == 0 else b"")
    store.sync()
    before = snapshot(store)
    store = reopen(store)
    assert snapshot(store) == before
    put(store, "after.reopen")
    assert store.state().last_seq == 51
    assert_consistent(store)
