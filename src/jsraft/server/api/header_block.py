"""A NATS header block as the JetStream API reads and writes it (layer L5).

Owns: `encode_headers` (a mapping -> `NATS/1.0` block) and `decode_headers` (a block -> the first value of
each key, None for no block). Kept apart from `jetstream` so the API handlers a serving node needs do not
import the in-process `JetStreamContext` and, through it, the client package.

Invariants:
  1. `decode_headers(encode_headers(h)) == h` for a non-empty mapping of header-safe keys and values.

Imports: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping


def encode_headers(headers: Mapping[str, str] | None) -> bytes:
    if not headers:
        return b""
    lines = "".join(f"{key}: {value}\r\n" for key, value in headers.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def decode_headers(block: bytes) -> dict[str, str] | None:
    if not block:
        return None
    found: dict[str, str] = {}
    for line in block.decode(errors="replace").split("\r\n")[1:]:
        key, sep, value = line.partition(":")
        if sep:
            found.setdefault(key.strip(), value.strip())
    return found
