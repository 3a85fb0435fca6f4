"""Limits: max_msgs, max_bytes, max_msgs_per_subject, max_msg_size under discard old and new.

Method: configure one limit at a time (then combinations), append past it, and assert which seqs
survive (discard old) or which append is refused with which error and an unchanged state (discard
new). Every "a"/"b"/... message with payload b"x" is 32 bytes (`msg_size(1, 0, 1)`).
"""

from __future__ import annotations

import attrs
import pytest
from store_helpers import HEADERS, assert_consistent, live_seqs, put, put_many, size_of

from jsraft.errors import (
    InvalidConfig,
    MaxBytesExceeded,
    MaxMsgsExceeded,
    MaxMsgsPerSubjectExceeded,
    MessageTooLarge,
)
from jsraft.store.base import Discard, StoreConfig

ONE = size_of("a", b"x")
NEW = {"discard": "new"}
PER_SUBJECT_2 = {"max_msgs_per_subject": 2, "discard_new_per_subject": True}


def test_one_message_is_32_bytes() -> None:
    assert ONE == 32


def refused(store, error_type, subject: str, payload: bytes = b"x") -> None:
    """Append must fail with `error_type` (err_code 10077 for limits) and change nothing."""
    before = store.state()
    with pytest.raises(error_type) as error:
        put(store, subject, payload)
    assert store.state() == before
    return error.value


# --- discard old ----------------------------------------------------------------------------------


def test_discard_old_max_msgs(make_store) -> None:
    store = make_store({"max_msgs": 3})
    put_many(store, ["a", "b", "c", "d", "e"])
    assert live_seqs(store) == [3, 4, 5]
    assert assert_consistent(store).first_seq == 3


@pytest.mark.parametrize(("max_bytes", "kept"), [(96, [3, 4, 5]), (100, [3, 4, 5]), (95, [4, 5]), (32, [5])])
def test_discard_old_max_bytes(make_store, max_bytes: int, kept: list[int]) -> None:
    store = make_store({"max_bytes": max_bytes})
    put_many(store, ["a", "b", "c", "d", "e"])
    assert live_seqs(store) == kept
    assert store.state().bytes == ONE * len(kept) <= max_bytes


def test_discard_old_message_larger_than_max_bytes_evicts_itself(make_store) -> None:
    store = make_store({"max_bytes": 40})
    put(store, "a")
    put(store, "a", b"y" * 100)
    assert live_seqs(store) == []
    state = assert_consistent(store)
    assert (state.first_seq, state.last_seq) == (3, 2)


@pytest.mark.parametrize("discard", ["old", "new"])
def test_max_msgs_per_subject_drops_the_subjects_oldest(make_store, discard: str) -> None:
    store = make_store({"max_msgs_per_subject": 2, "discard": discard})
    put_many(store, ["a", "b", "a", "a", "b", "b", "c"])
    assert live_seqs(store) == [3, 4, 5, 6, 7]
    assert store.subject_counts() == {"a": 2, "b": 2, "c": 1}
    assert assert_consistent(store).num_deleted == 0


def test_per_subject_limit_applies_before_max_msgs(make_store) -> None:
    store = make_store({"max_msgs": 2, "max_msgs_per_subject": 1})
    put_many(store, ["a", "b", "a", "a"])
    assert live_seqs(store) == [2, 4]


# --- discard new ----------------------------------------------------------------------------------


def test_discard_new_max_msgs(make_store) -> None:
    store = make_store({**NEW, "max_msgs": 3})
    put_many(store, ["a", "b", "c"])
    error = refused(store, MaxMsgsExceeded, "d")
    assert error.err_code == 10077
    store.delete(1)
    assert put(store, "d") == 4


def test_discard_new_max_bytes_allows_exact_fill(make_store) -> None:
    store = make_store({**NEW, "max_bytes": 3 * ONE})
    put_many(store, ["a", "b", "c"])
    assert store.state().bytes == 96
    assert refused(store, MaxBytesExceeded, "d").err_code == 10077
    assert refused(store, MaxBytesExceeded, "d", b"").err_code == 10077  # 31 bytes, still too many


def test_discard_new_subject_at_its_limit_replaces_instead_of_refusing(make_store) -> None:
    store = make_store({**NEW, "max_msgs": 3, "max_msgs_per_subject": 1})
    put_many(store, ["a", "b", "c"])
    assert put(store, "a") == 4  # replaces seq 1: the stream does not grow
    assert live_seqs(store) == [2, 3, 4]
    refused(store, MaxMsgsExceeded, "d")


def test_discard_new_replacement_must_fit_max_bytes(make_store) -> None:
    store = make_store({**NEW, "max_bytes": 3 * ONE, "max_msgs_per_subject": 1})
    put_many(store, ["a", "b", "c"])
    refused(store, MaxBytesExceeded, "a", b"yy")  # 96 - 32 + 33 > 96
    assert put(store, "a", b"z") == 4  # 96 - 32 + 32 fits
    assert live_seqs(store) == [2, 3, 4]


