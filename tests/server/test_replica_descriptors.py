"""The descriptor arithmetic of `server/groups/replica_descriptors.py` and what counts as running out.

Method: the pure functions with hand-picked numbers at the boundary (exactly the limit, one over); the
process checks with a stand-in count and limit (given to `Headroom`), since a test cannot
lower this process's limit without harming the others; `out_of_descriptors` against errnos. The
per-replica count is checked against a real replica's files in `tests/cli/test_descriptor_exhaustion.py`
(the node refuses where the count says it would run out, and never runs out first).
"""

from __future__ import annotations

import errno

import pytest

from jsraft.meta.errors import InsufficientResources
from jsraft.server.groups import replica_descriptors as rd


def test_a_replica_holds_its_wal_segment_hard_state_and_store_block():
    assert rd.DESCRIPTORS_PER_REPLICA == 3


@pytest.mark.parametrize("limit, reserve", [(100, 64), (1280, 64), (1300, 65), (20000, 1000)])
def test_the_client_reserve_is_64_or_five_percent(limit, reserve):
    assert rd.client_reserve(limit) == reserve


def test_room_is_the_limit_less_the_reserve():
    assert rd.has_room(open_count=133, needed=3, limit=200)  # 133 + 3 + 64 == 200
    assert not rd.has_room(open_count=134, needed=3, limit=200)


class Counts:
    """A stand-in `/proc/self/fd` count that records how often it was taken."""

    def __init__(self, count: int | None) -> None:
        self.count, self.taken = count, 0

    def __call__(self) -> int | None:
        self.taken += 1
        return self.count


def test_checks_refuse_only_without_room():
    counts = Counts(133)
    rd.Headroom(counts, lambda: 200).check_room()
    rd.Headroom(counts, lambda: 200).check_open_room()
    counts.count = 134
    with pytest.raises(InsufficientResources) as caught:
        rd.Headroom(counts, lambda: 200).check_room()
    assert caught.value.to_api() == {"code": 503, "err_code": 10023, "description": "insufficient resources"}
    with pytest.raises(OSError) as raised:
        rd.Headroom(counts, lambda: 200).check_open_room()
    assert rd.out_of_descriptors(raised.value)


def test_far_from_the_limit_the_count_is_estimated_and_near_it_taken_each_time():
    counts = Counts(100)
    headroom = rd.Headroom(counts, lambda: 20000)  # reserve 1000
    for _ in range(rd.RECOUNT_EVERY_CHECKS):
        assert headroom.shortage() is None
    assert counts.taken == 1  # one count, then 63 estimates: 100 + 3 per replica let in
    assert headroom.shortage() is None
    assert counts.taken == 2  # every RECOUNT_EVERY_CHECKS checks, clients having come and gone meanwhile
    counts.count, counts.taken = 20000 - 2 * 1000 - 3, 0  # within two reserves of the limit
    headroom = rd.Headroom(counts, lambda: 20000)
    for _ in range(3):
        assert headroom.shortage() is None
    assert counts.taken == 3  # counted at every check
    counts.count = 20000 - 1000 - 2  # one descriptor short, on a fresh count
    assert "kept for clients" in headroom.shortage()


def test_no_count_no_refusal():
    assert rd.Headroom(Counts(None), lambda: 200).shortage() is None


def test_no_limit_no_refusal():
    assert rd.Headroom(Counts(10**9), lambda: rd.resource.RLIM_INFINITY).shortage() is None


def test_this_process_count_is_taken():
    assert rd.open_count() is None or rd.open_count() > 0


@pytest.mark.parametrize("number, out", [(errno.EMFILE, True), (errno.ENFILE, True), (errno.EIO, False),
                                         (errno.ENOSPC, False)])
def test_only_emfile_and_enfile_are_running_out(number, out):
    assert rd.out_of_descriptors(OSError(number, "x")) is out
    assert not rd.out_of_descriptors(ValueError("x"))
