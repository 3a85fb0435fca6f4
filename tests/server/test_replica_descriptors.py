"""The descriptor arithmetic of `server/groups/replica_descriptors.py` and what counts as running out.

Method: the pure functions with hand-picked numbers at the boundary (exactly the limit, one over); the
process checks with a stand-in count and limit (monkeypatched module functions), since a test cannot
lower this process's limit without harming the others; `out_of_descriptors` against errnos. The
per-replica count is checked against a real replica's files in `tests/cli/test_descriptor_exhaustion.py`
(the node refuses where the count says it would run out, and never runs out first).
"""

from __future__ import annotations

import errno

import pytest

from jsraft.errors import InsufficientResources
from jsraft.server.groups import replica_descriptors as rd


def test_a_replica_holds_its_wal_segment_hard_state_and_store_block():
    assert rd.DESCRIPTORS_PER_REPLICA == 3


@pytest.mark.parametrize("limit, reserve", [(100, 64), (1280, 64), (1300, 65), (20000, 1000)])
def test_the_client_reserve_is_64_or_five_percent(limit, reserve):
    assert rd.client_reserve(limit) == reserve


def test_room_is_the_limit_less_the_reserve():
    assert rd.has_room(open_count=133, needed=3, limit=200)  # 133 + 3 + 64 == 200
    assert not rd.has_room(open_count=134, needed=3, limit=200)


def test_checks_refuse_only_without_room(monkeypatch):
    monkeypatch.setattr(rd, "open_limit", lambda: 200)
    monkeypatch.setattr(rd, "open_count", lambda: 133)
    rd.check_room()
    rd.check_open_room()
    monkeypatch.setattr(rd, "open_count", lambda: 134)
    with pytest.raises(InsufficientResources) as caught:
        rd.check_room()
    assert caught.value.to_api() == {"code": 503, "err_code": 10023, "description": "insufficient resources"}
    with pytest.raises(OSError) as raised:
        rd.check_open_room()
    assert rd.out_of_descriptors(raised.value)


def test_no_count_no_refusal(monkeypatch):
    monkeypatch.setattr(rd, "open_count", lambda: None)
    assert rd.shortage() is None


def test_this_process_count_is_taken():
    assert rd.open_count() is None or rd.open_count() > 0


@pytest.mark.parametrize("number, out", [(errno.EMFILE, True), (errno.ENFILE, True), (errno.EIO, False),
                                         (errno.ENOSPC, False)])
def test_only_emfile_and_enfile_are_running_out(number, out):
    assert rd.out_of_descriptors(OSError(number, "x")) is out
    assert not rd.out_of_descriptors(ValueError("x"))