def test_discard_new_per_subject(make_store) -> None:
    store = make_store({**NEW, "max_msgs_per_subject": 2, "discard_new_per_subject": True})
    put_many(store, ["a", "a"])
    assert refused(store, MaxMsgsPerSubjectExceeded, "a").err_code == 10077
    assert put(store, "b") == 3


def test_discard_new_per_subject_is_checked_before_max_msgs(make_store) -> None:
    store = make_store(
        {**NEW, "max_msgs": 2, "max_msgs_per_subject": 1, "discard_new_per_subject": True}
    )
    put_many(store, ["a", "b"])
    refused(store, MaxMsgsPerSubjectExceeded, "a")
    refused(store, MaxMsgsExceeded, "c")


# --- batches: cumulative, all or nothing ------------------------------------------------------------


def batch_of(store, subjects: list[str], payload: bytes = b"x") -> list[tuple]:
    last = store.state().last_seq
    return [(last + 1 + i, subject, b"", payload, 1) for i, subject in enumerate(subjects)]


@pytest.mark.parametrize(
    ("config", "subjects", "error_type"),
    [
        ({"max_msgs": 3}, ["b", "c", "d"], MaxMsgsExceeded),
        ({"max_bytes": 3 * ONE}, ["b", "c", "d"], MaxBytesExceeded),
        (PER_SUBJECT_2, ["b", "b", "b"], MaxMsgsPerSubjectExceeded),
        (PER_SUBJECT_2, ["a", "a"], MaxMsgsPerSubjectExceeded),
    ],
)
def test_batch_refused_as_a_whole(make_store, config: dict, subjects: list[str], error_type) -> None:
    store = make_store({**NEW, **config})
    put(store, "a")
    before = store.state()
    with pytest.raises(error_type):
        store.append_batch(batch_of(store, subjects))
    assert store.state() == before
    store.append_batch(batch_of(store, subjects[:-1]))
    assert store.state().last_seq == len(subjects)


def test_batch_replacements_count_cumulatively(make_store) -> None:
    store = make_store({**NEW, "max_msgs": 2, "max_bytes": 2 * ONE + 1, "max_msgs_per_subject": 1})
    store.append_batch(batch_of(store, ["a", "a", "a", "b"]))
    assert live_seqs(store) == [3, 4]
    store.append_batch(batch_of(store, ["a"], b"yy"))  # a: 64 - 32 + 33 = 65 fits
    with pytest.raises(MaxBytesExceeded):
        store.append_batch(batch_of(store, ["b", "b"], b"yy"))  # b -> 66: over, whole batch refused
    assert live_seqs(store) == [4, 5]


@pytest.mark.parametrize("split", [False, True])
def test_discard_old_limits_apply_per_message_inside_a_batch(make_store, split: bool) -> None:
    """A batch evicts what the same messages appended one by one evict. A 43-byte "b" makes the store
    75 bytes while live (budget 65), so "a" goes, although the next "b" (32 bytes) then replaces it and
    "a" + that "b" would fit. Found by the model test: the file store enforced the limits once after
    the batch and kept "a"."""
    store = make_store({"max_bytes": 2 * ONE + 1, "max_msgs_per_subject": 1})
    put(store, "a")
    rows = [(2, "b", b"", b"x" * 12, 1), (3, "b", b"", b"x", 1)]
    if split:
        for row in rows:
            store.append(*row)
    else:
        store.append_batch(rows)
    assert live_seqs(store) == [3]
    assert_consistent(store)


# --- max_msg_size ---------------------------------------------------------------------------------


def test_max_msg_size_counts_headers_and_payload_not_subject(make_store) -> None:
    store = make_store({"max_msg_size": 20})
    put(store, "a" * 200, b"p" * 20)
    store.append(2, "a", HEADERS[:2], b"p" * 18, 1)
    before = store.state()
    for headers, payload in ((b"", b"p" * 21), (HEADERS, b"p" * 3)):
        with pytest.raises(MessageTooLarge) as error:
            store.append(3, "a", headers, payload, 1)
        assert error.value.err_code == 10054
    assert store.state() == before


# --- update_config --------------------------------------------------------------------------------


def test_update_config_applies_discard_old_limits_at_once(make_store) -> None:
    store = make_store()
    put_many(store, ["a", "b", "a", "a", "c", "c"])
    store.update_config(StoreConfig(max_msgs_per_subject=1))
    assert live_seqs(store) == [2, 4, 6]
    store.update_config(StoreConfig(max_msgs_per_subject=1, max_msgs=2))
    assert live_seqs(store) == [4, 6]
    store.update_config(StoreConfig(max_bytes=ONE))
    assert live_seqs(store) == [6]
    assert_consistent(store)


def test_update_config_without_enforcing_keeps_the_messages_until_an_append(make_store) -> None:
    # What a stream replay does with a store that holds later entries' messages (stream machine inv. 2).
    store = make_store()
    put_many(store, ["a", "b", "a", "a"])
    store.update_config(StoreConfig(max_msgs_per_subject=1), enforce_limits=False)
    assert live_seqs(store) == [1, 2, 3, 4] and store.config.max_msgs_per_subject == 1
    put(store, "a")  # the next append to the subject applies the limit
    assert live_seqs(store) == [2, 5]
    assert_consistent(store)


