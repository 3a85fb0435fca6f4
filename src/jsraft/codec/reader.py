"""`BoundedReader`: bounds-checked reads of a binary body decoded from outside (layer L1).

Owns: taking struct-packed values and length-prefixed blobs from a buffer, where running past its end is
the caller's own "malformed" error (`error(message)`), never a `struct.error` or a short slice.

Invariants:
  1. `offset` only moves forward and never past `len(data)`.
  2. A failed read raises `error` and leaves `offset` where it was.

Imports: stdlib only. Used by the consumer ops and snapshot decoders.
"""

from __future__ import annotations

import struct
from collections.abc import Callable


class BoundedReader:
    __slots__ = ("data", "offset", "_truncated")

    def __init__(self, data: bytes, error: Callable[[str], Exception], what: str) -> None:
        self.data = memoryview(data)
        self.offset = 0
        self._truncated = lambda: error(f"{what} truncated")

    def take(self, fmt: struct.Struct) -> tuple:
        if self.offset + fmt.size > len(self.data):
            raise self._truncated()
        values = fmt.unpack_from(self.data, self.offset)
        self.offset += fmt.size
        return values

    def blob(self, length: int) -> bytes:
        if self.offset + length > len(self.data):
            raise self._truncated()
        value = bytes(self.data[self.offset:self.offset + length])
        self.offset += length
        return value

    @property
    def remaining(self) -> int:
        return len(self.data) - self.offset
