"""A strict, bounded reader and the few writers shared by the wire format and the Raft codec (layer L4).

Owns: `Reader`, which walks untrusted bytes from a peer and turns every way they can be wrong — too short,
a length that runs past the end, invalid UTF-8, a flag bit nobody defined, bytes left over — into the one
error class its caller names. Decoders built on it never leak `struct.error`, `IndexError` or
`UnicodeDecodeError`.

Invariants:
  1. A `Reader` never reads past the end of its buffer: every length is checked against what remains
     before anything is sliced or allocated, so a hostile length costs nothing.
  2. Every error a `Reader` raises is an instance of the class it was built with.

Imports: stdlib, L0. Reference: h11's separation of remote protocol errors from local misuse.
"""

from __future__ import annotations

import struct

from jsraft.errors import JsraftError, invariant

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
# Node ids, cluster names and group names are framed with a u8 or u16 length.
STR8_BYTES_MAX = 0xFF
STR16_BYTES_MAX = 0xFFFF


class Reader:
    """Reads fields from `data` in order; any malformed input raises `error` (invariant 2)."""

    __slots__ = ("_view", "_offset", "_error")

    def __init__(self, data: bytes | bytearray | memoryview, error: type[JsraftError]) -> None:
        self._view = memoryview(data)
        self._offset = 0
        self._error = error

    @property
    def remaining(self) -> int:
        return len(self._view) - self._offset

    def fail(self, why: str) -> JsraftError:
        """The error to raise for `why`, naming the offset where decoding stopped."""
        return self._error(f"{why} (at byte {self._offset})")

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        if layout.size > self.remaining:
            raise self.fail(f"truncated: {layout.size} bytes wanted, {self.remaining} left")
        values = layout.unpack_from(self._view, self._offset)
        self._offset += layout.size
        return values

    def u8(self) -> int:
        return self.unpack(U8)[0]

    def u16(self) -> int:
        return self.unpack(U16)[0]

    def u32(self) -> int:
        return self.unpack(U32)[0]

    def u64(self) -> int:
        return self.unpack(U64)[0]

    def raw(self, size: int) -> bytes:
        if size > self.remaining:
            raise self.fail(f"truncated: {size} bytes wanted, {self.remaining} left")
        data = bytes(self._view[self._offset : self._offset + size])
        self._offset += size
        return data

    def rest(self) -> bytes:
        return self.raw(self.remaining)

    def rest_view(self) -> memoryview:
        """What remains, as a view of the buffer (no copy); read-only when the buffer is `bytes`."""
        view = self._view[self._offset:]
        self._offset = len(self._view)
        return view

    def text(self, size: int, what: str) -> str:
        try:
            return self.raw(size).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    def str8(self, what: str) -> str:
        return self.text(self.u8(), what)

    def str16(self, what: str) -> str:
        return self.text(self.u16(), what)

    def blob32(self, size_max: int, what: str) -> bytes:
        size = self.u32()
        if size > size_max:
            raise self.fail(f"{what} of {size} bytes exceeds {size_max}")
        return self.raw(size)

    def flags(self, defined_mask: int) -> int:
        """A u8 of flag bits; a bit outside `defined_mask` is an encoding this version does not know."""
        value = self.u8()
        if value & ~defined_mask:
            raise self.fail(f"undefined flag bits {value & ~defined_mask:#04x}")
        return value

    def finish(self) -> None:
        """Strictness: a message is exactly its fields, so leftover bytes mean a different encoding."""
        if self.remaining:
            raise self.fail(f"{self.remaining} trailing bytes")


def str8(value: str) -> bytes:
    """`value` as u8 length + UTF-8. Only our own names are encoded, so an oversize one is a bug."""
    encoded = value.encode("utf-8")
    invariant(len(encoded) <= STR8_BYTES_MAX, f"name of {len(encoded)} bytes fits a u8 length")
    return U8.pack(len(encoded)) + encoded


def str16(value: str) -> bytes:
    encoded = value.encode("utf-8")
    invariant(len(encoded) <= STR16_BYTES_MAX, f"name of {len(encoded)} bytes fits a u16 length")
    return U16.pack(len(encoded)) + encoded


def flag_bits(*flags: bool) -> int:
    """Pack booleans into a u8, first argument in bit 0."""
    return sum(1 << bit for bit, flag in enumerate(flags) if flag)
