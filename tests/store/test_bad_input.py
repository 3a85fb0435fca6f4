"""Bad input is refused with its stable err_code and changes nothing (StreamStore invariant 5).

Method: from a store holding a few messages, attempt each bad call, assert the exception class and its
`err_code`, and assert that `state()`, the digest ranges and every live message are exactly as before.
Config errors are checked at the gateway (`StoreConfig.from_dict`) and at `make_store`.
"""

from __future__ import annotations

import pytest
from store_helpers import put_many, snapshot

from jsraft import limits
from jsraft.errors import (
    BadRequest,
    InvalidConfig,
    InvalidSubject,
    MessageTooLarge,
    SequenceOutOfOrder,
    UnknownConfigField,
)
from jsraft.store.base import StoreConfig


@pytest.fixture
def three(make_store):
    store = make_store({"max_msg_size": 1024})
    put_many(store, ["a", "b.c", "a"])
    store.delete(2)
    return store


def refuses(store, call, error_type, err_code: int) -> None:
    before = snapshot(store), store.digest_ranges()
    with pytest.raises(error_type) as error:
        call(store)
    assert error.value.err_code == err_code
    assert (snapshot(store), store.digest_ranges()) == before


@pytest.mark.parametrize("seq", [0, 1, 3, 5, 100, -1])
def test_out_of_order_seq(three, seq: int) -> None:
    refuses(three, lambda s: s.append(seq, "a", b"", b"x", 1), SequenceOutOfOrder, 20002)
    refuses(three, lambda s: s.skip(seq), SequenceOutOfOrder, 20002)


BAD_SUBJECTS = [
    "",
    ".",
    "a..b",
    ".a",
    "a.",
    "a.>.b",
    "a b",
    " a",
    "a\tb",
    "a\nb",
    "a\rb",
    "x" * (limits.subject_bytes_max + 1),
]


@pytest.mark.parametrize("subject", BAD_SUBJECTS, ids=range(len(BAD_SUBJECTS)))
def test_invalid_subject(three, subject: str) -> None:
    refuses(three, lambda s: s.append(4, subject, b"", b"x", 1), InvalidSubject, 20001)


@pytest.mark.parametrize("subject", ["*", ">", "a.*", "a.>", "*.b"])
def test_wildcard_tokens_are_stored_as_literal_tokens(three, subject: str) -> None:
    """nats-server stores a message published to `$KV.B.x.*` under that subject (a KV purge of `x.*`);
    the store holds it as it came and finds it by that subject."""
    three.append(4, subject, b"", b"w", 1)
    assert three.load(4).subject == subject and three.load_last(subject).seq == 4


@pytest.mark.parametrize(
    ("headers", "payload"),
    [(b"", b"x" * 1025), (b"h" * 1000, b"x" * 25), (b"h" * (limits.headers_bytes_max + 1), b"")],
)
def test_too_large(three, headers: bytes, payload: bytes) -> None:
    refuses(three, lambda s: s.append(4, "a", headers, payload, 1), MessageTooLarge, 10054)


@pytest.mark.parametrize("timestamp_ns", [-1, 1 << 64])
def test_bad_timestamp(three, timestamp_ns: int) -> None:
    refuses(three, lambda s: s.append(4, "a", b"", b"x", timestamp_ns), BadRequest, 10003)


@pytest.mark.parametrize(
    ("position", "bad"),
    [(0, (4, "a b", b"", b"x", 1)), (1, (5, "a", b"", b"x" * 2000, 1)), (2, (7, "a", b"", b"x", 1))],
)
def test_bad_message_anywhere_in_a_batch_refuses_the_batch(three, position: int, bad: tuple) -> None:
    batch = [(4, "a", b"", b"1", 1), (5, "b", b"", b"2", 1), (6, "c", b"", b"3", 1)]
    batch[position] = bad
    refuses(three, lambda s: s.append_batch(batch), BadRequest, bad_code(bad))


def bad_code(bad: tuple) -> int:
    if " " in bad[1]:
        return 20001
    return 10054 if len(bad[3]) > 1024 else 20002


@pytest.mark.parametrize(
    ("call", "error_type", "err_code"),
    [
        (lambda s: s.skip(4, 0), BadRequest, 10003),
        (lambda s: s.purge(keep=-1), BadRequest, 10003),
        (lambda s: s.purge(seq=-1), BadRequest, 10003),
        (lambda s: s.purge(subject="a", seq=2, keep=1), BadRequest, 10003),
        (lambda s: s.purge(subject="a b"), InvalidSubject, 20001),
        (lambda s: s.purge(subject=""), InvalidSubject, 20001),
        (lambda s: s.compact(0), BadRequest, 10003),
        (lambda s: s.truncate(4), BadRequest, 10003),
        (lambda s: s.repair(1, "a", b"", b"x", 10), BadRequest, 10003),
        (lambda s: s.repair(2, "b.c", b"", b"x", 20), BadRequest, 10003),
        (lambda s: s.repair_deleted(1, 1), BadRequest, 10003),
        (lambda s: s.repair_deleted(1, 3), BadRequest, 10003),
    ],
    ids=[
        "skip-0",
        "keep-negative",
        "seq-negative",
        "seq-and-keep",
        "purge-subject-space",
        "purge-subject-empty",
        "compact-0",
        "truncate-above-last",
        "repair-intact",
        "repair-deleted-seq",
        "repair-deleted-intact",
        "repair-deleted-range",
    ],
)
def test_bad_requests(three, call, error_type, err_code: int) -> None:
    refuses(three, call, error_type, err_code)


def test_unknown_config_field() -> None:
    with pytest.raises(UnknownConfigField) as error:
        StoreConfig.from_dict({"max_msgs": 5, "bogus": 1})
    assert error.value.err_code == 10052
    assert error.value.fields == ["bogus"]


@pytest.mark.parametrize(
    "data",
    [
        {"max_msgs": 0},
        {"max_msgs": -2},
        {"max_bytes": 0},
        {"max_msgs_per_subject": -5},
        {"max_msg_size": limits.payload_bytes_max + 1},
        {"block_size": limits.block_bytes_min - 1},
        {"discard": "sideways"},
        {"discard_new_per_subject": True, "max_msgs_per_subject": 2},
        {"discard_new_per_subject": True, "discard": "new"},
        {"max_msgs": "ten"},
    ],
)
def test_invalid_config(make_store, data: dict) -> None:
    with pytest.raises(InvalidConfig) as error:
        StoreConfig.from_dict(data)
    assert error.value.err_code == 10052
    with pytest.raises(InvalidConfig):
        make_store(data)


def test_invalid_config_object_is_refused_at_open(make_store) -> None:
    with pytest.raises(InvalidConfig) as error:
        make_store(StoreConfig(max_msgs=0))
    assert error.value.err_code == 10052
