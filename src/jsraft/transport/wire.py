"""The node-to-node wire format, sans-IO: frames, the frame decoder, the handshake and data frames.

Owns: the bytes two jsraft nodes exchange on one TCP connection. Every frame is::

    length  u32   total bytes of the frame, this header included
    crc     u32   CRC32C over length, kind and body (everything but itself), as in `codec.records`
    kind    u8    `FrameKind`
    body    bytes

A connection starts with a handshake. The dialer sends `HELLO`; the acceptor answers `HELLO` or `REFUSE`
(reason) and closes. After that both sides send `DATA` (u16 group name length, group name, payload: one
message of the Raft group named) and `PING` (empty; keeps an idle link provably alive). When the cluster
has a shared secret, `CHALLENGE` and `PROOF` frames come before HELLO (`cluster_auth`).

HELLO body: `protocol_version u16 | cluster str8 | node str8 | storage_uuid 16 bytes | incarnation u64`.
The version comes first and stays first in every future version, so a peer of another version is refused
by version, with a reason, before the rest of its HELLO is parsed. `incarnation` is random per process
start: a HELLO with a new incarnation proves the peer restarted and its older connection is dead.

Invariants:
  1. A frame is delivered only if its CRC verifies, its kind is known and its length is within the
     decoder's bound; otherwise `TransportProtocolError` — the link is closed, the node carries on.
  2. A `FrameDecoder` buffers at most `frame_bytes_max + READ_CHUNK_BYTES` bytes: a length prefix is
     checked against the bound as soon as its 4 bytes arrive, before anything of the body is awaited, and
     a chunk fed is at most `read_size()`: `READ_CHUNK_BYTES`, or the rest of the frame in progress when
     that is more (up to `READ_BYTES_MAX`), which never takes the buffer past the frame's own end.
  3. Before the handshake completes the bound is `HANDSHAKE_FRAME_BYTES_MAX`, so a peer that has not said
     who it is cannot make the node buffer more than a few hundred bytes.
  4. A DATA frame's group name is non-empty UTF-8 of at most `GROUP_NAME_BYTES_MAX` bytes.

Imports: stdlib, L0, L1 (`codec.records` for the CRC), attrs, crc32c. Reference: DESIGN.md §3 (framing),
h11 (bytes in, events out; bounded buffers).
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Collection, Sequence
from typing import NamedTuple

import attrs
from crc32c import crc32c

from jsraft import limits
from jsraft.codec.records import record_crc
from jsraft.errors import invariant
from jsraft.transport.binary import STR8_BYTES_MAX, U16, Reader, str8
from jsraft.transport.errors import FrameTooLarge, HandshakeRefused, TransportProtocolError

PROTOCOL_VERSION = 1

FRAME_HEADER = struct.Struct("<IIB")  # length, crc, kind
FRAME_HEADER_BYTES = FRAME_HEADER.size  # 9
_LENGTH = struct.Struct("<I")
_KIND = struct.Struct("<B")
_HELLO_FIXED = struct.Struct("<16sQ")  # storage uuid, incarnation

# A frame carries one Raft message. Raft batches AppendEntries to `max_bytes_per_msg` (1 MiB by default)
# but always sends at least one entry, and one stream entry may hold a maximal message
# (`limits.record_bytes_max`, ~9.4 MiB). Four of those leave room for a batch entry of several maximal
# messages while bounding what one peer can make a link buffer (~38 MiB).
FRAME_BYTES_MAX = 4 * limits.record_bytes_max
# A HELLO is under 300 bytes; nothing larger is read from a peer that has not completed the handshake.
HANDSHAKE_FRAME_BYTES_MAX = 1024
# Bytes asked of the socket per read; with invariant 2 this bounds a link's receive buffer.
READ_CHUNK_BYTES = 64 << 10
# The most asked of the socket at once for the rest of a large frame (an AppendEntries of big messages):
# one read of it instead of one per 64 KiB chunk, each a pass of the read loop and a copy into the buffer.
READ_BYTES_MAX = 1 << 20
# Group names are "meta" or derived from a stream name (`limits.stream_name_bytes_max`) with a prefix.
GROUP_NAME_BYTES_MAX = 512
# A REFUSE reason is one sentence for a log line.
REFUSE_REASON_BYTES_MAX = 512


class FrameKind(enum.IntEnum):
    """Frame kinds. Numbers are on the wire: never reuse or renumber one."""

    HELLO = 1
    REFUSE = 2
    DATA = 3
    PING = 4
    CHALLENGE = 5  # cluster-secret proof exchange before HELLO (`cluster_auth`)
    PROOF = 6


_KNOWN_KINDS = frozenset(int(kind) for kind in FrameKind)


class Frame(NamedTuple):
    kind: FrameKind
    body: bytes


@attrs.frozen(kw_only=True)
class Hello:
    """Who is at the other end of a connection (see the module docstring for the layout)."""

    protocol_version: int = PROTOCOL_VERSION
    cluster_name: str
    node_name: str
    storage_uuid: uuid.UUID
    incarnation: int


def encode_frame(kind: FrameKind, *parts: bytes | bytearray | memoryview) -> bytes:
    """One frame whose body is the concatenation of `parts`, copied once."""
    return b"".join(encode_frame_parts(kind, parts))


def encode_frame_parts(kind: FrameKind, parts: Sequence[bytes | bytearray | memoryview]) -> list:
    """`encode_frame`'s bytes before the join: its header, then `parts` themselves (none copied)."""
    length = FRAME_HEADER_BYTES + sum(len(part) for part in parts)
    invariant(length <= 0xFFFFFFFF, "a frame length fits in u32")
    crc = crc32c(_KIND.pack(kind), crc32c(_LENGTH.pack(length)))
    for part in parts:
        crc = crc32c(part, crc)
    return [FRAME_HEADER.pack(length, crc, kind), *parts]


