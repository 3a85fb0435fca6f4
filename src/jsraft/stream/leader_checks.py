"""The stream leader's per-publish checks, each a pure function of state it is given (layer L3).

Owns: the `discard: new` limit check counting in-flight messages (`DiscardNew`), and the checks on a
publish's `Nats-Expected-*` and `Nats-Rollup` headers. `leader.StreamLeader` calls them in nats-server's
order and turns a refusal into the publish's error.

Invariants:
  1. A check never changes state; the caller records an accepted message afterwards.
  2. `DiscardNew` counts exactly what the store will hold after the stored and in-flight messages apply,
     except that in-flight removals are not credited (inflight invariant 3): it refuses no more than the
     store would, and never less.

Imports: L0, L2 (`store` values), `stream` siblings below it.
Reference: nats-server `server/stream.go` (`processJetStreamMsg`), `server/jetstream_cluster.go`
(`processClusteredInboundMsg`: discard new with in-flight counts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from jsraft.errors import NoMessageFound
from jsraft.jsapi.stream_config import Discard, StreamConfig
from jsraft.store.base import UNLIMITED, StreamStore, msg_size
from jsraft.stream import headers as hdr
from jsraft.stream.entries import FLAG_ROLLUP_ALL, FLAG_ROLLUP_SUBJECT
from jsraft.stream.inflight import InFlight
from jsraft.stream.outcomes import (
    ApiError, rollup_failed, store_failed, stream_not_match, wrong_last_msg_id, wrong_last_sequence,
)


def check_expected(found: dict[str, str], stream: str, subject: str, last_seq: int, last_msg_id: str,
                   subject_last: Callable[[str], int]) -> ApiError | None:
    """`Nats-Expected-Stream`, `-Last-Subject-Sequence` (optionally for another subject), `-Last-Sequence`
    and `-Last-Msg-Id`, in that order, against the stream including in-flight messages."""
    expected_stream = found.get(hdr.EXPECTED_STREAM)
    if expected_stream and expected_stream != stream:
        return stream_not_match()
    value = found.get(hdr.EXPECTED_LAST_SUBJECT_SEQ)
    if value is not None:
        expected = hdr.parse_sequence(value, hdr.EXPECTED_LAST_SUBJECT_SEQ)
        actual = subject_last(found.get(hdr.EXPECTED_LAST_SUBJECT_SEQ_SUBJECT) or subject)
        if actual != expected:
            return wrong_last_sequence(actual)
    value = found.get(hdr.EXPECTED_LAST_SEQ)
    if value is not None and hdr.parse_sequence(value, hdr.EXPECTED_LAST_SEQ) != last_seq:
        return wrong_last_sequence(last_seq)
    expected_id = found.get(hdr.EXPECTED_LAST_MSG_ID)
    if expected_id is not None and expected_id != last_msg_id:
        return wrong_last_msg_id(last_msg_id)
    return None


def rollup_flags(found: dict[str, str], config: StreamConfig) -> int | ApiError:
    """The MSGS flags for a `Nats-Rollup` header (0 without one), or why it is refused."""
    value = found.get(hdr.ROLLUP)
    if value is None:
        return 0
    if not config.allow_rollup_hdrs or config.deny_purge:
        return rollup_failed("rollup not permitted")
    if value == hdr.ROLLUP_SUBJECT:
        return FLAG_ROLLUP_SUBJECT
    if value == hdr.ROLLUP_ALL:
        return FLAG_ROLLUP_ALL
    return rollup_failed(f"rollup value invalid: {value!r}")


def subject_last_seq(store: StreamStore, inflight: InFlight, subject_filter: str) -> int:
    """The last sequence on subjects matching the filter, in flight or stored; 0 when none."""
    pending = inflight.subject_last(subject_filter)
    if pending:
        return pending
    try:
        return store.load_last(subject_filter).seq
    except NoMessageFound:
        return 0


class DiscardNew:
    """`discard: new` limits for the messages of one `decide` call, on top of store + in flight."""

    def __init__(self, config: StreamConfig, store: StreamStore, inflight: InFlight) -> None:
        self.config, self.store, self.inflight = config, store, inflight
        self.active = config.discard is Discard.new and (
            config.max_msgs != UNLIMITED or config.max_bytes != UNLIMITED or config.max_msgs_per_subject != UNLIMITED)
        self._totals: tuple[int, int] | None = None

    def admit(self, subject: str, size: int) -> tuple[int, int] | ApiError:
        """`(net msgs, net bytes)` this message adds once stored, or the refusal. Net bytes subtract what a
        replacement evicts only under `max_bytes`, the one limit that reads them; else they are its size."""
        if not self.active:
            return 1, size
        config, per_max = self.config, self.config.max_msgs_per_subject
        if self._totals is None:
            state = self.store.state()
            self._totals = (state.msgs, state.bytes)
        stored_msgs, stored_bytes = self._totals
        msgs, total_bytes = stored_msgs + self.inflight.msgs, stored_bytes + self.inflight.bytes
        evicted, evicts = 0, False
        if per_max != UNLIMITED:
            stored = self.store.subject_counts(subject).get(subject, 0)
            added = stored + self.inflight.subject_count(subject)
            if added >= per_max:
                if config.discard_new_per_subject:
                    return store_failed("maximum messages per subject exceeded")
                evicts = True
                if config.max_bytes != UNLIMITED:  # only max_bytes needs its size: a read of the subject's oldest
                    evicted = self._evicted_size(subject, stored, added - per_max)
        net_msgs = 0 if evicts else 1
        if config.max_msgs != UNLIMITED and msgs + net_msgs > config.max_msgs:
            return store_failed("maximum messages exceeded")
        if config.max_bytes != UNLIMITED and total_bytes + size - evicted > config.max_bytes:
            return store_failed("maximum bytes exceeded")
        return net_msgs, size - evicted

    def _evicted_size(self, subject: str, stored: int, position: int) -> int:
        """Size of the message a new one on `subject` evicts: the `position`-th oldest (0-based) of the
        subject's stored messages followed by its in-flight ones. At least 1, so it counts as evicting."""
        sizes: Iterator[int]
        if position < stored:
            sizes = _stored_sizes(self.store, subject)
        else:
            sizes, position = self.inflight.subject_sizes(subject), position - stored
        for _ in range(position):
            next(sizes, None)
        return max(next(sizes, 1), 1)


def _stored_sizes(store: StreamStore, subject: str) -> Iterator[int]:
    seq = 0
    while True:
        try:
            msg = store.load_next(subject, seq)
        except NoMessageFound:
            return
        yield msg_size(len(msg.subject.encode()), len(msg.headers), len(msg.payload))
        seq = msg.seq + 1

