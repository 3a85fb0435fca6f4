"""The sans-IO wire format: frames, the frame decoder, the handshake and DATA bodies.

Method: example tests pin the layout (header fields, CRC coverage), then properties check that any split
of a valid byte stream into chunks decodes to the same frames, and that arbitrary or mutated bytes fed to
the decoder, `decode_hello` and `decode_data` either decode or raise `TransportProtocolError` — never
another exception — while the decoder never buffers more than its bound allows (wire invariant 2).
"""

from __future__ import annotations

import itertools
import struct
import uuid

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft.errors import InvariantViolation
from jsraft.transport.errors import FrameTooLarge, HandshakeRefused, TransportProtocolError
from jsraft.transport.wire import (
    FRAME_BYTES_MAX, FRAME_HEADER_BYTES, GROUP_NAME_BYTES_MAX, HANDSHAKE_FRAME_BYTES_MAX, PING_FRAME,
    PROTOCOL_VERSION, READ_BYTES_MAX, READ_CHUNK_BYTES, Frame, FrameDecoder, FrameKind, Hello, check_hello, decode_data,
    decode_hello, decode_refuse, encode_data, encode_frame, encode_group, encode_hello, encode_refuse,
)

_PROPERTY = settings(max_examples=300, derandomize=True, deadline=None, database=None)
HELLO = Hello(cluster_name="prod", node_name="n1", storage_uuid=uuid.UUID(int=42), incarnation=7)


def _decode_all(decoder: FrameDecoder, data: bytes, chunk: int = READ_CHUNK_BYTES) -> list[Frame]:
    frames = []
    for start in range(0, len(data), chunk):
        decoder.feed(data[start:start + chunk])
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
    return frames


def test_frame_layout_and_crc_coverage():
    frame = encode_frame(FrameKind.DATA, b"ab", b"cd")
    length, crc, kind = struct.unpack_from("<IIB", frame)
    assert (length, kind, frame[FRAME_HEADER_BYTES:]) == (len(frame), FrameKind.DATA, b"abcd")
    # CRC32C over length, kind and body: everything but the crc field (as `codec.records`).
    assert crc == crc32c(frame[8:], crc32c(frame[:4]))
    assert PING_FRAME == encode_frame(FrameKind.PING) and len(PING_FRAME) == FRAME_HEADER_BYTES


def test_decoder_returns_frames_in_order_byte_by_byte():
    stream = encode_hello(HELLO) + encode_data(encode_group("meta"), b"x" * 100) + PING_FRAME
    decoder = FrameDecoder()
    decoder.allow_frames_up_to(FRAME_BYTES_MAX)
    frames = _decode_all(decoder, stream, chunk=1)
    assert [f.kind for f in frames] == [FrameKind.HELLO, FrameKind.DATA, FrameKind.PING]
    assert decode_hello(frames[0].body) == HELLO
    assert decode_data(frames[1].body) == ("meta", b"x" * 100)
    assert decoder.buffered_bytes == 0


@pytest.mark.parametrize("header, words", [
    (struct.pack("<I", 0xFFFFFFFF), "outside"),
    (struct.pack("<I", HANDSHAKE_FRAME_BYTES_MAX + 1), "outside"),
    (struct.pack("<I", FRAME_HEADER_BYTES - 1), "outside"),
])
def test_length_is_checked_as_soon_as_it_arrives(header, words):
    decoder = FrameDecoder()
    decoder.feed(header)  # nothing of the body yet: a hostile length costs nothing to refuse
    with pytest.raises(TransportProtocolError, match=words):
        decoder.next_frame()


def test_bad_crc_and_unknown_kind_are_refused_and_the_decoder_is_spent():
    bad = bytearray(encode_hello(HELLO))
    bad[-1] ^= 0x40
    decoder = FrameDecoder()
    decoder.feed(bytes(bad))
    with pytest.raises(TransportProtocolError, match="CRC"):
        decoder.next_frame()
    with pytest.raises(InvariantViolation):
        decoder.feed(PING_FRAME)  # a link whose peer sent a bad frame is closed, never resynchronised
    unknown = encode_frame(200, b"")  # type: ignore[arg-type]
    decoder = FrameDecoder()
    decoder.feed(unknown)
    with pytest.raises(TransportProtocolError, match="unknown frame kind 200"):
        decoder.next_frame()


