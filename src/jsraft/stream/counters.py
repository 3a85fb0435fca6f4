"""Counter streams (ADR-49, nats-server 2.12, JetStream API level 2): every message is an increment (layer L3).

Owns: reading a publish's `Nats-Incr` header (`increment`), the checks nats-server makes on it, and the
leader's computation of the subject's new total (`CounterTotals.next`), which becomes the message's body
`{"val":"<total>"}` and the PubAck's `"val"`.

A stream with `allow_msg_counter` stores, for each published increment, a message whose body is the
subject's running total after it; the publish's headers are kept as sent (so the increments can be
recounted). The total before it is the body of the subject's last message, or 0 when the subject has
none (a purge resets a counter, ADR-49 "Counter Resets").

Invariants:
  1. The total is decided by the leader before proposing (nats-server `checkMsgHeadersPreClusteredProposal`),
     never by a replica at apply: the entry carries the body, so every replica stores the same bytes.
  2. Increments the leader accepted but the machine has not applied yet count: the newest total the leader
     decided for a subject is kept in its in-flight proposal (`Proposal.counter_totals`) and read before the
     store, so two increments decided back to back, in one batch or two, both count. Removals in flight
     (purge, delete) are not seen by it, as in nats-server's running totals (`clusteredCounterTotal`).
  3. Checks, in nats-server's order (`processJetStreamMsg`): an invalid `Nats-Incr` (10171) on any stream;
     then on a stream without counters 10168; then a payload (10170) or any of `Nats-Rollup`,
     `Nats-Expected-*` (10171); later, after the other header checks, a counter stream refuses a publish
     without `Nats-Incr` (10169). A subject whose last body is not a counter value is broken (10172).
  4. A valid increment is what Go's `big.Int.SetString(s, 10)` accepts: an optional sign and decimal digits.
     `0` is valid. Python converts at most 4,300 digits between text and int (a guard against quadratic
     conversions), so an increment, or a total, of more than `DIGITS_MAX` digits is refused as invalid
     (10171) where nats-server would go on: no counter needs a number of 4,000 digits, and nothing is
     stored that this server could not read back.
  5. When the subject's last message carries `Nats-Counter-Sources` (a sourced counter's per-source totals,
     ADR-49 "Adding Sources"), the new message carries it too, unchanged: jsraft has no stream sources, so
     nothing updates it, but nothing may drop it either. It must be a JSON object, else broken (10172).

Imports: L0 (`errors`), stdlib, `stream.headers`, `stream.outcomes`. No clock, no I/O but the store reads the
caller passes in. Reference: ADR-49; nats-server `server/stream.go` (`getMessageIncr`, `CounterValue`),
`server/jetstream_batching.go` (`checkMsgHeadersPreClusteredProposal`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from typing import TYPE_CHECKING

from jsraft import limits
from jsraft.errors import DamagedSequence, JsraftError, NoMessageFound
from jsraft.stream import headers as hdr
from jsraft.stream.outcomes import ApiError, message_too_large

if TYPE_CHECKING:
    from jsraft.jsapi.stream_config import StreamConfig
    from jsraft.store.base import StreamStore
    from jsraft.stream.inflight import InFlight

INCR = "Nats-Incr"
COUNTER_SOURCES = "Nats-Counter-Sources"
_INCREMENT = re.compile(r"[+-]?[0-9]+")
DIGITS_MAX = 4000  # invariant 4
_TOTAL_MAX = 10**DIGITS_MAX
# Headers a counter increment may not carry (nats-server: rollup, expected stream / last msg id / last
# sequence / last subject sequence and its subject).
_INCOMPATIBLE = (hdr.ROLLUP, hdr.EXPECTED_STREAM, hdr.EXPECTED_LAST_MSG_ID, hdr.EXPECTED_LAST_SEQ,
                 hdr.EXPECTED_LAST_SUBJECT_SEQ, hdr.EXPECTED_LAST_SUBJECT_SEQ_SUBJECT)


def counters_disabled() -> ApiError:
    return ApiError(400, 10168, "message counters is disabled")


def increment_missing() -> ApiError:
    return ApiError(400, 10169, "message counter increment is missing")


def increment_with_payload() -> ApiError:
    return ApiError(400, 10170, "message counter has payload")


def increment_invalid() -> ApiError:
    return ApiError(400, 10171, "message counter increment is invalid")


def counter_broken() -> ApiError:
    return ApiError(400, 10172, "message counter is broken")


def increment(found: dict[str, str], payload: bytes, allow_msg_counter: bool) -> int | None | ApiError:
    """The publish's increment (invariants 3 and 4): an int, None when it carries no `Nats-Incr`, or the
    refusal. The missing-increment check on a counter stream comes later (`missing`)."""
    raw = found.get(INCR)
    if raw is None:
        return None
    if not _INCREMENT.fullmatch(raw) or len(raw.lstrip("+-")) > DIGITS_MAX:
        return increment_invalid()
    if not allow_msg_counter:
        return counters_disabled()
    if payload:
        return increment_with_payload()
    if any(name in found for name in _INCOMPATIBLE):
        return increment_invalid()
    return int(raw)


def counter_body(total: int) -> bytes:
    """The stored body for a total: `{"val":"<total>"}`, byte for byte as nats-server writes it."""
    return b'{"val":"%d"}' % total


class LastCounter:
    """What the subject's last stored message says: its total and its `Nats-Counter-Sources` value."""

    __slots__ = ("total", "sources")

    def __init__(self, total: int, sources: str | None) -> None:
        self.total = total
        self.sources = sources


