"""Per-message TTL (ADR-43): the `Nats-TTL` header's value, and the leader's schedule of TTL'd messages.

Owns: `parse_ttl` (what nats-server accepts in `Nats-TTL`: a Go duration such as `5s` or `1m30s`, integer
seconds, or `never`), and `TtlSchedule`, the stream leader's record of when each stored TTL'd message
is due, from which it proposes DELETE entries. Replicas never expire a message on their own clocks
(DESIGN §6): only the leader decides, and the decision goes through the log like any delete.

Invariants:
  1. A TTL is whole seconds, at least 1, or `TTL_NEVER` (-1); anything else is refused (10165), as
     nats-server's `parseMessageTTL` truncates a duration to seconds and refuses one below a second.
  2. A message is due at `timestamp_ns + ttl_s * 1e9`, its stored (leader-assigned) timestamp: every
     leader computes the same deadline for it, from the log, not from when it learned of it.
  3. The schedule is rebuilt from the store when a leader starts (`rebuild`), so a new leader expires
     what the old one had not yet. Before a sequence is handed out, the message stored there is checked
     to carry a TTL that has passed: one no longer stored is skipped, never deleted twice or by mistake.
  4. Bounded: `due` hands out at most `DELETES_PER_TURN_MAX` sequences per call, and a sequence handed
     out is offered again only after `RETRY_NS` (its DELETE may have been lost with a proposal).

Imports: L0, L2 (`store` values), `stream.headers`; no clock (`now_ns` is an argument).
Reference: ADR-43 "JetStream Per-Message TTL"; nats-server `server/stream.go` (`getMessageTTL`).
"""

from __future__ import annotations

import heapq
import re

from jsraft.errors import NoMessageFound
from jsraft.store.base import StreamStore
from jsraft.stream import headers as hdr
from jsraft.stream.outcomes import ApiError, ttl_disabled, ttl_invalid

TTL_NEVER = -1
SECOND_NS = 1_000_000_000
DELETES_PER_TURN_MAX = 1024
RETRY_NS = 5 * SECOND_NS
_HEADER_MARKER = hdr.TTL.encode()
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": SECOND_NS,
            "m": 60 * SECOND_NS, "h": 3600 * SECOND_NS}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_TTL_S_MAX = (1 << 63) // SECOND_NS  # a Go duration is an int64 of nanoseconds


class InvalidTtl(ValueError):
    """A `Nats-TTL` value nats-server would refuse with 10165."""


def _go_duration_ns(text: str) -> int | None:
    """Nanoseconds of a Go `time.ParseDuration` string (`1h30m`, `1.5s`), or None if it is not one."""
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if not body or len(text) - len(body) > 1:
        return None
    total, position = 0.0, 0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None or match.group(1) in ("", "."):
            return None
        total += float(match.group(1)) * _UNIT_NS[match.group(2)]
        position = match.end()
    return sign * int(total)


def parse_ttl(value: str) -> int:
    """A `Nats-TTL` header value -> whole seconds (>= 1) or `TTL_NEVER`; raise `InvalidTtl` otherwise."""
    value = value.strip()
    if value == "never":
        return TTL_NEVER
    if value.isascii() and value.isdigit():
        if len(value) > 19:  # past any Go duration; and never a 4,300-digit int conversion (a ValueError)
            raise InvalidTtl(f"per-message TTL {value[:32]!r} is not between 1 second and the maximum duration")
        seconds = int(value)
    else:
        duration_ns = _go_duration_ns(value)
        if duration_ns is None:
            raise InvalidTtl(f"invalid per-message TTL {value[:32]!r}")
        seconds = duration_ns // SECOND_NS if duration_ns > 0 else 0
    if not 1 <= seconds < _TTL_S_MAX:
        raise InvalidTtl(f"per-message TTL {value[:32]!r} is not between 1 second and the maximum duration")
    return seconds


def message_ttl(found: dict[str, str], allowed: bool) -> "int | ApiError":
    """A publish's `Nats-TTL` in seconds (0 without one), or why it is refused (10166, 10165)."""
    value = found.get(hdr.TTL)
    if value is None:
        return 0
    if not allowed:
        return ttl_disabled()
    try:
        return parse_ttl(value)
    except InvalidTtl:
        return ttl_invalid()


def header_ttl(headers: bytes) -> int:
    """The TTL a stored message's headers carry (0 when none or unreadable: such a message never got in)."""
    if _HEADER_MARKER not in headers:
        return 0
    try:
        value = hdr.parse_headers(headers).get(hdr.TTL)
        return parse_ttl(value) if value is not None else 0
    except (ValueError, hdr.BadHeaders):
        return 0


class TtlSchedule:
    """When each TTL'd message is due, for the stream leader (module invariants 2-4)."""

    def __init__(self) -> None:
        self._due: list[tuple[int, int]] = []  # heap of (due_ns, seq)
        self._offered: dict[int, int] = {}  # seq -> when it may be offered again (ns)

    def __len__(self) -> int:
        return len(self._due) + len(self._offered)

    def add(self, seq: int, timestamp_ns: int, ttl_s: int) -> None:
        if ttl_s > 0:
            heapq.heappush(self._due, (timestamp_ns + ttl_s * SECOND_NS, seq))

    def rebuild(self, store: StreamStore) -> None:
        """Every stored message with a `Nats-TTL` (invariant 3): one pass over the store."""
        self._due.clear()
        self._offered.clear()
        seq = 0
        while True:
            try:
                msg = store.load_next(None, seq)
            except NoMessageFound:
                return
            self.add(msg.seq, msg.timestamp_ns, header_ttl(msg.headers))
            seq = msg.seq + 1

    def due(self, store: StreamStore, now_ns: int) -> list[int]:
        """Sequences of stored messages due at `now_ns`, to delete; each offered again after `RETRY_NS`
        while it is still stored."""
        out: list[int] = []
        for seq, retry_ns in list(self._offered.items()):
            if not _expired(store, seq, now_ns):
                del self._offered[seq]
            elif retry_ns <= now_ns and len(out) < DELETES_PER_TURN_MAX:
                out.append(seq)
                self._offered[seq] = now_ns + RETRY_NS
        while self._due and self._due[0][0] <= now_ns and len(out) < DELETES_PER_TURN_MAX:
            _, seq = heapq.heappop(self._due)
            if _expired(store, seq, now_ns):
                out.append(seq)
                self._offered[seq] = now_ns + RETRY_NS
        return out


def _expired(store: StreamStore, seq: int, now_ns: int) -> bool:
    """Whether the message stored at `seq` carries a TTL that has passed. Checked against the store, not
    the schedule, so that a sequence whose proposal was lost and reused by another message is never
    deleted for the lost one's TTL."""
    try:
        msg = store.load(seq)
    except NoMessageFound:
        return False
    ttl_s = header_ttl(msg.headers)
    return ttl_s > 0 and msg.timestamp_ns + ttl_s * SECOND_NS <= now_ns