def test_handshake_bound_then_full_bound():
    big = encode_data(encode_group("meta"), b"y" * 5000)
    decoder = FrameDecoder()
    decoder.feed(encode_hello(HELLO) + big)
    assert decoder.next_frame().kind is FrameKind.HELLO
    decoder.allow_frames_up_to(FRAME_BYTES_MAX)  # the peer identified itself
    assert decode_data(decoder.next_frame().body) == ("meta", b"y" * 5000)
    with pytest.raises(InvariantViolation):
        decoder.allow_frames_up_to(HANDSHAKE_FRAME_BYTES_MAX)  # bounds are only ever raised
    early = FrameDecoder()
    early.feed(big)
    with pytest.raises(TransportProtocolError, match="outside"):
        early.next_frame()


def test_hello_round_trip_and_version_refused_before_parsing():
    assert decode_hello(encode_hello(HELLO)[FRAME_HEADER_BYTES:]) == HELLO
    future = struct.pack("<H", PROTOCOL_VERSION + 1) + b"\xff anything at all"
    with pytest.raises(HandshakeRefused, match="protocol version"):
        decode_hello(future)
    body = encode_hello(HELLO)[FRAME_HEADER_BYTES:]
    with pytest.raises(TransportProtocolError, match="trailing"):
        decode_hello(body + b"\x00")
    with pytest.raises(TransportProtocolError, match="truncated"):
        decode_hello(body[:-1])


@pytest.mark.parametrize("remote, kwargs, words", [
    (dict(cluster_name="other"), {}, "cluster"),
    (dict(node_name="n1"), {}, "own name"),
    (dict(node_name="n3"), dict(expected_node="n2"), "expected node 'n2'"),
    (dict(node_name="n9"), dict(known_nodes={"n2", "n3"}), "not a configured peer"),
])
def test_check_hello_refusals(remote, kwargs, words):
    fields = dict(cluster_name="prod", node_name="n2", storage_uuid=uuid.UUID(int=1), incarnation=1)
    fields.update(remote)
    with pytest.raises(HandshakeRefused, match=words):
        check_hello(HELLO, Hello(**fields), **kwargs)


def test_check_hello_accepts_a_configured_peer():
    peer = Hello(cluster_name="prod", node_name="n2", storage_uuid=uuid.UUID(int=1), incarnation=1)
    check_hello(HELLO, peer, expected_node="n2", known_nodes={"n2"})


def test_refuse_reason_is_bounded_and_tolerant():
    frame = encode_refuse("x" * 10_000)
    assert len(decode_refuse(frame[FRAME_HEADER_BYTES:])) == 512
    assert decode_refuse(b"\xff bad") == "\ufffd bad"


def test_data_bounds():
    with pytest.raises(InvariantViolation):
        encode_group("")
    with pytest.raises(InvariantViolation):
        encode_group("g" * (GROUP_NAME_BYTES_MAX + 1))
    prefix = encode_group("meta")
    with pytest.raises(FrameTooLarge):
        encode_data(prefix, b"z" * 100, frame_bytes_max=FRAME_HEADER_BYTES + len(prefix) + 99)
    assert decode_data(encode_data(prefix, b"")[FRAME_HEADER_BYTES:]) == ("meta", b"")
    with pytest.raises(TransportProtocolError, match="group name length 0"):
        decode_data(b"\x00\x00payload")
    with pytest.raises(TransportProtocolError, match="UTF-8"):
        decode_data(b"\x01\x00\xff")


_frames = st.one_of(
    st.builds(lambda g, p: encode_data(encode_group(g), p),
              st.text(min_size=1, max_size=20), st.binary(max_size=300)),
    st.just(PING_FRAME),
    st.builds(lambda r: encode_refuse(r), st.text(max_size=30)),
)


def _read_as_a_link_does(decoder: FrameDecoder, stream: bytes) -> tuple[list[Frame], int]:
    """Feed `stream` in reads of `decoder.read_size()` bytes (a socket that always has them): the frames
    and the number of reads."""
    frames, position, reads = [], 0, 0
    while position < len(stream):
        chunk = stream[position:position + decoder.read_size()]
        decoder.feed(chunk)
        position, reads = position + len(chunk), reads + 1
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
    return frames, reads


