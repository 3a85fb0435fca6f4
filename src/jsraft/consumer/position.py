"""Where a consumer starts, and how many messages it has left: pure functions of config and store (L3).

Owns: `start_position` — the delivered cursor a new consumer starts from, per deliver policy — and
`num_pending`. `start_position` runs on the stream leader when it proposes a CREATE: the leader resolves
the start over its store and carries it in the op (`CreateOp.start_seq` / `start_last_seq`, ops.py), so
every replica starts the consumer at the same place even when its own store is ahead of the entry (a
restart's replay, a catch-up from a source further along). It still runs at apply for a kind-1 CREATE
written by an older build (machine.py).

Invariants:
  1. `start_position` returns `(delivered_stream_seq, start_last_seq)` with
     `0 <= delivered_stream_seq <= max(last_seq, opt_start_seq - 1)`; `start_last_seq` is the stream's last
     seq at creation for `last_per_subject` (messages up to it are delivered only if last on their
     subject), else 0.
  2. Nothing here reads a clock: `by_start_time` compares message timestamps with the config's time.
  3. A damaged record (`DamagedSequence`: the store lists the fault from then on) never escapes: its seq is
     known, so it counts as a message (a start on it, one more pending) — never fewer deliveries.
  4. `num_pending` answers exactly what a walk over the matching messages above `after_seq` would; for a
     filtered consumer it uses the store's per-subject counts (`subject_counts`) and walks at most the
     shorter side of `after_seq` (the leader calls it once per delivery batch and for every info) — and
     not at all when the filter matches every message in the store, which is then counted as unfiltered.
     Unfiltered (or so counted) over a stream with interior deletes, a store that can count its live
     messages in a range from its summaries (`count_live`: FileStore's block slots, no record read) is asked
     instead of walked; a fault in the range makes it raise, and the walk (which counts a damaged record as
     a message, invariant 3) answers then.

Imports: L0, L1 (`jsapi`, `subjects`), L2 (`store`). Reference: nats-server `server/consumer.go`
(selectStartingSeqNo, numPending / streamNumPending).
"""

from __future__ import annotations

from collections.abc import Sequence

from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.jsapi.consumer_config import ConsumerConfig, DeliverPolicy, rfc3339_to_ns
from jsraft.store.base import StreamStore


def _filters_or_all(filters: Sequence[str]) -> Sequence[str]:
    return filters or (">",)


def _last_seq(store: StreamStore, subject_filter: str) -> int:
    """The seq of the last message matching `subject_filter`, 0 when none (invariant 3), from the store's
    subject index: a `last_per_subject` start asks it of every subject and its delivery of every message,
    and reading each record only for its seq was most of a KV `keys()` (a store without that lookup, a test
    double, is asked for the record)."""
    last_matching_seq = getattr(store, "last_matching_seq", None)
    if last_matching_seq is not None:
        return last_matching_seq(subject_filter)
    try:
        return store.load_last(subject_filter).seq
    except NoMessageFound:
        return 0
    except DamagedSequence as error:
        return error.seq


def _last_seq_matching(store: StreamStore, filters: Sequence[str]) -> int:
    return max((_last_seq(store, subject_filter) for subject_filter in _filters_or_all(filters)), default=0)


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
        except DamagedSequence as error:  # its time cannot be read: it qualifies (invariant 3)
            found, high = error.seq, error.seq - 1
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
    lasts = [seq for subject_filter in _filters_or_all(config.filters)
             for subject in store.subject_counts(subject_filter) if (seq := _last_seq(store, subject))]
    return (min(lasts) - 1 if lasts else last_seq), last_seq


def is_last_at_start(store: StreamStore, seq: int, subject: str, start_last_seq: int) -> bool:
    """For `last_per_subject`: is `seq` the last message on `subject` among seqs <= `start_last_seq`?
    The subject's last message (the store keeps it per subject) answers unless it came after
    `start_last_seq`; only then is the next one after `seq` looked for, which scans the stream (a KV
    `keys()` over 5,000 keys written twice took a minute of server CPU asking that of every key)."""
    last = _last_seq(store, subject)
    if last == seq:
        return True
    if seq < last <= start_last_seq:
        return False
    try:
        following = store.load_next(subject, seq + 1).seq
    except NoMessageFound:
        return True
    except DamagedSequence as error:
        following = error.seq
    return following > start_last_seq


def _count_matching(store: StreamStore, filters: list[str] | None, first: int, last: int) -> int:
    """Messages matching `filters` with a seq in `first..last`, by walking `load_next`."""
    count, seq = 0, first
    while seq <= last:
        try:
            found = store.load_next(filters, seq).seq
        except NoMessageFound:
            break
        except DamagedSequence as error:  # invariant 3: still a message
            found = error.seq
        if found > last:
            break
        count, seq = count + 1, found + 1
    return count


def _total_matching(store: StreamStore, filters: Sequence[str]) -> int:
    """Every message matching `filters`, from the per-subject counts (overlapping filters counted once)."""
    counts: dict[str, int] = {}
    for subject_filter in filters:
        counts.update(store.subject_counts(subject_filter))
    return sum(counts.values())


def num_pending(store: StreamStore, filters: Sequence[str], after_seq: int) -> int:
    """Messages matching `filters` (all when empty) with a seq above `after_seq` (invariant 4).

    O(1) for an unfiltered consumer on a stream without interior deletes; otherwise the message count (for
    a filtered one, the sum of its per-subject counts) and a walk over the shorter of
    `first_seq..after_seq` (subtracted) and `after_seq + 1..last_seq` (counted).
    """
    state = store.state()
    if after_seq >= state.last_seq or state.msgs == 0:
        return 0
    total = _total_matching(store, filters) if filters else state.msgs
    if total == state.msgs:
        # The filter matches every message (nats-py's `pull_subscribe(subject)` sets the stream's one
        # subject as its filter): count as unfiltered, O(1) without a walk over the store.
        filters = ()
    if not filters and after_seq < state.first_seq:
        return state.msgs
    if not filters and state.num_deleted == 0:
        return state.last_seq - after_seq
    count_live = getattr(store, "count_live", None)
    if not filters and count_live is not None:
        try:
            return count_live(max(after_seq + 1, state.first_seq), state.last_seq)
        except DamagedSequence:
            pass  # the walk counts the damaged record as a message (invariant 3)
    wanted = list(filters) or None
    if after_seq >= state.first_seq and state.last_seq - after_seq <= after_seq - state.first_seq + 1:
        return _count_matching(store, wanted, after_seq + 1, state.last_seq)
    if after_seq < state.first_seq:
        return total
    return total - _count_matching(store, wanted, state.first_seq, after_seq)
