"""Stream snapshots: the binary format round-trips and refuses anything damaged; `GroupState` queries.

Method: hypothesis builds consistent group states (deleted ranges inside `[first_seq, last_seq]`, counts
that add up) and snapshots around them; each must decode to itself, and every truncation or flipped byte
of an encoding must raise `MalformedSnapshot` (the trailing CRC32C covers every byte).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.stream.errors import MalformedSnapshot
from jsraft.stream.snapshot import GroupState, StreamSnapshot, decode_snapshot, encode_snapshot

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


@st.composite
def group_states(draw) -> GroupState:
    first = draw(st.integers(min_value=1, max_value=1 << 40))
    gaps = sorted(set(draw(st.lists(st.integers(min_value=1, max_value=200), max_size=10))))
    deleted, cursor = [], first
    for gap in gaps:
        start = cursor + gap
        deleted.append((start, start + draw(st.integers(min_value=0, max_value=5))))
        cursor = deleted[-1][1] + 1
    last = cursor + draw(st.integers(min_value=0, max_value=50))
    num_deleted = sum(b - a + 1 for a, b in deleted)
    ranges = tuple(sorted(draw(st.dictionaries(st.integers(0, 1000), U64, max_size=5)).items()))
    return GroupState(first_seq=first, last_seq=last, msgs=last - first + 1 - num_deleted, bytes=draw(U64),
                      digest=draw(U64), num_deleted=num_deleted, deleted=tuple(deleted), digest_ranges=ranges)


SNAPSHOTS = st.builds(
    StreamSnapshot, applied_index=U64, group=group_states(), raw_config=st.binary(max_size=40),
    last_msg_id=st.text(max_size=10), last_timestamp_ns=U64, last_audit_id=U64,
    dedupe=st.lists(st.tuples(st.text(max_size=8), U64, U64), max_size=5).map(tuple), extra=st.binary(max_size=20),
)


@settings(max_examples=200, deadline=None)
@given(SNAPSHOTS)
def test_snapshots_round_trip(snapshot):
    assert decode_snapshot(encode_snapshot(snapshot)) == snapshot


@settings(max_examples=50, deadline=None)
@given(SNAPSHOTS, st.data())
def test_damaged_snapshots_are_refused(snapshot, data):
    encoded = encode_snapshot(snapshot)
    with pytest.raises(MalformedSnapshot):
        decode_snapshot(encoded[: data.draw(st.integers(0, len(encoded) - 1))])
    position = data.draw(st.integers(0, len(encoded) - 1))
    flipped = bytearray(encoded)
    flipped[position] ^= 0x01
    with pytest.raises(MalformedSnapshot):
        decode_snapshot(bytes(flipped))


def test_inconsistent_group_states_are_refused():
    with pytest.raises(MalformedSnapshot, match="num_deleted"):
        GroupState(first_seq=1, last_seq=10, msgs=10, bytes=0, digest=0, num_deleted=1, deleted=((3, 3),)).check()
    with pytest.raises(MalformedSnapshot, match="out of order"):
        GroupState(first_seq=1, last_seq=10, msgs=8, bytes=0, digest=0, num_deleted=2,
                   deleted=((5, 5), (3, 3))).check()


def test_is_live_follows_the_deleted_ranges():
    group = GroupState(first_seq=5, last_seq=20, msgs=12, bytes=0, digest=0, num_deleted=4,
                       deleted=((7, 8), (15, 16))).check()
    assert [s for s in range(1, 23) if group.is_live(s)] == [5, 6, 9, 10, 11, 12, 13, 14, 17, 18, 19, 20]