def test_update_config_per_subject_before_max_msgs(make_store) -> None:
    store = make_store()
    put_many(store, ["a", "b", "a", "a"])
    store.update_config(StoreConfig(max_msgs=2, max_msgs_per_subject=1))
    assert live_seqs(store) == [2, 4]


def test_update_config_discard_new_keeps_messages_but_refuses_more(make_store) -> None:
    store = make_store(NEW)
    put_many(store, ["a", "b", "c", "d", "e"])
    store.update_config(StoreConfig(discard=Discard.new, max_msgs=3, max_msgs_per_subject=2))
    assert live_seqs(store) == [1, 2, 3, 4, 5]
    refused(store, MaxMsgsExceeded, "f")
    assert store.config.max_msgs == 3


@pytest.mark.parametrize(
    "bad",
    [
        {"max_msgs": 0},
        {"max_bytes": -2},
        {"max_msgs_per_subject": 0},
        {"discard_new_per_subject": True},
        {"block_size": 1},
        {"name": "other"},
    ],
)
def test_update_config_refuses_invalid(make_store, bad: dict) -> None:
    store = make_store({"max_msgs": 5})
    put_many(store, ["a", "b"])
    before_state, before_config = store.state(), store.config
    with pytest.raises(InvalidConfig) as error:
        store.update_config(attrs.evolve(store.config, **bad))
    assert error.value.err_code == 10052
    assert store.state() == before_state
    assert store.config == before_config


# --- A KV bucket's pattern: many subjects, a history limit, discard new ----------------------------------


class _CountingReads:
    """Counts `checked_record` reads of a FileStore (`fs_ops`), the cost of finding a subject's messages."""

    def __init__(self, monkeypatch) -> None:
        from jsraft.store import fs_ops

        self.reads, original = 0, fs_ops.checked_record

        def counted(store, seq):
            self.reads += 1
            return original(store, seq)

        monkeypatch.setattr(fs_ops, "checked_record", counted)


def test_a_kv_bucket_history_limit_finds_a_keys_oldest_without_scanning_the_others(make_store, monkeypatch) -> None:
    # A put to a key at its history limit removes the key's oldest revision; the store found that revision
    # (and, for discard new, its size) by reading every record from the head: 5,000 keys made each put a
    # scan of the bucket (a KV watch round trip of 63 ms). Now the first is looked for from the removed
    # revision on, and the size only when max_bytes asks for it.
    store = make_store({"name": "KV", "max_msgs_per_subject": 2, "discard": "new"})
    keys = [f"k.{i}" for i in range(300)]
    put_many(store, keys)
    for round_ in range(3):
        put(store, "k.7", b"v%d" % round_)
    counting = _CountingReads(monkeypatch)
    for round_ in range(3, 40):
        put(store, "k.7", b"v%d" % round_)
    assert [store.load(seq).payload for seq in live_seqs(store) if store.load(seq).subject == "k.7"] == [b"v38", b"v39"]
    assert store.subject_counts("k.7") == {"k.7": 2} and store.state().msgs == 301
    assert counting.reads <= 2 * 37  # a few reads a put, not one per key (300 keys)
    assert_consistent(store)


def test_discard_new_sizes_the_evicted_message_only_for_max_bytes(make_store) -> None:
    store = make_store({"name": "S", "max_msgs_per_subject": 1, "discard": "new", "max_bytes": 3 * ONE})
    put_many(store, ["a", "b"])
    put(store, "a", b"y")  # replaces "a": the bytes stay within max_bytes
    refused(store, MaxBytesExceeded, "c", b"x" * 40)
    assert [m for m in live_seqs(store)] == [2, 3]


def test_a_subjects_unknown_first_is_written_to_the_index_as_unknown(tmp_path) -> None:
    # The bound below which a subject has nothing (`fs_accounting` invariant 3) is never written to the index:
    # a reader of the index finds 0 ("look from the head"), as before bounds existed.
    from jsraft.disk import OsDisk
    from jsraft.store.filestore import FileStore
    from jsraft.store.fs_index import _read_index, index_bytes

    store = FileStore.open(OsDisk(str(tmp_path)), StoreConfig(name="S", max_msgs_per_subject=1))
    put_many(store, ["a", "b", "a"])
    assert store.psim["a"][1] < 0  # its first (1) removed: unknown, nothing of it below 2
    assert _read_index(index_bytes(store))[0]["psim"]["a"] == [1, 0, 3]
    assert store.subject_first("a") == 3 and store.psim["a"][1] == 3
    store.close()
    reopened = FileStore.open(OsDisk(str(tmp_path)), StoreConfig(name="S", max_msgs_per_subject=1))
    assert reopened.subject_first("a") == 3 and reopened.load(3).subject == "a"
    reopened.close()