# From this size on a DATA frame of immutable pieces is queued as a `GatheredFrame`: a leader's AppendEntries
# of large messages is framed for each follower without copying its entries (only CRC'd).
GATHER_FRAME_BYTES_MIN = 64 << 10


class GatheredFrame:
    """A frame kept as its pieces (`encode_frame_parts`) until the socket takes them: a large frame is
    written with one vectored send and never joined. `len()` is the frame's length in bytes. The pieces
    must not change until it is written (entries' data: immutable bytes)."""

    __slots__ = ("parts", "length")

    def __init__(self, parts: list) -> None:
        self.parts = parts
        self.length = sum(len(part) for part in parts)

    def __len__(self) -> int:
        return self.length


PING_FRAME = encode_frame(FrameKind.PING)


class FrameDecoder:
    """Bytes from one connection in, verified frames out (invariants 1–3).

    Call `feed()` with each chunk read (at most `read_size()` bytes), then `next_frame()` until it returns
    None. Once it has raised, the decoder is spent: the link must be closed, never resynchronised, since a
    peer that sent one bad frame cannot be trusted to frame the next.
    """

    __slots__ = ("_buffer", "_start", "_frame_bytes_max", "_failed", "_pieces", "_piece_bytes", "_large")

    def __init__(self, frame_bytes_max: int = HANDSHAKE_FRAME_BYTES_MAX) -> None:
        invariant(FRAME_HEADER_BYTES <= frame_bytes_max <= 0xFFFFFFFF, "frame bound fits the length field")
        self._buffer = bytearray()
        # Where the next frame starts. Frames are consumed by moving it, and the consumed bytes are cut
        # once per `feed`: cutting after each frame would move the rest of a chunk of small frames again
        # for every one of them.
        self._start = 0
        self._frame_bytes_max = frame_bytes_max
        self._failed = False
        # A frame longer than a chunk, once its header is here, is gathered as the chunks read (no copy)
        # and joined once into its body: `_pieces` (None otherwise), their total and the frame's length.
        self._pieces: list[bytes] | None = None
        self._piece_bytes = self._large = 0

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._start + self._piece_bytes

    @property
    def frame_bytes_max(self) -> int:
        return self._frame_bytes_max

    def allow_frames_up_to(self, frame_bytes_max: int) -> None:
        """Raise the bound once the peer has identified itself (invariant 3)."""
        invariant(frame_bytes_max >= self._frame_bytes_max, "the frame bound is only ever raised")
        invariant(frame_bytes_max <= 0xFFFFFFFF, "frame bound fits the length field")
        self._frame_bytes_max = frame_bytes_max

    def read_size(self) -> int:
        """Bytes to ask of the socket next (invariant 2): `READ_CHUNK_BYTES`, or the rest of the frame in
        progress, up to `READ_BYTES_MAX`, when its checked length prefix says it is more."""
        if self._pieces is not None:
            return min(max(self._large - self._piece_bytes, READ_CHUNK_BYTES), READ_BYTES_MAX)
        buffer, start = self._buffer, self._start
        if len(buffer) - start < _LENGTH.size:
            return READ_CHUNK_BYTES
        length = _LENGTH.unpack_from(buffer, start)[0]
        if length > self._frame_bytes_max:
            return READ_CHUNK_BYTES  # next_frame() refuses it (invariant 2); never read on its word
        return min(max(start + length - len(buffer), READ_CHUNK_BYTES), READ_BYTES_MAX)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        invariant(not self._failed, "a decoder that raised is not fed again (its link is closed)")
        invariant(len(data) <= self.read_size(), "chunks are read at most read_size() bytes at a time")
        if self._pieces is not None:
            self._pieces.append(data if type(data) is bytes else bytes(data))
            self._piece_bytes += len(data)
            return
        # Holds because the caller drains with next_frame() after every feed and a partial frame is
        # never longer than the bound (invariant 2).
        if self._start:
            del self._buffer[:self._start]
            self._start = 0
        invariant(len(self._buffer) < self._frame_bytes_max + READ_CHUNK_BYTES, "decoder is drained")
        self._buffer += data

    def next_frame(self) -> Frame | None:
        """The next complete verified frame, None if more bytes are needed; raises on a bad frame."""
        invariant(not self._failed, "a decoder that raised is not used again")
        if self._pieces is not None:
            return self._large_frame()
        buffer, start = self._buffer, self._start
        if len(buffer) - start < _LENGTH.size:
            return None
        length = _LENGTH.unpack_from(buffer, start)[0]
        if not FRAME_HEADER_BYTES <= length <= self._frame_bytes_max:
            raise self._fail(f"frame length {length} outside [{FRAME_HEADER_BYTES}, {self._frame_bytes_max}]")
        end = start + length
        if len(buffer) < end:
            if length > READ_CHUNK_BYTES and len(buffer) - start >= FRAME_HEADER_BYTES:
                with memoryview(buffer) as view:
                    self._pieces, self._piece_bytes, self._large = [bytes(view[start:])], len(buffer) - start, length
                self._start = 0
                buffer.clear()
            return None
        _, crc, kind = FRAME_HEADER.unpack_from(buffer, start)
        with memoryview(buffer) as view:  # slices of a view are not copies, slices of the buffer are
            crc_ok = record_crc(view, start, length) == crc
            body = bytes(view[start + FRAME_HEADER_BYTES:end]) if crc_ok else b""
        self._start = end if end < len(buffer) else 0
        if not self._start:
            buffer.clear()
        return self._checked(crc_ok, kind, length, body)

    def _large_frame(self) -> Frame | None:
        """The gathered frame once all of it is here: its body joined once (what came after it goes back
        to the buffer, which is empty while pieces are gathered)."""
        pieces, length = self._pieces, self._large
        if pieces is None or self._piece_bytes < length:
            return None
        over = self._piece_bytes - length
        if over:
            last = pieces[-1]
            pieces[-1], rest = last[:len(last) - over], last[len(last) - over:]
            self._buffer += rest
        header = pieces[0][:FRAME_HEADER_BYTES]
        pieces[0] = pieces[0][FRAME_HEADER_BYTES:]
        body = b"".join(pieces)
        self._pieces, self._piece_bytes, self._large = None, 0, 0
        _, crc, kind = FRAME_HEADER.unpack(header)
        crc_ok = crc32c(body, crc32c(header[8:], crc32c(header[:4]))) == crc  # `record_crc`'s coverage
        return self._checked(crc_ok, kind, length, body)

    def _checked(self, crc_ok: bool, kind: int, length: int, body: bytes) -> Frame:
        if not crc_ok:
            raise self._fail(f"frame CRC mismatch (kind {kind}, {length} bytes)")
        if kind not in _KNOWN_KINDS:
            raise self._fail(f"unknown frame kind {kind}")
        return Frame(FrameKind(kind), body)

    def _fail(self, why: str) -> TransportProtocolError:
        self._failed = True
        self._buffer.clear()
        self._start = 0
        self._pieces, self._piece_bytes = None, 0
        return TransportProtocolError(why)


