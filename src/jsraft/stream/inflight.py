"""What the stream leader has accepted but the machine has not applied yet (layer L3).

Owns: `InFlight`, the leader's record of its outstanding proposals, so that every check it makes before
proposing (expected sequences, duplicates, `discard: new` limits) counts them (DESIGN §2 step 2).

Invariants:
  1. Proposals are in log order; one is dropped once the machine's `last_seq` reaches its `last_seq`
     (entries apply in log order, so everything before it has applied too).
  2. The totals (`msgs`, `bytes`) are the sum of the live proposals' net changes: a message that evicts
     its subject's oldest under `max_msgs_per_subject` adds its size difference and no count.
  3. Removals in flight (purge, delete, expire) are not credited: the checks are conservative, so the
     store never refuses at apply what the leader accepted because of them.

Imports: L1 (`subjects`). Reference: nats-server `server/jetstream_cluster.go` (`clseq`, `inflight`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from jsraft import subjects


class Proposal:
    """The messages of one `decide` call (one or more MSGS entries), or a position move."""

    __slots__ = ("last_seq", "msgs", "bytes", "counts", "sizes", "subject_last", "msg_ids", "last_msg_id",
                 "timestamp_ns", "has_msgs", "counter_totals")

    def __init__(self, last_seq: int, timestamp_ns: int) -> None:
        self.last_seq = last_seq
        self.msgs = self.bytes = 0
        self.counts: dict[str, int] = {}  # subject -> messages added (before evictions)
        self.sizes: dict[str, list[int]] = {}  # subject -> sizes added, oldest first
        self.subject_last: dict[str, int] = {}
        self.msg_ids: dict[str, int] = {}
        self.last_msg_id = ""
        self.timestamp_ns = timestamp_ns
        self.has_msgs = False
        self.counter_totals: dict[str, object] = {}  # subject -> its newest counter decided here (ADR-49)

    def add(self, seq: int, subject: str, size: int, msg_id: str, net_msgs: int, net_bytes: int) -> None:
        self.last_seq = seq
        self.msgs += net_msgs
        self.bytes += net_bytes
        self.counts[subject] = self.counts.get(subject, 0) + 1
        self.sizes.setdefault(subject, []).append(size)
        self.subject_last[subject] = seq
        if msg_id:
            self.msg_ids[msg_id] = seq
        self.last_msg_id = msg_id
        self.has_msgs = True


class InFlight:
    def __init__(self) -> None:
        self._proposals: deque[Proposal] = deque()

    def __len__(self) -> int:
        return len(self._proposals)

    def open(self, last_seq: int, timestamp_ns: int) -> Proposal:
        proposal = Proposal(last_seq, timestamp_ns)
        self._proposals.append(proposal)
        return proposal

    def drop_if_empty(self, proposal: Proposal) -> None:
        if not proposal.has_msgs and self._proposals and self._proposals[-1] is proposal:
            self._proposals.pop()

    def prune(self, applied_last_seq: int) -> None:
        while self._proposals and self._proposals[0].last_seq <= applied_last_seq:
            self._proposals.popleft()

    def drop(self, proposal: Proposal) -> None:
        """Forget the newest proposal, `proposal` (an atomic batch refused after its first checks)."""
        if self._proposals and self._proposals[-1] is proposal:
            self._proposals.pop()

    def clear(self) -> None:
        self._proposals.clear()

    @property
    def last_seq(self) -> int:
        return self._proposals[-1].last_seq if self._proposals else 0

    @property
    def msgs(self) -> int:
        return sum(p.msgs for p in self._proposals)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self._proposals)

    def last_message(self) -> Proposal | None:
        """The newest proposal that carries messages (for the last msg-id and timestamp)."""
        return next((p for p in reversed(self._proposals) if p.has_msgs), None)

    def msg_id_seq(self, msg_id: str) -> int:
        for proposal in reversed(self._proposals):
            seq = proposal.msg_ids.get(msg_id)
            if seq is not None:
                return seq
        return 0

    def counter_total(self, subject: str) -> object | None:
        """The newest counter total decided in flight for `subject` (`stream.counters` invariant 2), or None."""
        for proposal in reversed(self._proposals):
            found = proposal.counter_totals.get(subject)
            if found is not None:
                return found
        return None

    def subject_count(self, subject: str) -> int:
        return sum(p.counts.get(subject, 0) for p in self._proposals)

    def subject_sizes(self, subject: str) -> Iterator[int]:
        for proposal in self._proposals:
            yield from proposal.sizes.get(subject, ())

    def subject_last(self, subject_filter: str) -> int:
        """The highest in-flight seq on a subject matching `subject_filter`, or 0."""
        literal = subjects.is_literal(subject_filter)
        for proposal in reversed(self._proposals):
            if literal:
                seq = proposal.subject_last.get(subject_filter, 0)
            else:
                seq = max((s for name, s in proposal.subject_last.items()
                           if subjects.matches(subject_filter, name)), default=0)
            if seq:
                return seq
        return 0
