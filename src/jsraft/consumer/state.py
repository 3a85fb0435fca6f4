"""One consumer's replicated state and the rules that change it (layer L3).

Owns: `ConsumerState` — `delivered` and `ack_floor` as (consumer_seq, stream_seq) pairs, `pending`
{stream_seq: (consumer_seq, ts_ns)} and `redelivered` {stream_seq: count} as in nats-server's
`ConsumerState` — and the per-op transitions. Each transition returns the stream sequences this consumer
stopped needing (for interest / work-queue retention) as inclusive `(first, last)` ranges.

Invariants (checked by `check()` and the Hypothesis state-machine test):
  1. The ack floor never moves back, and moves only when an ack, a term, a give-up (max deliveries) or a
     purge removes pending messages — never on a delivery (nats-server `processAckMsg`): with ack policy
     explicit it moves when the lowest pending message goes, to just below the next pending one
     (`(cseq - 1, sseq - 1)`) or, with none left, to `delivered`; with ack policy all an ack moves it to the
     acked message (or to `delivered` when nothing is left pending); with ack policy none it equals
     `delivered` always. So it is never above `(cseq - 1, sseq - 1)` of the lowest pending message.
  2. `ack_floor <= delivered` componentwise, and every pending stream seq is in
     `(ack_floor.stream_seq, delivered.stream_seq]` with its consumer seq in
     `(ack_floor.consumer_seq, delivered.consumer_seq]`.
  3. `pending`'s keys are in increasing order (a new pending entry is always above `delivered`, and an
     entry is only ever updated in place or removed), so its first key is its minimum.
  4. An ack, term or delivery record for an unknown, already acked or out-of-range seq is a no-op; so
     replaying an op twice, or an old leader's stale op, changes nothing.

Imports: L0, L1 (`jsapi`). Reference: nats-server `server/memstore.go` (consumerMemStore.UpdateDelivered,
UpdateAcks), `server/consumer.go` (processTerm, hasMaxDeliveries).
"""

from __future__ import annotations

from collections.abc import Iterable

from jsraft.errors import invariant
from jsraft.jsapi.consumer_config import AckPolicy

Range = tuple[int, int]