# --- Handshake ----------------------------------------------------------------------------------------


def check_name(name: str, what: str) -> None:
    """Our own cluster and node names must fit the handshake; a bad one is a configuration bug."""
    encoded = name.encode("utf-8")
    invariant(0 < len(encoded) <= STR8_BYTES_MAX, f"{what} {name!r} is 1..{STR8_BYTES_MAX} UTF-8 bytes")


def encode_hello(hello: Hello) -> bytes:
    body = b"".join((
        U16.pack(hello.protocol_version), str8(hello.cluster_name), str8(hello.node_name),
        _HELLO_FIXED.pack(hello.storage_uuid.bytes, hello.incarnation),
    ))
    return encode_frame(FrameKind.HELLO, body)


def decode_hello(body: bytes) -> Hello:
    """Parse a HELLO body. Another protocol version is refused before anything else is read."""
    reader = Reader(body, TransportProtocolError)
    version = reader.u16()
    if version != PROTOCOL_VERSION:
        raise HandshakeRefused(f"protocol version {version} is not supported (this node speaks {PROTOCOL_VERSION})")
    cluster_name = reader.str8("cluster name")
    node_name = reader.str8("node name")
    uuid_bytes, incarnation = reader.unpack(_HELLO_FIXED)
    reader.finish()
    if not cluster_name or not node_name:
        raise TransportProtocolError("HELLO with an empty cluster or node name")
    return Hello(cluster_name=cluster_name, node_name=node_name, storage_uuid=uuid.UUID(bytes=uuid_bytes),
                 incarnation=incarnation)


