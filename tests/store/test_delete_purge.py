"""Removal: delete, erase, purge (every JetStream variant), compact, truncate, expire, and skip.

Method: from a known stream, apply one removal and assert its return value, the exact state tuple
(first/last/msgs/bytes/num_deleted/num_subjects) and which seqs remain; every case ends with
`assert_consistent`, and `test_removals_survive_reopen` replays each kind of change through `reopen`.
"""

from __future__ import annotations

import pytest
from store_helpers import assert_consistent, live_seqs, put, put_many, size_of, snapshot

from jsraft.errors import BadRequest, NoMessageFound

# seq:          1    2    3      4      5    6      7    8    9    10
TEN = ["a", "b", "a.x", "a.y", "b", "a.x", "c", "a", "b", "a.x"]


@pytest.fixture
def ten(make_store):
    store = make_store()
    put_many(store, TEN)
    return store


def state_tuple(store) -> tuple[int, int, int, int, int]:
    state = assert_consistent(store)
    return state.first_seq, state.last_seq, state.msgs, state.num_deleted, state.num_subjects


# --- delete / erase -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["delete", "erase"])
def test_delete_interior_head_and_all(ten, method: str) -> None:
    remove = getattr(ten, method)
    assert remove(5) is True
    assert remove(5) is False
    assert state_tuple(ten) == (1, 10, 9, 1, 5)
    assert ten.state().bytes == sum(size_of(s, b"x") for s in TEN) - size_of("b", b"x")
    with pytest.raises(NoMessageFound):
        ten.load(5)
    assert remove(1) and remove(2)
    assert state_tuple(ten) == (3, 10, 7, 1, 5)  # first moves to the lowest live seq
    for seq in range(3, 11):
        remove(seq)
    assert state_tuple(ten) == (11, 10, 0, 0, 0)


@pytest.mark.parametrize("seq", [0, 11, 99])
def test_delete_outside_changes_nothing(ten, seq: int) -> None:
    before = ten.state()
    assert ten.delete(seq) is False
    assert ten.erase(seq) is False
    assert ten.state() == before


# --- purge ----------------------------------------------------------------------------------------


def test_purge_everything(ten) -> None:
    assert ten.purge() == 10
    assert state_tuple(ten) == (11, 10, 0, 0, 0)
    assert ten.state().bytes == 0
    put(ten, "next")
    assert state_tuple(ten) == (11, 11, 1, 0, 1)


def test_purge_brand_new_store(make_store) -> None:
    store = make_store()
    assert store.purge() == 0
    assert state_tuple(store) == (1, 0, 0, 0, 0)


@pytest.mark.parametrize(
    ("kwargs", "purged", "remaining"),
    [
        ({"subject": ">"}, 10, []),
        ({"subject": "a"}, 2, [2, 3, 4, 5, 6, 7, 9, 10]),
        ({"subject": "a.*"}, 4, [1, 2, 5, 7, 8, 9]),
        ({"subject": "a.>"}, 4, [1, 2, 5, 7, 8, 9]),
        ({"subject": "*"}, 6, [3, 4, 6, 10]),
        ({"subject": "nothing"}, 0, list(range(1, 11))),
        # subject + seq: matching messages below seq (exclusive).
        ({"subject": "a.x", "seq": 10}, 2, [1, 2, 4, 5, 7, 8, 9, 10]),
        ({"subject": "b", "seq": 5}, 1, [1, 3, 4, 5, 6, 7, 8, 9, 10]),
        # subject + keep: keep the filter's newest N, across all its subjects.
        ({"subject": "a.*", "keep": 1}, 3, [1, 2, 5, 7, 8, 9, 10]),
        ({"subject": "a.*", "keep": 3}, 1, [1, 2, 4, 5, 6, 7, 8, 9, 10]),
        ({"subject": "b", "keep": 5}, 0, list(range(1, 11))),
        # every subject + keep: the newest N live messages.
        ({"keep": 3}, 7, [8, 9, 10]),
        ({"keep": 10}, 0, list(range(1, 11))),
        ({"subject": ">", "keep": 1}, 9, [10]),
        # every subject + seq: compact(seq).
        ({"seq": 4}, 3, [4, 5, 6, 7, 8, 9, 10]),
        ({"seq": 1}, 0, list(range(1, 11))),
        # 0 means "not given", as in the JetStream purge request.
        ({"subject": "c", "seq": 0, "keep": 0}, 1, [1, 2, 3, 4, 5, 6, 8, 9, 10]),
    ],
)
def test_purge_variants(ten, kwargs: dict, purged: int, remaining: list[int]) -> None:
    assert ten.purge(**kwargs) == purged
    assert live_seqs(ten) == remaining
    state = assert_consistent(ten)
    assert state.last_seq == 10
    assert state.first_seq == (remaining[0] if remaining else 11)


def test_purge_keep_counts_live_messages_not_seqs(ten) -> None:
    ten.delete(9)
    ten.delete(10)
    assert ten.purge(keep=3) == 5
    assert live_seqs(ten) == [6, 7, 8]


def test_purge_all_with_seq_past_last_moves_last(ten) -> None:
    assert ten.purge(seq=20) == 10
    assert state_tuple(ten) == (20, 19, 0, 0, 0)


def test_purge_refuses_seq_with_keep(ten) -> None:
    before = ten.state()
    with pytest.raises(BadRequest) as error:
        ten.purge(subject="a", seq=3, keep=1)
    assert error.value.err_code == 10003
    assert ten.state() == before


# --- compact --------------------------------------------------------------------------------------