class ConsumerState:
    """Mutable, slotted: one per consumer, changed on every applied op (kept off attrs: hot path)."""

    __slots__ = ("delivered_consumer_seq", "delivered_stream_seq", "ack_floor_consumer_seq",
                 "ack_floor_stream_seq", "pending", "redelivered")

    def __init__(self, start_stream_seq: int = 0) -> None:
        self.delivered_consumer_seq = 0
        self.delivered_stream_seq = start_stream_seq
        self.ack_floor_consumer_seq = 0
        self.ack_floor_stream_seq = start_stream_seq
        self.pending: dict[int, tuple[int, int]] = {}
        self.redelivered: dict[int, int] = {}

    @property
    def num_ack_pending(self) -> int:
        return len(self.pending)

    @property
    def num_redelivered(self) -> int:
        return len(self.redelivered)

    def key(self) -> tuple:
        """Everything replicated, as one comparable value (replicas must agree on it)."""
        return (self.delivered_consumer_seq, self.delivered_stream_seq, self.ack_floor_consumer_seq,
                self.ack_floor_stream_seq, tuple(self.pending.items()), tuple(sorted(self.redelivered.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConsumerState) and self.key() == other.key()

    def __repr__(self) -> str:
        return (f"ConsumerState(delivered=({self.delivered_consumer_seq}, {self.delivered_stream_seq}), "
                f"ack_floor=({self.ack_floor_consumer_seq}, {self.ack_floor_stream_seq}), "
                f"pending={len(self.pending)}, redelivered={len(self.redelivered)})")

    def needs(self, seq: int) -> bool:
        """Whether this consumer still needs stream message `seq` (its filter is checked by the caller)."""
        return seq > self.delivered_stream_seq or seq in self.pending

    # --- transitions ---------------------------------------------------------------------------

    def apply_delivered(self, records: Iterable[tuple[int, int, int, int]], ack_policy: AckPolicy,
                        max_deliver: int) -> list[Range]:
        released: list[Range] = []
        lowest = self._lowest()
        for sseq, cseq, count, ts in records:
            if cseq <= self.ack_floor_consumer_seq:
                continue  # a replay of something already acked (nats-server: "old leader replay")
            if ack_policy is AckPolicy.none:
                if sseq > self.delivered_stream_seq and cseq > self.delivered_consumer_seq:
                    released.append((self.delivered_stream_seq + 1, sseq))
                    self.delivered_consumer_seq, self.delivered_stream_seq = cseq, sseq
                continue
            if count == 1 and sseq > self.delivered_stream_seq and cseq > self.delivered_consumer_seq:
                # The usual record, a first delivery of a new message: `_delivered_one`'s outcome for it
                # (pending, both cursors moved; a count of 1 is never past `max_deliver`), without its call.
                self.pending[sseq] = (cseq, ts)
                self.delivered_consumer_seq, self.delivered_stream_seq = cseq, sseq
                continue
            released.extend(self._delivered_one(sseq, cseq, count, ts, max_deliver))
        if ack_policy is AckPolicy.none or (lowest is not None and lowest not in self.pending):
            self._settle_floor()  # invariant 1: a delivery alone never moves it; a give-up of the lowest does
        return released

    def _lowest(self) -> int | None:
        """The lowest pending stream seq (invariant 3: the first key)."""
        return next(iter(self.pending), None)

    def _delivered_one(self, sseq: int, cseq: int, count: int, ts: int, max_deliver: int) -> list[Range]:
        if sseq <= self.delivered_stream_seq:
            entry = self.pending.get(sseq)
            if entry is None:
                return []  # acked, termed or never ours: a stale record
            # A redelivery, a NAK delay or a progress note: the original consumer seq is kept.
            self.pending[sseq] = (entry[0], ts)
        elif cseq > self.delivered_consumer_seq:
            self.pending[sseq] = (cseq, ts)
            self.delivered_stream_seq = sseq
        else:
            return []  # a new message must get a new consumer seq; anything else is not ours to apply
        self.delivered_consumer_seq = max(self.delivered_consumer_seq, cseq)
        if count > 1:
            self.redelivered[sseq] = max(self.redelivered.get(sseq, 0), count - 1)
        if 0 < max_deliver < count:
            # Out of deliveries: nats-server drops it from pending, which lets the ack floor pass it.
            del self.pending[sseq]
            return [(sseq, sseq)]
        return []

    def apply_ack(self, seqs: Iterable[int], ack_policy: AckPolicy) -> list[Range]:
        if ack_policy is AckPolicy.none:
            return []  # nats-server: ErrNoAckPolicy; delivered == ack floor already
        released: list[Range] = []
        lowest: int | None = None  # ack policy explicit: the lowest pending before this op's first ack
        for sseq in seqs:
            self.redelivered.pop(sseq, None)
            if sseq not in self.pending:
                continue
            if ack_policy is AckPolicy.all:
                low, cseq = self.ack_floor_stream_seq + 1, self.pending[sseq][0]
                for seq in [s for s in self.pending if s <= sseq]:
                    del self.pending[seq]
                    self.redelivered.pop(seq, None)
                released.append((low, sseq))
                self._ack_all_floor(cseq, sseq)
            else:
                if lowest is None:
                    lowest = self._lowest()
                del self.pending[sseq]
                released.append((sseq, sseq))
        if lowest is not None and lowest not in self.pending:
            # Settled once for the op, not once per ack: the floor only moves when the lowest pending
            # message went, and then to just below the lowest left — the last per-ack move's outcome.
            self._settle_floor()
        return released

    def _ack_all_floor(self, cseq: int, sseq: int) -> None:
        """Ack policy all: the floor moves to the acked message (nats-server `processAckMsg` AckAll)."""
        if not self.pending:
            self._settle_floor()
        elif (cseq, sseq) > (self.ack_floor_consumer_seq, self.ack_floor_stream_seq):
            self._move_floor((max(cseq, self.ack_floor_consumer_seq), max(sseq, self.ack_floor_stream_seq)))

    def apply_term(self, seqs: Iterable[int]) -> list[Range]:
        """`+TERM`: the message is done for this consumer, whatever the ack policy."""
        released: list[Range] = []
        lowest = self._lowest()
        for sseq in seqs:
            if self.pending.pop(sseq, None) is not None:
                self.redelivered.pop(sseq, None)
                released.append((sseq, sseq))
        if lowest is not None and lowest not in self.pending:
            self._settle_floor()
        return released

    def apply_skip(self, stream_seq: int) -> list[Range]:
        """Move the delivered cursor up to `stream_seq`: the messages below are not for this consumer."""
        if stream_seq <= self.delivered_stream_seq:
            return []
        released = [(self.delivered_stream_seq + 1, stream_seq)]
        caught_up = (self.ack_floor_consumer_seq, self.ack_floor_stream_seq) == (
            self.delivered_consumer_seq, self.delivered_stream_seq)
        self.delivered_stream_seq = stream_seq
        if caught_up:  # nothing outstanding (always so for ack policy none): the floor follows the cursor
            self._settle_floor()
        return released

    def apply_purge(self, first_seq: int) -> None:
        """The stream removed every message below `first_seq`: forget them (nats-server `consumer.purge`)."""
        for seq in [s for s in self.pending if s < first_seq]:
            del self.pending[seq]
        for seq in [s for s in self.redelivered if s < first_seq]:
            del self.redelivered[seq]
        if self.delivered_stream_seq < first_seq - 1:
            self.delivered_stream_seq = first_seq - 1
        self._settle_floor()

    def _settle_floor(self) -> None:
        """Move the floor as far as invariant 1 allows: below the lowest pending message, or to `delivered`."""
        if self.pending:
            sseq, (cseq, _) = next(iter(self.pending.items()))
            self._move_floor((cseq - 1, sseq - 1))
        else:
            self._move_floor((self.delivered_consumer_seq, self.delivered_stream_seq))

    def _move_floor(self, floor: tuple[int, int]) -> None:
        if floor[0] < self.ack_floor_consumer_seq or floor[1] < self.ack_floor_stream_seq:  # no message built per ack
            invariant(False, f"ack floor moved back: {floor} < ({self.ack_floor_consumer_seq}, "
                             f"{self.ack_floor_stream_seq})")
        if floor[1] > self.ack_floor_stream_seq and self.redelivered:
            # Counts below the floor are of no further use (nats-server `RemoveRedeliveredBelow`); dropping
            # them keeps `redelivered` bounded by the pending window.
            for seq in [s for s in self.redelivered if s <= floor[1]]:
                del self.redelivered[seq]
        self.ack_floor_consumer_seq, self.ack_floor_stream_seq = floor

    def check(self) -> None:
        """Assert invariants 2 and 3 (1 is asserted on every move)."""
        invariant(self.ack_floor_consumer_seq <= self.delivered_consumer_seq, "ack floor above delivered")
        invariant(self.ack_floor_stream_seq <= self.delivered_stream_seq, "ack floor above delivered")
        previous = 0
        for sseq, (cseq, _) in self.pending.items():
            invariant(sseq > previous, "pending keys out of order")
            invariant(self.ack_floor_stream_seq < sseq <= self.delivered_stream_seq, "pending seq out of range")
            invariant(self.ack_floor_consumer_seq < cseq <= self.delivered_consumer_seq, "pending cseq out of range")
            previous = sseq
