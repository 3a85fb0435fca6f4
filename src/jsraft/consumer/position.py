"""Where a consumer starts, and how many messages it has left: pure functions of config and store (L3).

Owns: `start_position` — the delivered cursor a new consumer starts from, per deliver policy — and
`num_pending`. `start_position` runs when a CREATE op is *applied*, on every replica, against the store
as it is at that log index; since the stores of all replicas hold the same messages at the same index,
every replica starts the consumer at the same place (and interest retention stays deterministic).

Invariants:
  1. `start_position` returns `(delivered_stream_seq, start_last_seq)` with
     `0 <= delivered_stream_seq <= max(last_seq, opt_start_seq - 1)`; `start_last_seq` is the stream's last
     seq at creation for `last_per_subject` (messages up to it are delivered only if last on their
     subject), else 0.
  2. Nothing here reads a clock: `by_start_time` compares message timestamps with the config's time.

Imports: L0, L1 (`jsapi`, `subjects`), L2 (`store`). Reference: nats-server `server/consumer.go`
(selectStartingSeqNo, numPending / streamNumPending).
"""

from __future__ import annotations

from collections.abc import Sequence

from jsraft.errors import NoMessageFound
from jsraft.jsapi.consumer_config import ConsumerConfig, DeliverPolicy, rfc3339_to_ns
from jsraft.store.base import StreamStore


def _filters_or_all(filters: Sequence[str]) -> Sequence[str]:
    return filters or (">",)


def _last_seq_matching(store: StreamStore, filters: Sequence[str]) -> int:
    best = 0
    for subject_filter in _filters_or_all(filters):
        try:
            best = max(best, store.load_last(subject_filter).seq)
        except NoMessageFound:
            pass
    return best


def _first_seq_at_or_after(store: StreamStore, time_ns: int) -> int:
    """Binary search over sequences (timestamps grow with seqs in a stream); 0 when none qualifies."""
    state = store.state()
    low, high, found = state.first_seq, state.last_seq, 0
    while low <= high:
        middle = (low + high) // 2
        try:
            msg = store.load_next(None, middle)
        except NoMessageFound:
            high = middle - 1
            continue
        if msg.timestamp_ns >= time_ns:
            found, high = msg.seq, middle - 1
        else:
            low = msg.seq + 1
    return found


def start_position(config: ConsumerConfig, store: StreamStore) -> tuple[int, int]:
    """`(delivered_stream_seq, start_last_seq)` for a consumer created now (see invariant 1)."""
    policy = config.deliver_policy
    last_seq = store.state().last_seq
    if policy is DeliverPolicy.all:
        return 0, 0
    if policy is DeliverPolicy.by_start_sequence:
        return config.opt_start_seq - 1, 0
    if policy is DeliverPolicy.new:
        return last_seq, 0
    if policy is DeliverPolicy.last:
        seq = _last_seq_matching(store, config.filters)
        return (seq - 1 if seq else last_seq), 0
    if policy is DeliverPolicy.by_start_time:
        seq = _first_seq_at_or_after(store, rfc3339_to_ns(config.opt_start_time or ""))
        return (seq - 1 if seq else last_seq), 0
    # last_per_subject: start just below the lowest "last message of its subject".
    lasts = [store.load_last(subject).seq
             for subject_filter in _filters_or_all(config.filters)
             for subject in store.subject_counts(subject_filter)]
    return (min(lasts) - 1 if lasts else last_seq), last_seq


def is_last_at_start(store: StreamStore, seq: int, subject: str, start_last_seq: int) -> bool:
    """For `last_per_subject`: is `seq` the last message on `subject` among seqs <= `start_last_seq`?"""
    try:
        following = store.load_next(subject, seq + 1)
    except NoMessageFound:
        return True
    return following.seq > start_last_seq


def num_pending(store: StreamStore, filters: Sequence[str], after_seq: int) -> int:
    """Messages matching `filters` (all when empty) with a seq above `after_seq`.

    O(1) for an unfiltered consumer on a stream without interior deletes; otherwise a walk over the
    messages above `after_seq` (the leader calls it once per delivery batch, not per message).
    """
    state = store.state()
    if after_seq >= state.last_seq or state.msgs == 0:
        return 0
    if not filters and after_seq < state.first_seq:
        return state.msgs
    if not filters and state.num_deleted == 0:
        return state.last_seq - after_seq
    count, seq = 0, after_seq + 1
    while True:
        try:
            msg = store.load_next(list(filters) or None, seq)
        except NoMessageFound:
            return count
        count, seq = count + 1, msg.seq + 1
