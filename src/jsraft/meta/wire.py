"""Canonical JSON plus opaque blobs: the byte layout under meta entries and meta snapshots.

Owns: `pack` / `unpack` of one document and a list of blobs::

    json_len  u32 | json (canonical)  | blob_count u32 | (blob_len u32 | blob) * blob_count

The document is JSON because it holds names and small numbers that are easiest to read in a dump and to
extend with a version bump; the blobs carry stream and consumer configs exactly as the client sent them
(DESIGN §5), which must come back byte for byte, so they never pass through a JSON re-encode.

Invariants:
  1. Canonical: `pack(*unpack(b)) == b` for every `b` that unpacks. The JSON must be exactly what
     `canonical_json` produces (sorted keys, no spaces, ASCII), so one state has one encoding and
     replicas can compare bytes and digests. `pack_canonical` takes JSON already written so by its
     caller (`snapshot_document`, whose tests hold it to `canonical_json`); `unpack` checks it again.
  2. `unpack` consumes its input exactly (no trailing bytes) and raises only the error class it is given.

Imports: L0, stdlib. Reference: RFC 8785 (JSON canonicalization; this is a simpler subset: no floats).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

from jsraft.errors import JsraftError

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# A meta document lists every stream, so a snapshot's can be large; 64 MiB bounds what a corrupt length
# field can make us allocate while leaving room for ~100k streams.
json_bytes_max = 64 << 20
blobs_max = 1 << 20


def canonical_json(doc: Any) -> bytes:
    """The one encoding of `doc`. NaN and infinities are refused; meta documents hold no floats at all
    (every field is an int, a string, or a list or object of them), which strict structuring enforces."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def json_value(value: Any) -> Any:
    """`value` as `json.loads` would return it (tuples become lists), for comparing documents."""
    if isinstance(value, dict):
        return {key: json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    return value


def pack(doc: dict[str, Any], blobs: Sequence[bytes] = ()) -> bytes:
    return pack_canonical(canonical_json(doc), blobs)


def pack_canonical(body: bytes, blobs: Sequence[bytes] = ()) -> bytes:
    """`pack` of a document its caller has already written as `canonical_json` would (invariant 1 is then
    the caller's to keep: `meta.snapshot_document` writes its large documents without building dicts)."""
    parts = [_U32.pack(len(body)), body, _U32.pack(len(blobs))]
    for blob in blobs:
        parts.append(_U32.pack(len(blob)))
        parts.append(bytes(blob))
    return b"".join(parts)


class Reader:
    """Bounds-checked reads from a buffer; every failure raises `error(where: ...)`."""

    def __init__(self, data: bytes | memoryview, error: type[JsraftError], where: str) -> None:
        self.data = memoryview(bytes(data))
        self.offset = 0
        self.error = error
        self.where = where

    def fail(self, why: str) -> JsraftError:
        return self.error(f"{self.where}: {why}")

    def take(self, length: int) -> bytes:
        if length > len(self.data) - self.offset:
            raise self.fail(f"truncated: need {length} bytes at offset {self.offset}, have "
                            f"{len(self.data) - self.offset}")
        chunk = bytes(self.data[self.offset : self.offset + length])
        self.offset += length
        return chunk

    def u8(self) -> int:
        return _U8.unpack(self.take(1))[0]

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]

    def remaining(self) -> int:
        return len(self.data) - self.offset

    def done(self) -> None:
        if self.remaining():
            raise self.fail(f"{self.remaining()} trailing bytes")


def unpack(reader: Reader) -> tuple[dict[str, Any], list[bytes]]:
    """Read one `pack`ed document and its blobs from `reader` (which may hold more after them)."""
    json_len = reader.u32()
    if json_len > json_bytes_max:
        raise reader.fail(f"document of {json_len} bytes is larger than {json_bytes_max}")
    body = reader.take(json_len)
    doc = _decode_json(body, reader)
    count = reader.u32()
    if count > blobs_max:
        raise reader.fail(f"{count} blobs is more than {blobs_max}")
    blobs = [reader.take(reader.u32()) for _ in range(count)]
    return doc, blobs


def _decode_json(body: bytes, reader: Reader) -> dict[str, Any]:
    try:
        doc = json.loads(body)
        canonical = canonical_json(doc)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as error:
        # RecursionError: deeply nested arrays from a corrupt or hostile body must not escape as a crash.
        raise reader.fail(f"invalid JSON document: {type(error).__name__}: {error}") from None
    if not isinstance(doc, dict):
        raise reader.fail(f"document is a JSON {type(doc).__name__}, not an object")
    if canonical != body:
        raise reader.fail("document is not in canonical form")
    return doc
