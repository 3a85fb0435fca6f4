"""Reads: load, load_last (wildcards), load_next (one or many filters), subject_counts.

Method: build a small stream with known subjects and gaps, then assert exactly which message each read
returns, including the boundaries (deleted seq, before first, after last, no match -> NoMessageFound).
"""

from __future__ import annotations

import pytest
from store_helpers import put, put_many

from jsraft.errors import InvalidSubject, NoMessageFound

SUBJECTS = ["orders.eu.new", "orders.us.new", "orders.eu.paid", "audit", "orders.eu.new", "audit.login"]


@pytest.fixture
def stream(make_store):
    """Seqs 1..6 on SUBJECTS, then seq 3 (orders.eu.paid) deleted."""
    store = make_store()
    put_many(store, SUBJECTS)
    store.delete(3)
    return store


def test_load_by_seq(stream) -> None:
    assert stream.load(2).subject == "orders.us.new"
    for missing in (0, 3, 7, 1000):
        with pytest.raises(NoMessageFound) as error:
            stream.load(missing)
        assert error.value.err_code == 10037


@pytest.mark.parametrize(
    ("subject_filter", "expected_seq"),
    [
        (">", 6),
        ("orders.eu.new", 5),
        ("orders.us.new", 2),
        ("audit", 4),
        ("orders.*.new", 5),
        ("orders.us.*", 2),
        ("orders.>", 5),
        ("*.*.new", 5),
        ("audit.>", 6),
        ("*", 4),
        ("*.*", 6),
    ],
)
def test_load_last(stream, subject_filter: str, expected_seq: int) -> None:
    assert stream.load_last(subject_filter).seq == expected_seq


@pytest.mark.parametrize("subject_filter", ["orders.eu.paid", "nothing", "orders.*.paid", "x.>", "*.*.*.*"])
def test_load_last_no_match(stream, subject_filter: str) -> None:
    with pytest.raises(NoMessageFound):
        stream.load_last(subject_filter)


def test_load_last_falls_back_after_deleting_newest(stream) -> None:
    assert stream.delete(5)
    assert stream.load_last("orders.eu.new").seq == 1
    assert stream.load_last("orders.>").seq == 2
    assert stream.delete(6)
    assert stream.load_last().seq == 4


def test_load_last_on_empty_store(make_store) -> None:
    with pytest.raises(NoMessageFound):
        make_store().load_last()


@pytest.mark.parametrize(
    ("filters", "start", "expected_seq"),
    [
        (None, 0, 1),
        (None, 3, 4),  # 3 is deleted: the next live one
        (">", 6, 6),
        ([], 2, 2),  # no filter at all means every subject
        ("audit", 1, 4),
        ("audit.>", 1, 6),
        ("orders.eu.*", 2, 5),
        (["audit", "orders.us.new"], 1, 2),
        (["audit", "orders.us.new"], 3, 4),
        (["orders.*.new", "orders.eu.>"], 2, 2),  # overlapping filters
        (["nope", "*.login"], 0, 6),
    ],
)
def test_load_next(stream, filters, start: int, expected_seq: int) -> None:
    assert stream.load_next(filters, start).seq == expected_seq


@pytest.mark.parametrize(
    ("filters", "start"), [(None, 7), ("audit", 5), (["orders.us.new", "nope"], 3), ("x", 0)]
)
def test_load_next_none_left(stream, filters, start: int) -> None:
    with pytest.raises(NoMessageFound):
        stream.load_next(filters, start)


def test_load_next_across_a_large_gap(make_store) -> None:
    store = make_store()
    put(store, "a")
    store.skip(2, 100_000)
    put(store, "b")
    put(store, "a")
    assert store.load_next(None, 2).seq == 100_002
    assert store.load_next("a", 2).seq == 100_003
    assert store.load_next(["b", "c"], 0).seq == 100_002
    assert store.delete(1)
    assert store.load_next(None, 0).seq == 100_002


def test_subject_counts(stream) -> None:
    assert stream.subject_counts() == {"orders.eu.new": 2, "orders.us.new": 1, "audit": 1, "audit.login": 1}
    assert stream.subject_counts("orders.*.new") == {"orders.eu.new": 2, "orders.us.new": 1}
    assert stream.subject_counts("audit") == {"audit": 1}
    assert stream.subject_counts("orders.eu.paid") == {}
    assert stream.subject_counts("nothing.>") == {}


@pytest.mark.parametrize("bad", ["", "a..b", "a.>.b", "a b", ".a", "a."])
def test_reads_refuse_invalid_filters(stream, bad: str) -> None:
    for read in (
        lambda: stream.load_last(bad),
        lambda: stream.load_next(bad, 0),
        lambda: stream.load_next(["audit", bad], 0),
        lambda: stream.subject_counts(bad),
    ):
        with pytest.raises(InvalidSubject) as error:
            read()
        assert error.value.err_code == 20001
