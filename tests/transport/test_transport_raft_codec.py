"""The Raft message codec: exact round trips for every message class, and strict, total decoding.

Method: a Hypothesis strategy builds any instance of every class in `raft.messages.MESSAGE_TYPES` (the test
fails if a class is added without one), with field values across their whole u64/str8 ranges, and checks
`decode(encode(m)) == m`. Hand-written examples pin a few layouts. Then the strictness properties: every
proper prefix of a valid encoding, random bytes, and valid encodings with mutated, inserted or deleted
bytes either decode to a message or raise `RaftCodecError` — any other exception fails the test (codec
invariant 2). Specific malformations (unknown version, tag, entry type, flag bits, trailing bytes, invalid
UTF-8, impossible counts) are checked to raise with a message that names the problem.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.errors import InvariantViolation
from jsraft.raft import (
    AppendEntries, AppendEntriesResponse, ConfState, Entry, EntryType, InstallSnapshot, InstallSnapshotResponse,
    PeerProtocolError, RequestVote, RequestVoteResponse, SnapshotMeta, StatusProbe, StatusProbeResponse,
    TermQuery, TermQueryResponse, TimeoutNow,
)
from jsraft.raft.messages import MESSAGE_TYPES
from jsraft.transport.errors import RaftCodecError, TransportProtocolError
from jsraft.transport.raft_codec import CODEC_VERSION, decode_message, encode_message

_PROPERTY = settings(max_examples=300, derandomize=True, deadline=None, database=None)

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
node_id = st.text(min_size=1, max_size=12).filter(lambda s: len(s.encode()) <= 255)
# Node ids up to the u8 bound, multi-byte UTF-8 included.
long_node_id = st.text(alphabet="nø€", min_size=1, max_size=85)
entry = st.builds(Entry, u64, u64, st.sampled_from(list(EntryType)), st.binary(max_size=64))
conf = st.builds(ConfState, voters=st.lists(node_id, max_size=5).map(tuple),
                 learners=st.lists(node_id, max_size=3).map(tuple))
meta = st.builds(SnapshotMeta, index=u64, term=u64, conf=conf)
head = dict(from_id=st.one_of(node_id, long_node_id), to_id=node_id, term=u64)

STRATEGIES = {
    AppendEntries: st.builds(AppendEntries, **head, leader_id=node_id, prev_log_index=u64, prev_log_term=u64,
                             entries=st.lists(entry, max_size=4).map(tuple), leader_commit=u64,
                             heartbeat=st.booleans(), read_round=u64),
    AppendEntriesResponse: st.builds(AppendEntriesResponse, **head, success=st.booleans(), match_index=u64,
                                     rejected_index=u64, reject_hint_index=u64, reject_hint_term=u64,
                                     heartbeat=st.booleans(), read_round=u64, repairing=st.booleans()),
    RequestVote: st.builds(RequestVote, **head, last_log_index=u64, last_log_term=u64, pre_vote=st.booleans(),
                           leadership_transfer=st.booleans()),
    RequestVoteResponse: st.builds(RequestVoteResponse, **head, vote_granted=st.booleans(), pre_vote=st.booleans(),
                                   repairing=st.booleans()),
    InstallSnapshot: st.builds(InstallSnapshot, **head, leader_id=node_id, meta=meta, offset=u64,
                               data=st.binary(max_size=200), total_bytes=u64, done=st.booleans()),
    InstallSnapshotResponse: st.builds(InstallSnapshotResponse, **head, snapshot_index=u64, chunk_offset=u64,
                                       next_offset=u64, done=st.booleans(), match_index=u64),
    TimeoutNow: st.builds(TimeoutNow, **head),
    StatusProbe: st.builds(StatusProbe, **head, repairing=st.booleans()),
    StatusProbeResponse: st.builds(StatusProbeResponse, **head, repairing=st.booleans(),
                                   leader_id=st.one_of(st.none(), node_id)),
    TermQuery: st.builds(TermQuery, **head, query_id=u64),
    TermQueryResponse: st.builds(TermQueryResponse, **head, query_id=u64, term_known=st.booleans()),
}
any_message = st.one_of(*STRATEGIES.values())


def test_every_message_class_has_a_strategy():
    assert set(STRATEGIES) == set(MESSAGE_TYPES)


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(data=st.data())
def test_round_trip_every_message_type(cls, data):
    message = data.draw(STRATEGIES[cls])
    encoded = encode_message(message)
    assert encoded[0] == CODEC_VERSION
    assert decode_message(encoded) == message
    assert decode_message(memoryview(bytearray(encoded))) == message


def test_layout_of_a_heartbeat():
    message = AppendEntries(from_id="n1", to_id="n2", term=5, leader_id="n1", prev_log_index=9, prev_log_term=4,
                            leader_commit=8, heartbeat=True)
    encoded = encode_message(message)
    assert encoded[:2] == bytes([CODEC_VERSION, 1])
    assert encoded[2:8] == b"\x02n1\x02n2"
    assert struct.unpack_from("<Q", encoded, 8)[0] == 5
    assert encoded.endswith(b"\x01" + struct.pack("<I", 0))  # heartbeat flag, zero entries


def test_codec_error_is_both_a_transport_and_a_raft_peer_error():
    with pytest.raises(RaftCodecError) as info:
        decode_message(b"")
    assert isinstance(info.value, TransportProtocolError) and isinstance(info.value, PeerProtocolError)
    assert info.value.err_code == 20404


def _valid() -> bytes:
    return encode_message(AppendEntries(
        from_id="n1", to_id="n2", term=3, leader_id="n1", prev_log_index=1, prev_log_term=1,
        entries=(Entry(2, 3, EntryType.NORMAL, b"data"),), leader_commit=1))


@pytest.mark.parametrize("data, words", [
    (b"", "truncated"),
    (bytes([CODEC_VERSION + 1, 1]) + _valid()[2:], "version"),
    (bytes([CODEC_VERSION, 99]) + _valid()[2:], "unknown raft message tag 99"),
    (_valid() + b"\x00", "trailing"),
    (_valid()[:-1], "truncated"),
    (bytes([CODEC_VERSION, 7, 2]) + b"\xff\xfe" + b"\x02n2" + bytes(8), "UTF-8"),
    (encode_message(TimeoutNow(from_id="n1", to_id="n2", term=1))[:-8], "truncated"),
    (encode_message(StatusProbe(from_id="n1", to_id="n2", term=1, repairing=False))[:-1] + b"\x02", "flag"),
    (encode_message(RequestVote(from_id="n1", to_id="n2", term=1, last_log_index=0, last_log_term=0))[:-1]
     + b"\x80", "flag"),
])
def test_malformed_inputs_raise_a_clear_codec_error(data, words):
    with pytest.raises(RaftCodecError, match=words):
        decode_message(data)


def test_unknown_entry_type_and_impossible_counts():
    valid = _valid()
    entry_at = valid.index(b"data") - 21  # index, term, type, data length precede the data
    bad_type = bytearray(valid)
    bad_type[entry_at + 16] = 9
    with pytest.raises(RaftCodecError, match="unknown entry type 9"):
        decode_message(bytes(bad_type))
    count_at = entry_at - 4
    huge = bytearray(valid)
    huge[count_at:count_at + 4] = struct.pack("<I", 0xFFFFFFFF)
    with pytest.raises(RaftCodecError, match="entry count"):
        decode_message(bytes(huge))
    long_data = bytearray(valid)
    long_data[entry_at + 17:entry_at + 21] = struct.pack("<I", 1 << 30)
    with pytest.raises(RaftCodecError, match="truncated"):
        decode_message(bytes(long_data))


@pytest.mark.parametrize("message", [
    TimeoutNow(from_id="n1", to_id="n2", term=-1),
    TimeoutNow(from_id="n1", to_id="n2", term=1 << 64),
    TimeoutNow(from_id="n" * 256, to_id="n2", term=1),
    AppendEntries(from_id="n1", to_id="n2", term=1, leader_id="n1", prev_log_index=-1, prev_log_term=0,
                  leader_commit=0),
])
def test_encoding_an_impossible_message_is_a_bug(message):
    with pytest.raises(InvariantViolation):
        encode_message(message)


@_PROPERTY
@given(any_message)
def test_every_proper_prefix_is_rejected(message):
    encoded = encode_message(message)
    for end in range(len(encoded)):
        with pytest.raises(RaftCodecError):
            decode_message(encoded[:end])


@_PROPERTY
@given(st.binary(max_size=256))
def test_random_bytes_decode_or_raise_the_codec_error(data):
    try:
        decode_message(data)
    except RaftCodecError:
        pass


@_PROPERTY
@given(any_message, st.data())
def test_mutated_encodings_decode_or_raise_the_codec_error(message, data):
    encoded = bytearray(encode_message(message))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        action = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        position = data.draw(st.integers(min_value=0, max_value=max(0, len(encoded) - 1)))
        if action == "flip" and encoded:
            encoded[position] ^= data.draw(st.integers(min_value=1, max_value=255))
        elif action == "insert":
            encoded.insert(position, data.draw(st.integers(min_value=0, max_value=255)))
        elif encoded:
            del encoded[position]
    try:
        decoded = decode_message(bytes(encoded))
    except RaftCodecError:
        return
    assert type(decoded) in MESSAGE_TYPES
    assert decode_message(encode_message(decoded)) == decoded  # whatever decodes is a well-formed message