def test_compact_middle(ten) -> None:
    assert ten.compact(4) == 3
    assert state_tuple(ten) == (4, 10, 7, 0, 5)
    assert ten.compact(2) == 0  # below first: nothing
    assert state_tuple(ten) == (4, 10, 7, 0, 5)


def test_compact_onto_a_deleted_seq_moves_first_to_next_live(ten) -> None:
    ten.delete(4)
    ten.delete(5)
    assert ten.compact(4) == 3
    assert state_tuple(ten) == (6, 10, 5, 0, 4)


def test_compact_to_last_plus_one(ten) -> None:
    assert ten.compact(11) == 10
    assert state_tuple(ten) == (11, 10, 0, 0, 0)


def test_compact_past_last(ten) -> None:
    assert ten.compact(100) == 10
    assert state_tuple(ten) == (100, 99, 0, 0, 0)
    ten.append(100, "a", b"", b"x", 1)
    assert state_tuple(ten) == (100, 100, 1, 0, 1)


def test_compact_brand_new_store(make_store) -> None:
    store = make_store()
    assert store.compact(5) == 0
    assert state_tuple(store) == (5, 4, 0, 0, 0)


# --- truncate -------------------------------------------------------------------------------------


def test_truncate_middle_then_append_reuses_seqs(ten) -> None:
    ten.truncate(6)
    assert state_tuple(ten) == (1, 6, 6, 0, 4)
    assert ten.load_last("a").seq == 1
    assert ten.load_last("b").seq == 5
    ten.append(7, "b", b"", b"new", 1)
    assert ten.load_last("b").seq == 7
    assert ten.load(7).payload == b"new"
    assert_consistent(ten)


def test_truncate_keeps_interior_gaps(ten) -> None:
    ten.delete(3)
    ten.delete(8)
    ten.truncate(8)
    assert state_tuple(ten) == (1, 8, 6, 2, 5)


def test_truncate_everything(ten) -> None:
    ten.compact(3)
    ten.truncate(2)  # first_seq - 1
    assert state_tuple(ten) == (3, 2, 0, 0, 0)
    put(ten, "a")
    assert state_tuple(ten) == (3, 3, 1, 0, 1)


def test_truncate_to_last_is_a_no_op(ten) -> None:
    before = ten.state()
    ten.truncate(10)
    assert ten.state() == before


def test_truncate_of_an_empty_store_to_its_last_seq_is_a_no_op(make_store) -> None:
    store = make_store()
    store.truncate(0)
    assert state_tuple(store) == (0, 0, 0, 0, 0)
    put_many(store, ["a", "b"])
    store.purge()
    store.truncate(2)
    assert state_tuple(store) == (3, 2, 0, 0, 0)


@pytest.mark.parametrize("seq", [11, 1, -1])
def test_truncate_outside_range_is_refused(ten, seq: int) -> None:
    ten.compact(3)
    before = ten.state()
    with pytest.raises(BadRequest):
        ten.truncate(seq)
    assert ten.state() == before


# --- expire ---------------------------------------------------------------------------------------


def test_expire_from_head_stops_at_first_young_message(make_store) -> None:
    store = make_store()
    for ts in (10, 50, 20, 60, 5):
        put(store, "a", ts=ts)
    assert store.expire(30) == 1  # seq 2 (50) is young: seq 3 (20) stays although older than 30
    assert live_seqs(store) == [2, 3, 4, 5]
    assert store.expire(50) == 0  # below the cut-off only: 50 is not below 50
    assert store.expire(51) == 2
    assert live_seqs(store) == [4, 5]
    assert store.expire(1_000) == 2
    assert state_tuple(store) == (6, 5, 0, 0, 0)


def test_expire_empty_store(make_store) -> None:
    store = make_store()
    assert store.expire(10**18) == 0
    assert state_tuple(store) == (0, 0, 0, 0, 0)


# --- skip -----------------------------------------------------------------------------------------


def test_skip_on_brand_new_store(make_store) -> None:
    store = make_store()
    store.skip(1, 3)
    assert state_tuple(store) == (4, 3, 0, 0, 0)
    put(store, "a")
    assert state_tuple(store) == (4, 4, 1, 0, 1)


def test_skip_after_messages_leaves_a_gap(ten) -> None:
    ten.skip(11)
    ten.skip(12, 5)
    assert state_tuple(ten) == (1, 16, 10, 6, 5)
    put(ten, "z")
    assert ten.load_last().seq == 17


def test_skip_on_purged_store_moves_first(ten) -> None:
    ten.purge()
    ten.skip(11, 4)
    assert state_tuple(ten) == (15, 14, 0, 0, 0)


# --- persistence ----------------------------------------------------------------------------------

CHANGES = {
    "delete": lambda s: (s.delete(3), s.delete(1)),
    "erase": lambda s: (s.erase(10), s.erase(4)),
    "purge_all": lambda s: s.purge(),
    "purge_subject": lambda s: s.purge(subject="a.*", keep=1),
    "compact": lambda s: s.compact(6),
    "compact_past_last": lambda s: s.compact(40),
    "truncate": lambda s: s.truncate(4),
    "expire": lambda s: s.expire(45),
    "skip": lambda s: s.skip(11, 7),
    "purge_then_skip": lambda s: (s.purge(), s.skip(11, 2)),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_removals_survive_reopen(ten, reopen, change: str) -> None:
    CHANGES[change](ten)
    ten.sync()
    before = snapshot(ten)
    ten = reopen(ten)
    assert snapshot(ten) == before
    assert_consistent(ten)
    put(ten, "after")
    assert ten.state().last_seq == before[0].last_seq + 1