def read_last(load_last: Callable[[str], tuple[bytes, bytes]], subject: str) -> LastCounter | ApiError:
    """The subject's last stored counter (`load_last(subject)` gives its headers and payload; it raises
    `NoMessageFound` for a subject with none): total 0 for none, broken (10172) when unreadable."""
    try:
        headers, payload = load_last(subject)
    except NoMessageFound:
        return LastCounter(0, None)
    except DamagedSequence:
        return counter_broken()
    try:
        value = json.loads(payload)["val"]
        total = (int(value) if isinstance(value, str) and _INCREMENT.fullmatch(value)
                 and len(value.lstrip("+-")) <= DIGITS_MAX else None)
    except (ValueError, TypeError, KeyError):
        total = None
    if total is None:
        return counter_broken()
    sources = None
    if headers:
        try:
            sources = hdr.parse_headers(headers).get(COUNTER_SOURCES)
        except JsraftError:
            return counter_broken()
        if sources is not None:
            try:
                if not isinstance(json.loads(sources), dict):
                    return counter_broken()
            except ValueError:
                return counter_broken()
    return LastCounter(total, sources)


def with_sources(headers: bytes, sources: str | None) -> bytes:
    """`headers` carrying `Nats-Counter-Sources: sources` (invariant 5): replaced if present, else added."""
    return headers if sources is None else hdr.set_header(headers, COUNTER_SOURCES, sources)


def count(inflight: "InFlight", store: "StreamStore", config: "StreamConfig", subject: str, incr: int | None,
          headers: bytes) -> tuple[bytes, bytes, LastCounter] | ApiError:
    """A counter stream's publish: its headers and body with the subject's new total, and that total, from
    the newest total in flight (invariant 2) or the store's last message on the subject."""
    if incr is None:
        return increment_missing()
    last = inflight.counter_total(subject)
    if last is None:
        last = read_last(lambda s: _headers_and_payload(store.load_last(s)), subject)
        if isinstance(last, ApiError):
            return last
    if abs(last.total + incr) >= _TOTAL_MAX:
        return increment_invalid()  # invariant 4
    total = LastCounter(last.total + incr, last.sources)
    body = counter_body(total.total)
    headers = with_sources(headers, last.sources)
    size = len(headers) + len(body)
    if size > limits.payload_bytes_max or 0 <= config.max_msg_size < size:
        return message_too_large()
    return headers, body, total


def _headers_and_payload(msg) -> tuple[bytes, bytes]:
    return msg.headers, msg.payload
