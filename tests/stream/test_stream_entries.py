"""Stream entries: every kind round-trips, and malformed bytes raise `MalformedEntry` and nothing else.

Method: hypothesis generates valid values of every kind and checks `decode(encode(x)) == x`; fuzzing
feeds random bytes, every truncation and byte flips of valid encodings to the decoder, which must either
return a value (that re-encodes to the same bytes) or raise `MalformedEntry` with a reason.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.stream import entries
from jsraft.stream.entries import (
    AuditEntry, ConfigEntry, ConsumerEntry, DeleteEntry, ExpireEntry, MsgsBatch, PurgeEntry, decode_entry,
    encode_entry,
)
from jsraft.stream.errors import MalformedEntry

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
SEQ = st.integers(min_value=1, max_value=1 << 62)
TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzé0123456789_-", min_size=1, max_size=8)
SUBJECT = st.lists(TOKEN, min_size=1, max_size=4).map(".".join)
MSG = st.tuples(SUBJECT, st.binary(max_size=64), st.binary(max_size=128), U64, st.text(max_size=16),
                st.sampled_from([0, entries.FLAG_ROLLUP_SUBJECT, entries.FLAG_ROLLUP_ALL]))
MSGS = st.builds(MsgsBatch, SEQ, st.lists(MSG, min_size=1, max_size=20))
DELETE = st.builds(DeleteEntry, seq=SEQ, erase=st.booleans())
PURGE = st.one_of(
    st.builds(PurgeEntry, subject=st.none() | SUBJECT, seq=st.none() | SEQ, last_seq=U64),
    st.builds(PurgeEntry, subject=st.none() | SUBJECT, keep=st.none() | SEQ, last_seq=U64),
)
ENTRY = st.one_of(
    MSGS, DELETE, PURGE,
    st.builds(ExpireEntry, cutoff_ns=U64, up_to_seq=U64),
    st.builds(ConfigEntry, raw=st.binary(min_size=1, max_size=64)),
    st.builds(AuditEntry, audit_id=U64),
    st.builds(ConsumerEntry, body=st.binary(max_size=64)),
)


@settings(max_examples=300, deadline=None)
@given(ENTRY)
def test_every_kind_round_trips(entry):
    data = encode_entry(entry)
    assert decode_entry(data) == entry
    assert encode_entry(decode_entry(data)) == data


def _decode_or_malformed(data: bytes) -> None:
    try:
        value = decode_entry(data)
    except MalformedEntry as error:
        assert error.description and error.err_code == 20500
        return
    assert encode_entry(value) == data  # whatever decodes is canonical


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_are_malformed_or_canonical(data):
    _decode_or_malformed(b"\x01" + data)
    _decode_or_malformed(data)


@settings(max_examples=100, deadline=None)
@given(ENTRY, st.data())
def test_truncations_and_flips_never_escape_as_other_errors(entry, data):
    encoded = encode_entry(entry)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    _decode_or_malformed(encoded[:cut])
    _decode_or_malformed(encoded + data.draw(st.binary(min_size=1, max_size=4)))
    position = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    flipped = bytearray(encoded)
    flipped[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    _decode_or_malformed(bytes(flipped))


def test_msgs_entry_layout_is_explicit_about_sequences():
    data = entries.encode_msgs(41, [(b"orders.a", b"", b"one", 7, b"id-1", 0), (b"orders.b", b"h", b"", 8, b"", 0)])
    batch = decode_entry(data)
    assert (batch.first_seq, batch.last_seq) == (41, 42)
    assert batch.msgs == [("orders.a", b"", b"one", 7, "id-1", 0), ("orders.b", b"h", b"", 8, "", 0)]
    assert entries.entry_kind(data) is entries.EntryKind.MSGS


@pytest.mark.parametrize("data, reason", [
    (b"", "shorter than its envelope"),
    (b"\x02\x01", "version 2"),
    (b"\x01\x63", "unknown stream entry kind"),
    (entries.encode_delete(5)[:-1], "DELETE entry has"),
    (entries.encode_delete(5)[:-1] + b"\x02", "erase"),
    (entries.encode_config(b"x")[:2], "CONFIG entry is empty"),
    (b"\x01\x01" + (1).to_bytes(8, "little") + (0).to_bytes(4, "little"), "holds 0 messages"),
    (entries.encode_msgs(1, [(b"a", b"", b"p", 1, b"", 0)]) + b"z", "trailing"),
    (entries.encode_msgs(1, [(b"a", b"", b"p", 1, b"", 3)]), "flags"),
    (entries.encode_msgs(1, [(b"\xff", b"", b"p", 1, b"", 0)]), "does not decode"),
    (entries.encode_purge(None, 5, None, 9)[:-2] + b"\x01\x00", "does not match"),
])
def test_malformed_entries_say_why(data, reason):
    with pytest.raises(MalformedEntry, match=reason):
        decode_entry(data)


def test_purge_refuses_seq_with_keep():
    data = bytearray(entries.encode_purge(None, 5, None, 9))
    data[2] |= entries.PURGE_KEEP
    with pytest.raises(MalformedEntry, match="seq with keep|carries"):
        decode_entry(bytes(data))


def test_msgs_payloads_are_views_of_the_entry_only_when_asked():
    """Invariant 5: `payload_views` gives each payload as a view of the entry's bytes (no copy), equal to
    the copy the default decode makes; every other field is decoded alike."""
    data = encode_entry(MsgsBatch(5, [("a.b", b"NATS/1.0\r\n\r\n", b"x" * 3000, 1, "", 0), ("a.c", b"", b"yz", 2, "id", 0)]))
    copied, viewed = decode_entry(data), decode_entry(data, payload_views=True)
    assert viewed == copied and viewed.first_seq == 5
    assert all(type(m[2]) is bytes for m in copied.msgs)
    assert all(type(m[2]) is memoryview and m[2].obj is data for m in viewed.msgs)
    assert [bytes(m[2]) for m in viewed.msgs] == [b"x" * 3000, b"yz"]
    assert all(type(m[1]) is bytes for m in viewed.msgs)  # headers are kept by more than the store: copied
