"""Tests for `jsraft.codec.records`: framing, CRC detection, the damage-classifying scanner, digests.

Method: records are built with `encode_record` / `encode_message` and damaged by hand in the ways a
disk damages data — one flipped bit (at every bit position of a small record), a corrupted length
field (including one that points exactly at a later record boundary, the case that can make a scanner
skip good records), garbage inserted between records, a zeroed page, a cut-off or zero-filled tail.
Every scan is checked against the same three rules: (1) every record not touched by the damage comes
back, byte for byte and in order; (2) damage followed by any valid record is `damaged` and is never
called a torn tail; (3) only damage with nothing valid after it is `torn_tail`. The scan result must
also tile the buffer exactly (records, damaged ranges and the torn tail cover every byte once).
A Hypothesis test repeats this for random record lists and one random corruption each, derandomized
and bounded.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.codec import (
    HEADER_BYTES,
    Kind,
    RecordView,
    ScanResult,
    decode_message_body,
    encode_message,
    encode_record,
    message_digest,
    read_record,
    scan_records,
)
from jsraft.errors import CorruptRecord

_U64_MAX = (1 << 64) - 1
_PROPERTY = settings(max_examples=250, derandomize=True, deadline=None, database=None)


# --- Helpers ------------------------------------------------------------------------------------


def _records(count: int, *, seed: int = 7, body_bytes_max: int = 60) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for seq in range(1, count + 1):
        body = rng.randbytes(rng.randint(0, body_bytes_max))
        out.append(encode_record(Kind.MSG, seq, 1_700_000_000_000_000_000 + seq, body))
    return out


def _offsets(records: list[bytes]) -> list[int]:
    return list(itertools.accumulate((len(r) for r in records[:-1]), initial=0))


def _flip(buffer: bytes, bit: int) -> bytes:
    out = bytearray(buffer)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _found(buffer: bytes, result: ScanResult) -> list[bytes]:
    return [buffer[r.offset : r.offset + r.length] for r in result.records]


def _assert_tiles(buffer: bytes, result: ScanResult, start: int = 0) -> None:
    """Records and damaged ranges cover [start, torn_tail or end) contiguously, in order."""
    pieces = [(r.offset, r.offset + r.length) for r in result.records] + list(result.damaged)
    pieces.sort()
    position = start
    for lo, hi in pieces:
        assert lo == position, (pieces, position)
        assert hi > lo
        position = hi
    stop = len(buffer) if result.torn_tail is None else result.torn_tail
    assert position == stop


def _assert_records_verify(buffer: bytes, result: ScanResult) -> None:
    for view in result.records:
        assert read_record(buffer, view.offset) == view


# --- Framing and round trips ---------------------------------------------------------------------


def test_header_is_25_bytes() -> None:
    assert HEADER_BYTES == 25
    assert len(encode_record(Kind.MSG, 1, 2)) == HEADER_BYTES


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize(("ident_a", "ident_b"), [(0, 0), (1, 2), (_U64_MAX, _U64_MAX), (2**40, 3)])
@pytest.mark.parametrize("body", [b"", b"x", bytes(range(256)) * 3])
def test_record_round_trip(kind: Kind, ident_a: int, ident_b: int, body: bytes) -> None:
    record = encode_record(kind, ident_a, ident_b, body)
    assert len(record) == HEADER_BYTES + len(body)
    prefix = b"\x00" * 11
    buffer = prefix + record + b"tail"
    view = read_record(buffer, len(prefix), len(prefix) + len(record))
    assert view == RecordView(len(prefix), len(record), view.crc, int(kind), ident_a, ident_b)
    assert buffer[view.offset + HEADER_BYTES : view.offset + view.length] == body
    # A memoryview reads the same as bytes.
    assert read_record(memoryview(buffer), len(prefix), len(prefix) + len(record)) == view


def test_encode_record_refuses_identities_that_do_not_fit() -> None:
    with pytest.raises(Exception):
        encode_record(Kind.MSG, 1 << 64, 0)
    with pytest.raises(Exception):
        encode_record(Kind.MSG, -1, 0)


def test_message_round_trip() -> None:
    record, crc = encode_message(42, 123_456, b"orders.new", b"NATS/1.0\r\nA: b\r\n\r\n", b"payload")
    view = read_record(record, 0)
    assert (view.kind, view.ident_a, view.ident_b, view.crc) == (Kind.MSG, 42, 123_456, crc)
    body = record[HEADER_BYTES:]
    assert decode_message_body(body) == (b"orders.new", b"NATS/1.0\r\nA: b\r\n\r\n", b"payload")
    assert decode_message_body(memoryview(body)) == (b"orders.new", b"NATS/1.0\r\nA: b\r\n\r\n", b"payload")


def test_message_round_trip_with_empty_parts() -> None:
    record, _ = encode_message(1, 0, b"a", b"", b"")
    assert decode_message_body(record[HEADER_BYTES:]) == (b"a", b"", b"")


def test_message_crc_depends_on_every_field() -> None:
    base = encode_message(1, 2, b"s", b"h", b"p")[1]
    variants = [
        encode_message(9, 2, b"s", b"h", b"p")[1],
        encode_message(1, 9, b"s", b"h", b"p")[1],
        encode_message(1, 2, b"t", b"h", b"p")[1],
        encode_message(1, 2, b"s", b"i", b"p")[1],
        encode_message(1, 2, b"s", b"h", b"q")[1],
        # Same bytes, different split between subject and headers: still a different record.
        encode_message(1, 2, b"sh", b"", b"p")[1],
    ]
    assert base not in variants
    assert len(set(variants)) == len(variants)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x01",
        b"\x01\x00\x00\x00\x00",  # prefix is 6 bytes
        b"\x05\x00\x00\x00\x00\x00abc",  # subject claims 5 bytes, 3 present
        b"\x01\x00\x05\x00\x00\x00a",  # headers claim 5 bytes, none present
        b"\xff\xff\xff\xff\xff\xff",
    ],
)
def test_decode_message_body_rejects_malformed_bodies(body: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode_message_body(body)


# --- read_record detects every single-bit flip -----------------------------------------------------


def test_every_flipped_bit_of_a_record_is_detected() -> None:
    record, _ = encode_message(7, 99, b"a.b", b"h", b"payload")
    buffer = record + encode_record(Kind.MSG, 8, 100, b"next")  # so a grown length can still fit
    assert read_record(buffer, 0).length == len(record)
    for bit in range(len(record) * 8):
        with pytest.raises(CorruptRecord):
            read_record(_flip(buffer, bit), 0)


def test_read_record_refuses_truncated_and_out_of_range_input() -> None:
    record = encode_record(Kind.WAL_ENTRY, 3, 1, b"data")
    for cut in range(len(record)):
        with pytest.raises(CorruptRecord):
            read_record(record[:cut], 0)
    with pytest.raises(CorruptRecord):
        read_record(record, 0, len(record) - 1)  # `end` cuts the record short
    with pytest.raises(CorruptRecord):
        read_record(record + record, 1)  # not a record boundary
    with pytest.raises(CorruptRecord):
        read_record(bytes(64), 0)  # zeros are not a record


def test_read_record_refuses_unknown_kinds() -> None:
    with pytest.raises(CorruptRecord):
        read_record(encode_record(200, 1, 1, b"x"), 0)


# --- scan_records --------------------------------------------------------------------------------


def test_scan_of_intact_records() -> None:
    records = _records(20)
    buffer = b"".join(records)
    result = scan_records(buffer)
    assert _found(buffer, result) == records
    assert [r.offset for r in result.records] == _offsets(records)
    assert [r.ident_a for r in result.records] == list(range(1, 21))
    assert result.damaged == []
    assert result.torn_tail is None
    _assert_tiles(buffer, result)
    _assert_records_verify(buffer, result)


def test_scan_of_empty_buffer() -> None:
    assert scan_records(b"") == ScanResult([], [], None)


def test_scan_from_a_start_offset() -> None:
    header = b"JSRF\x01\x02\x00\x00"
    records = _records(5)
    buffer = header + b"".join(records)
    result = scan_records(buffer, len(header))
    assert _found(buffer, result) == records
    assert result.damaged == [] and result.torn_tail is None
    _assert_tiles(buffer, result, len(header))


def test_scan_respects_the_kinds_it_is_given() -> None:
    wal = encode_record(Kind.WAL_ENTRY, 1, 1, b"entry")
    msg = encode_record(Kind.MSG, 1, 1, b"message")
    buffer = wal + msg + wal
    result = scan_records(buffer, kinds=frozenset({Kind.WAL_ENTRY}))
    # A record of a kind that does not belong in this file is damage, not data.
    assert _found(buffer, result) == [wal, wal]
    assert result.damaged == [(len(wal), len(wal) + len(msg))]
    assert result.torn_tail is None


@pytest.mark.parametrize("which", ["first", "middle"])
def test_flipped_bit_before_the_end_is_damage_and_scanning_resumes(which: str) -> None:
    records = _records(10)
    index = 0 if which == "first" else 5
    offsets = _offsets(records)
    buffer = b"".join(records)
    for bit_in_record in range(0, len(records[index]) * 8, 3):
        damaged = _flip(buffer, offsets[index] * 8 + bit_in_record)
        result = scan_records(damaged)
        assert _found(damaged, result) == records[:index] + records[index + 1 :], bit_in_record
        assert result.damaged == [(offsets[index], offsets[index] + len(records[index]))]
        assert result.torn_tail is None
        _assert_tiles(damaged, result)


def test_flipped_bit_in_the_last_record_is_a_torn_tail() -> None:
    records = _records(10)
    offsets = _offsets(records)
    buffer = b"".join(records)
    for bit_in_record in range(len(records[-1]) * 8):
        damaged = _flip(buffer, offsets[-1] * 8 + bit_in_record)
        result = scan_records(damaged)
        # Nothing valid follows the bad record, so it is (provably) a torn tail and nothing else.
        assert _found(damaged, result) == records[:-1]
        assert result.damaged == []
        assert result.torn_tail == offsets[-1]
        _assert_tiles(damaged, result)


@pytest.mark.parametrize("new_length", [0, 1, HEADER_BYTES - 1, HEADER_BYTES, 0xFFFFFFFF, 1 << 31])
def test_corrupted_length_in_a_middle_record_resumes_at_the_next_record(new_length: int) -> None:
    records = _records(10)
    offsets = _offsets(records)
    buffer = bytearray(b"".join(records))
    buffer[offsets[4] : offsets[4] + 4] = new_length.to_bytes(4, "little")
    result = scan_records(bytes(buffer))
    assert _found(bytes(buffer), result) == records[:4] + records[5:]
    assert result.damaged == [(offsets[4], offsets[5])]
    assert result.torn_tail is None


@pytest.mark.parametrize("skip", [1, 2, 4])
def test_corrupted_length_pointing_at_a_later_record_boundary_hides_nothing(skip: int) -> None:
    # A length bit flip can land exactly on a later record's start. The records in between are intact
    # and must be returned: trusting the damaged length would silently drop them.
    records = _records(10)
    offsets = _offsets(records)
    buffer = bytearray(b"".join(records))
    bogus_length = offsets[3 + skip + 1] - offsets[3]
    buffer[offsets[3] : offsets[3] + 4] = bogus_length.to_bytes(4, "little")
    result = scan_records(bytes(buffer))
    assert _found(bytes(buffer), result) == records[:3] + records[4:]
    assert result.damaged == [(offsets[3], offsets[4])]
    assert result.torn_tail is None


def test_single_bit_length_flip_landing_on_a_boundary() -> None:
    # The same case reached by one flipped bit: 32-byte records, bit 6 of a length turns 32 into 96.
    records = [encode_record(Kind.MSG, seq, 0, b"1234567") for seq in range(1, 9)]
    assert {len(r) for r in records} == {32}
    buffer = b"".join(records)
    damaged = _flip(buffer, 2 * 32 * 8 + 6)  # record 3 (index 2), length field, bit 6
    assert int.from_bytes(damaged[64:68], "little") == 96
    result = scan_records(damaged)
    assert [r.ident_a for r in result.records] == [1, 2, 4, 5, 6, 7, 8]
    assert result.damaged == [(64, 96)]


def test_garbage_between_records_is_damage() -> None:
    records = _records(6)
    garbage = bytes(random.Random(3).randbytes(37))
    buffer = b"".join(records[:3]) + garbage + b"".join(records[3:])
    result = scan_records(buffer)
    assert _found(buffer, result) == records
    start = sum(len(r) for r in records[:3])
    assert result.damaged == [(start, start + len(garbage))]
    assert result.torn_tail is None
    _assert_tiles(buffer, result)


def test_garbage_at_the_start_is_damage() -> None:
    records = _records(3)
    buffer = b"\xff" * 10 + b"".join(records)
    result = scan_records(buffer)
    assert _found(buffer, result) == records
    assert result.damaged == [(0, 10)]


@pytest.mark.parametrize("keep", [1, HEADER_BYTES - 1, HEADER_BYTES, HEADER_BYTES + 3])
def test_partial_record_at_the_end_is_a_torn_tail(keep: int) -> None:
    records = _records(5, body_bytes_max=60)
    last = encode_record(Kind.MSG, 6, 6, b"z" * 40)
    complete = b"".join(records)
    buffer = complete + last[:keep]
    result = scan_records(buffer)
    assert _found(buffer, result) == records
    assert result.damaged == []
    assert result.torn_tail == len(complete)
    _assert_tiles(buffer, result)


@pytest.mark.parametrize("zeros", [1, 24, 25, 4096])
def test_zero_filled_tail_is_a_torn_tail(zeros: int) -> None:
    records = _records(5)
    complete = b"".join(records)
    buffer = complete + bytes(zeros)
    result = scan_records(buffer)
    assert _found(buffer, result) == records
    assert result.damaged == []
    assert result.torn_tail == len(complete)


def test_zero_filled_page_in_the_middle_is_damage_and_scanning_resumes() -> None:
    records = _records(300, body_bytes_max=50)
    offsets = _offsets(records)
    buffer = bytearray(b"".join(records))
    page = (4096, 8192)
    assert len(buffer) > page[1] + 4096
    buffer[page[0] : page[1]] = bytes(page[1] - page[0])
    result = scan_records(bytes(buffer))
    untouched = [
        record
        for record, offset in zip(records, offsets)
        if offset + len(record) <= page[0] or offset >= page[1]
    ]
    assert _found(bytes(buffer), result) == untouched
    first_hit = max(o for o in offsets if o <= page[0])
    first_after = min(o for o in offsets if o >= page[1])
    assert result.damaged == [(first_hit, first_after)]
    assert result.torn_tail is None
    _assert_tiles(bytes(buffer), result)


def test_two_separate_damaged_regions() -> None:
    records = _records(10)
    offsets = _offsets(records)
    buffer = _flip(_flip(b"".join(records), offsets[2] * 8 + 100), offsets[7] * 8 + 100)
    result = scan_records(buffer)
    assert [r.ident_a for r in result.records] == [1, 2, 4, 5, 6, 7, 9, 10]
    assert result.damaged == [(offsets[2], offsets[3]), (offsets[7], offsets[8])]
    assert result.torn_tail is None


def test_damage_then_torn_tail() -> None:
    records = _records(6)
    offsets = _offsets(records)
    buffer = _flip(b"".join(records), offsets[1] * 8 + 77) + b"\x00" * 9
    result = scan_records(buffer)
    assert [r.ident_a for r in result.records] == [1, 3, 4, 5, 6]
    assert result.damaged == [(offsets[1], offsets[2])]
    assert result.torn_tail == sum(map(len, records))


# --- Property: one random corruption never hides an untouched record --------------------------------


_CORRUPTIONS = ("flip", "zero_range", "random_range", "insert", "truncate", "length", "length_to_boundary")


@st.composite
def records_and_corruption(draw: st.DrawFn) -> tuple[list[bytes], str, tuple[int, ...]]:
    bodies = draw(st.lists(st.binary(max_size=48), min_size=1, max_size=12))
    kind_choices = st.sampled_from([Kind.MSG, Kind.TOMBSTONE, Kind.WAL_ENTRY])
    kinds = draw(st.lists(kind_choices, min_size=len(bodies), max_size=len(bodies)))
    records = [
        encode_record(kind, seq, seq * 3, body) for seq, (kind, body) in enumerate(zip(kinds, bodies), 1)
    ]
    total = sum(map(len, records))
    mode = draw(st.sampled_from(_CORRUPTIONS))
    if mode == "flip":
        params: tuple[int, ...] = (draw(st.integers(0, total * 8 - 1)),)
    elif mode in ("zero_range", "random_range"):
        lo = draw(st.integers(0, total - 1))
        params = (lo, draw(st.integers(lo + 1, min(total, lo + 200))), draw(st.integers(0, 2**32)))
    elif mode == "insert":
        params = (draw(st.integers(0, total)), draw(st.integers(1, 64)), draw(st.integers(0, 2**32)))
    elif mode == "truncate":
        params = (draw(st.integers(0, total - 1)),)
    elif mode == "length":
        params = (draw(st.integers(0, len(records) - 1)), draw(st.integers(0, 0xFFFFFFFF)))
    else:
        first = draw(st.integers(0, len(records) - 1))
        params = (first, draw(st.integers(first + 1, len(records))))
    return records, mode, params


def _corrupt(
    records: list[bytes], mode: str, params: tuple[int, ...]
) -> tuple[bytes, list[tuple[int, int]], int]:
    """Apply one corruption; return the buffer, the new positions of untouched records, and the
    offset where damage starts in the new buffer (to know whether anything intact follows it)."""
    buffer = bytearray(b"".join(records))
    spans = [(o, o + len(r)) for o, r in zip(_offsets(records), records)]
    if mode == "flip":
        (bit,) = params
        buffer[bit // 8] ^= 1 << (bit % 8)
        hit = (bit // 8, bit // 8 + 1)
    elif mode in ("zero_range", "random_range"):
        lo, hi, seed = params
        fill = bytes(hi - lo) if mode == "zero_range" else random.Random(seed).randbytes(hi - lo)
        if bytes(buffer[lo:hi]) == fill:
            hit = (lo, lo)  # the "corruption" changed nothing
        else:
            buffer[lo:hi] = fill
            hit = (lo, hi)
    elif mode == "insert":
        at, size, seed = params
        buffer[at:at] = random.Random(seed).randbytes(size)
        kept = [(lo, hi) if hi <= at else (lo + size, hi + size) for lo, hi in spans if hi <= at or lo >= at]
        broken = [(lo, hi) for lo, hi in spans if lo < at < hi]
        first_bad = broken[0][0] if broken else at
        return bytes(buffer), kept, first_bad
    elif mode == "truncate":
        (cut,) = params
        del buffer[cut:]
        hit = (cut, len(b"".join(records)))
    else:
        index, value = params[0], params[1]
        lo = spans[index][0]
        if mode == "length_to_boundary":
            value = (spans[value][0] if value < len(spans) else spans[-1][1]) - lo
        old = bytes(buffer[lo : lo + 4])
        buffer[lo : lo + 4] = value.to_bytes(4, "little")
        hit = (lo, lo + 4) if old != bytes(buffer[lo : lo + 4]) else (lo, lo)
    if hit[0] == hit[1]:
        return bytes(buffer), spans, len(buffer)
    kept = [(lo, hi) for lo, hi in spans if hi <= hit[0] or lo >= hit[1]]
    broken = [(lo, hi) for lo, hi in spans if not (hi <= hit[0] or lo >= hit[1])]
    return bytes(buffer), kept, broken[0][0] if broken else len(buffer)


@_PROPERTY
@given(records_and_corruption())
def test_one_corruption_never_hides_an_untouched_record(
    case: tuple[list[bytes], str, tuple[int, ...]],
) -> None:
    records, mode, params = case
    buffer, kept, first_bad = _corrupt(records, mode, params)
    result = scan_records(buffer)
    found = [(r.offset, r.offset + r.length) for r in result.records]
    # 1. Every untouched record is returned intact, in order (the scan may not return anything else
    #    but original records: random bytes forming a valid CRC'd record is a 2^-32 event).
    assert found == kept, (mode, params)
    original = set(records)
    assert all(buffer[lo:hi] in original for lo, hi in found)
    _assert_tiles(buffer, result)
    _assert_records_verify(buffer, result)
    # 2. and 3. Damage with an intact record after it is `damaged`, never a torn tail; damage with
    #    nothing intact after it is a torn tail.
    intact_after = any(lo >= first_bad for lo, _ in kept)
    if first_bad >= len(buffer):
        assert result.damaged == [] and result.torn_tail is None
    elif intact_after:
        assert result.damaged, (mode, params)
        assert result.damaged[0][0] == first_bad
        if result.torn_tail is not None:
            assert result.torn_tail > max(hi for _, hi in kept)
    else:
        assert result.damaged == []
        assert result.torn_tail == first_bad


# --- message_digest ------------------------------------------------------------------------------


def test_message_digest_is_a_u64_and_deterministic() -> None:
    for seq, crc in [(0, 0), (1, 0), (0, 1), (_U64_MAX, 0xFFFFFFFF), (12345, 67890)]:
        term = message_digest(seq, crc)
        assert 0 <= term <= _U64_MAX
        assert term == message_digest(seq, crc)


def test_message_digest_separates_seq_and_crc() -> None:
    terms = {message_digest(seq, crc) for seq in range(64) for crc in range(64)}
    assert len(terms) == 64 * 64
    assert message_digest(1, 2) != message_digest(2, 1)


def test_stream_digest_is_order_independent_and_updatable() -> None:
    rng = random.Random(11)
    messages = [(seq, rng.getrandbits(32)) for seq in range(1, 200)]

    def digest(items: list[tuple[int, int]]) -> int:
        return sum(message_digest(seq, crc) for seq, crc in items) & _U64_MAX

    full = digest(messages)
    for _ in range(5):
        shuffled = messages[:]
        rng.shuffle(shuffled)
        assert digest(shuffled) == full
    # Removing a message is subtracting its term (mod 2^64): O(1) and exact.
    seq, crc = messages[57]
    without = (full - message_digest(seq, crc)) & _U64_MAX
    assert without == digest(messages[:57] + messages[58:])
    # A replica holding a different record at the same sequence disagrees.
    drifted = messages[:]
    drifted[57] = (seq, crc ^ 1)
    assert digest(drifted) != full


def test_message_digest_uses_the_record_crc() -> None:
    record, crc = encode_message(5, 10, b"s", b"", b"p")
    assert read_record(record, 0).crc == crc
    same_record_again, crc_again = encode_message(5, 10, b"s", b"", b"p")
    assert same_record_again == record
    assert message_digest(5, crc) == message_digest(5, crc_again)
