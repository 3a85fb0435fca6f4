"""The NATS message header block, parsed and built (layer L4)::

    NATS/1.0[ <status>[ <description>]]\\r\\n
    <name>: <value>\\r\\n
    ...
    \\r\\n

Owns: `HeaderBlock` (status, description, ordered fields — a name may repeat) with `parse_headers` and
`build_headers`, and the status codes the server and JetStream send (`503` no responders, `404`, `408`,
`409`, `100 Idle Heartbeat`, `100 FlowControl Request`).

Invariants:
  1. `parse_headers(build_headers(f, status=s, description=d))` gives back `f`, `s` and `d` for every
     input `build_headers` accepts (tests/protocol round-trips it).
  2. `build_headers` refuses (`LocalProtocolError`) what could not round-trip: a name that is empty or has
     whitespace or `:`; a value or description with a line break or surrounding whitespace (parsers trim
     it, as Go's textproto does); a status outside 100..999.
  3. `parse_headers` refuses (`MalformedHeaders`) a block that does not start with `NATS/1.0`, does not
     end with an empty line, has a status that is not three digits, or a field line without `name:`.
     `b""` (an HPUB with an empty header block) parses as an empty block.
  4. Names are kept as sent and `get` compares them exactly, as nats-server's `getHeader` does.

Imports: attrs, stdlib, protocol siblings. Reference: ADR-4 (NATS message headers), nats-py
`Client._process_headers`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from jsraft.protocol.errors import LocalProtocolError, MalformedHeaders
from jsraft.protocol.wire import text_from_wire, wire_text

STATUS_CONTROL = 100  # "Idle Heartbeat", "FlowControl Request"
STATUS_NOT_FOUND = 404
STATUS_REQUEST_TIMEOUT = 408
STATUS_CONFLICT = 409
STATUS_NO_RESPONDERS = 503
DESCRIPTION_IDLE_HEARTBEAT = "Idle Heartbeat"
DESCRIPTION_FLOW_CONTROL = "FlowControl Request"

_PREFIX = b"NATS/1.0"
_FORBIDDEN_IN_NAME = frozenset(" \t\r\n\x0b\x0c:")
_TRIM = " \t"


@attrs.frozen
class HeaderBlock:
    fields: tuple[tuple[str, str], ...] = ()
    status: int | None = None
    description: str = ""

    def get(self, name: str) -> str | None:
        """The first value of `name` (invariant 4), or None."""
        for key, value in self.fields:
            if key == name:
                return value
        return None

    def get_all(self, name: str) -> list[str]:
        return [value for key, value in self.fields if key == name]

    def to_bytes(self) -> bytes:
        return build_headers(self.fields, status=self.status, description=self.description)


def _check_value(value: str, what: str) -> None:
    if not isinstance(value, str) or "\r" in value or "\n" in value or value != value.strip(_TRIM):
        raise LocalProtocolError(f"{what} {str(value)[:64]!r} has a line break or surrounding whitespace")


def build_headers(fields: Iterable[tuple[str, str]] | Mapping[str, str] = (), *, status: int | None = None,
                  description: str = "") -> bytes:
    """A header block (invariant 2 lists what it refuses)."""
    items = fields.items() if isinstance(fields, Mapping) else fields
    head = "NATS/1.0"
    if status is not None:
        if type(status) is not int or not 100 <= status <= 999:
            raise LocalProtocolError(f"header status must be 100..999, not {status!r}")
        head += f" {status}"
        if description:
            _check_value(description, "status description")
            head += f" {description}"
    elif description:
        raise LocalProtocolError("a status description needs a status")
    lines = [head]
    for name, value in items:
        if not isinstance(name, str) or not name or not _FORBIDDEN_IN_NAME.isdisjoint(name):
            raise LocalProtocolError(f"header name {str(name)[:64]!r} is empty or has whitespace or ':'")
        _check_value(value, f"header {name!r} value")
        lines.append(f"{name}: {value}")
    return wire_text("\r\n".join(lines) + "\r\n\r\n")


def _parse_status_line(line: str) -> tuple[int | None, str]:
    if line == "NATS/1.0":
        return None, ""
    if not line.startswith("NATS/1.0 "):
        raise MalformedHeaders(f"header block starts with {line[:32]!r}, not NATS/1.0")
    rest = line[len("NATS/1.0 "):]
    code, _, description = rest.partition(" ")
    if len(code) != 3 or not code.isdigit() or not code.isascii() or code[0] == "0":
        raise MalformedHeaders(f"header status {code[:16]!r} is not three digits")
    return int(code), description.strip(_TRIM)


def parse_headers(block: bytes) -> HeaderBlock:
    """A header block as sent on the wire (invariant 3)."""
    if not block:
        return HeaderBlock()
    if not block.startswith(_PREFIX):
        raise MalformedHeaders("header block does not start with NATS/1.0")
    if not block.endswith(b"\r\n\r\n"):
        raise MalformedHeaders("header block does not end with an empty line")
    lines = text_from_wire(bytes(block[:-4])).split("\r\n")
    status, description = _parse_status_line(lines[0])
    fields = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or not _FORBIDDEN_IN_NAME.isdisjoint(name):
            raise MalformedHeaders(f"malformed header line {line[:64]!r}")
        fields.append((name, value.strip(_TRIM)))
    return HeaderBlock(tuple(fields), status, description)


NO_RESPONDERS_HEADERS = build_headers(status=STATUS_NO_RESPONDERS)  # b"NATS/1.0 503\r\n\r\n", 16 bytes