def check_hello(local: Hello, remote: Hello, *, expected_node: str | None = None,
                known_nodes: Collection[str] | None = None) -> None:
    """Raise `HandshakeRefused` unless `remote` may talk to `local`.

    `expected_node`: the dialer's check that the address it dialed is the node it meant. `known_nodes`: the
    acceptor's check that the caller is a configured peer (an unknown node could inject Raft messages).
    """
    if remote.cluster_name != local.cluster_name:
        raise HandshakeRefused(f"cluster {remote.cluster_name!r} is not {local.cluster_name!r}")
    if remote.node_name == local.node_name:
        raise HandshakeRefused(f"peer claims this node's own name {local.node_name!r}")
    if expected_node is not None and remote.node_name != expected_node:
        raise HandshakeRefused(f"expected node {expected_node!r} at this address, found {remote.node_name!r}")
    if known_nodes is not None and remote.node_name not in known_nodes:
        raise HandshakeRefused(f"node {remote.node_name!r} is not a configured peer")


def encode_refuse(reason: str) -> bytes:
    encoded = reason.encode("utf-8")[:REFUSE_REASON_BYTES_MAX]
    return encode_frame(FrameKind.REFUSE, encoded)


def decode_refuse(body: bytes) -> str:
    """The peer's reason, for a log line only; undecodable bytes are shown, not trusted."""
    return body[:REFUSE_REASON_BYTES_MAX].decode("utf-8", errors="replace")


# --- Data ---------------------------------------------------------------------------------------------


def encode_group(group: str) -> bytes:
    """The group prefix of a DATA body; a group name out of bounds is the caller's bug (invariant 4)."""
    encoded = group.encode("utf-8")
    invariant(0 < len(encoded) <= GROUP_NAME_BYTES_MAX, f"group name {group!r} is 1..{GROUP_NAME_BYTES_MAX} bytes")
    return U16.pack(len(encoded)) + encoded


def data_frame_bytes(group_prefix: bytes, payload_bytes: int) -> int:
    return FRAME_HEADER_BYTES + len(group_prefix) + payload_bytes


def encode_data(group_prefix: bytes, payload: bytes | bytearray | memoryview,
                frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """A DATA frame for a group (prefix from `encode_group`); `FrameTooLarge` if the peer would refuse it."""
    size = data_frame_bytes(group_prefix, len(payload))
    if size > frame_bytes_max:
        raise FrameTooLarge(f"frame of {size} bytes exceeds {frame_bytes_max}")
    return encode_frame(FrameKind.DATA, group_prefix, payload)


def decode_data(body: bytes) -> tuple[str, memoryview]:
    """Split a DATA body into `(group, payload)`; raise `TransportProtocolError` if malformed. The payload
    is a read-only view of `body`, not a copy: whoever decodes it copies what it keeps."""
    # Every frame a link receives comes through here: the well-formed case without a `Reader`, anything
    # else by the strict way, which says what is wrong.
    if len(body) >= 2:
        end = 2 + (size := body[0] | body[1] << 8)
        if 0 < size <= GROUP_NAME_BYTES_MAX and end <= len(body):
            try:
                return body[2:end].decode("utf-8"), memoryview(body)[end:]
            except UnicodeDecodeError:
                pass
    return _decode_data_strictly(body)


def _decode_data_strictly(body: bytes) -> tuple[str, memoryview]:
    reader = Reader(body, TransportProtocolError)
    size = reader.u16()
    if not 0 < size <= GROUP_NAME_BYTES_MAX:
        raise reader.fail(f"group name length {size} outside [1, {GROUP_NAME_BYTES_MAX}]")
    group = reader.text(size, "group name")
    return group, reader.rest_view()