def test_the_rest_of_a_large_frame_is_read_at_once_within_the_bound():
    big = encode_data(encode_group("stream-S"), b"z" * (3 * READ_BYTES_MAX))
    small = encode_data(encode_group("meta"), b"s")
    decoder = FrameDecoder(FRAME_BYTES_MAX)
    assert decoder.read_size() == READ_CHUNK_BYTES  # no length prefix yet: a plain chunk
    frames, reads = _read_as_a_link_does(decoder, small + big + small)
    assert [decode_data(f.body)[0] for f in frames] == ["meta", "stream-S", "meta"]
    # The first chunk brings the big frame's length; then its rest in reads of READ_BYTES_MAX, not of
    # READ_CHUNK_BYTES (which took 48 reads).
    assert reads == 1 + 3 + 1
    # Never more than the frame in progress still lacks, once that is more than a chunk (invariant 2).
    decoder = FrameDecoder(FRAME_BYTES_MAX)
    decoder.feed(big[:READ_CHUNK_BYTES])
    assert decoder.read_size() == READ_BYTES_MAX
    position = READ_CHUNK_BYTES
    while position < len(big) - 100:
        chunk = big[position:min(position + decoder.read_size(), len(big) - 100)]
        decoder.feed(chunk)
        position += len(chunk)
    assert decoder.read_size() == READ_CHUNK_BYTES  # 100 missing: a chunk may bring the next frame's start
    with pytest.raises(InvariantViolation):
        decoder.feed(b"x" * (READ_CHUNK_BYTES + 1))
    decoder.feed(big[len(big) - 100:])
    assert decoder.next_frame().body == big[FRAME_HEADER_BYTES:] and decoder.buffered_bytes == 0


@_PROPERTY
@given(st.lists(st.sampled_from([1, 300, READ_CHUNK_BYTES - 20, READ_CHUNK_BYTES + 1, 200_000, READ_BYTES_MAX + 7]),
                min_size=1, max_size=5), st.lists(st.integers(min_value=1, max_value=READ_BYTES_MAX), max_size=40))
def test_large_frames_decode_the_same_however_the_reads_fall(sizes, cuts):
    frames = [encode_data(encode_group("g%d" % i), bytes([i]) * size) for i, size in enumerate(sizes)]
    stream, decoder = b"".join(frames), FrameDecoder(FRAME_BYTES_MAX)
    decoded, position = [], 0
    for cut in itertools.chain(cuts, itertools.repeat(READ_BYTES_MAX)):  # reads shorter than asked, then full
        if position >= len(stream):
            break
        chunk = stream[position:position + min(cut, decoder.read_size())]
        decoder.feed(chunk)
        position += len(chunk)
        while (frame := decoder.next_frame()) is not None:
            decoded.append(frame)
        assert decoder.buffered_bytes <= FRAME_BYTES_MAX + READ_CHUNK_BYTES
    assert [encode_frame(f.kind, f.body) for f in decoded] == frames and decoder.buffered_bytes == 0


def test_a_bad_crc_on_a_large_frame_is_refused():
    bad = bytearray(encode_data(encode_group("g"), b"q" * (3 * READ_CHUNK_BYTES)))
    bad[-5] ^= 1
    decoder = FrameDecoder(FRAME_BYTES_MAX)
    with pytest.raises(TransportProtocolError, match="CRC"):
        _read_as_a_link_does(decoder, bytes(bad))
    with pytest.raises(InvariantViolation):
        decoder.feed(PING_FRAME)


def test_a_length_past_the_bound_never_widens_a_read():
    decoder = FrameDecoder()  # the handshake bound
    decoder.feed(struct.pack("<I", FRAME_BYTES_MAX))
    assert decoder.read_size() == READ_CHUNK_BYTES
    with pytest.raises(TransportProtocolError, match="outside"):
        decoder.next_frame()


@_PROPERTY
@given(st.lists(_frames, max_size=8), st.integers(min_value=1, max_value=64))
def test_any_chunking_decodes_the_same_frames(frames, chunk):
    decoder = FrameDecoder(FRAME_BYTES_MAX)
    decoded = _decode_all(decoder, b"".join(frames), chunk)
    assert [encode_frame(f.kind, f.body) for f in decoded] == frames


@_PROPERTY
@given(st.binary(max_size=4096), st.integers(min_value=1, max_value=512))
def test_random_bytes_decode_or_raise_cleanly_with_a_bounded_buffer(data, chunk):
    decoder = FrameDecoder()
    try:
        _decode_all(decoder, data, chunk)
    except TransportProtocolError:
        return
    assert decoder.buffered_bytes < HANDSHAKE_FRAME_BYTES_MAX


@_PROPERTY
@given(st.lists(_frames, min_size=1, max_size=4), st.data())
def test_mutated_streams_decode_or_raise_cleanly(frames, data):
    stream = bytearray(b"".join(frames))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=len(stream) - 1))
        stream[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    decoder = FrameDecoder(1 << 16)
    try:
        for frame in _decode_all(decoder, bytes(stream), 7):
            if frame.kind is FrameKind.DATA:
                decode_data(frame.body)
    except TransportProtocolError:
        pass


@_PROPERTY
@given(st.binary(max_size=300))
def test_hello_and_data_bodies_decode_or_raise_cleanly(body):
    for decode in (decode_hello, decode_data):
        try:
            decode(body)
        except TransportProtocolError:
            pass
