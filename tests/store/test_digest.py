"""The content digest and its per-range sums (StreamStore invariant 2, DESIGN §6).

Method: after every kind of change, the store's digest must equal `expected_digest` (recomputed by
loading every live message and encoding its canonical record) and its ranges must equal the
per-range recomputation and sum to the digest. Two stores holding the same messages by different
histories must agree; a different payload, header or timestamp must change the digest.
"""

from __future__ import annotations

from store_helpers import HEADERS, U64_MASK, assert_consistent, expected_digest, put, put_many

from jsraft.store.base import DIGEST_RANGE_SEQS


def test_empty_digest_is_zero(make_store) -> None:
    store = make_store()
    assert store.state().digest == 0
    assert store.digest_ranges() == {}


def test_digest_follows_every_change(make_store) -> None:
    store = make_store({"max_msgs_per_subject": 3})
    steps = [
        lambda: put_many(store, [f"s.{i % 5}" for i in range(30)]),
        lambda: store.delete(27),
        lambda: store.erase(28),
        lambda: store.purge(subject="s.1"),
        lambda: store.purge(subject="s.*", keep=6),
        lambda: store.compact(25),
        lambda: put(store, "h", b"payload", HEADERS),
        lambda: store.truncate(30),
        lambda: store.expire(300),
        lambda: store.skip(store.state().last_seq + 1, 2),
        lambda: put_many(store, ["s.0", "s.0", "s.0", "s.0"]),
        lambda: store.purge(),
    ]
    for step in steps:
        step()
        assert store.state().digest == expected_digest(store)
        assert_consistent(store)


def test_ranges_split_by_sequence(make_store) -> None:
    store = make_store()
    put(store, "a")
    store.skip(2, DIGEST_RANGE_SEQS - 1)  # up to seq 4096, the end of range 0
    put(store, "b")  # seq 4097: range 1
    put(store, "c")
    ranges = store.digest_ranges()
    assert sorted(ranges) == [0, 1]
    assert sum(ranges.values()) & U64_MASK == store.state().digest
    assert store.delete(1)
    assert sorted(store.digest_ranges()) == [1]  # an emptied range is dropped
    assert_consistent(store)


def test_same_messages_same_digest_whatever_the_history(make_store) -> None:
    one = make_store()
    put_many(one, ["a", "b", "c", "d", "e"])
    one.delete(3)
    one.compact(2)
    other = make_store({"max_msgs": 4})
    other.skip(1)
    for seq, subject in ((2, "b"), (3, "zzz"), (4, "d"), (5, "e")):
        other.append(seq, subject, b"", b"x", seq * 10)
    other.delete(3)
    assert one.state().agreement_key() == other.state().agreement_key()
    assert one.digest_ranges() == other.digest_ranges()


def test_any_content_difference_changes_the_digest(make_store) -> None:
    digests = set()
    for subject, headers, payload, ts in (
        ("a", b"", b"x", 1),
        ("b", b"", b"x", 1),
        ("a", HEADERS, b"x", 1),
        ("a", b"", b"y", 1),
        ("a", b"", b"x", 2),
    ):
        store = make_store()
        store.append(1, subject, headers, payload, ts)
        digests.add(store.state().digest)
    assert len(digests) == 5


def test_digest_survives_reopen(make_store, reopen) -> None:
    store = make_store()
    put_many(store, ["a", "b", "a"])
    store.delete(2)
    store.sync()
    state, ranges = store.state(), store.digest_ranges()
    store = reopen(store)
    assert (store.state(), store.digest_ranges()) == (state, ranges)
