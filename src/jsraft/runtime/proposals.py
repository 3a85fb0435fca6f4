"""Proposals in flight on one group: the backpressure bound and the waiters for their entries (layer L4).

Owns: `Proposal` (one `NodeRuntime.propose` call: its data, where its entry landed, its outcome) and
`ProposalBook` (per group: the permits that bound proposals in flight, and the proposals waiting for
their entries to be applied).

A proposal's life: admitted (a permit taken, waiting while none is free — that is the backpressure) →
queued (the group's Raft core was busy with a `Ready`) → proposed (its entry has an index and a term)
→ settled, exactly once: with the state machine's result when the entry at its index is applied with
its term; with an error when another entry took that index, a leader's snapshot covered it, it was
refused, or the group closed.

A proposal may depend on an earlier one (`after`): the stream leader numbers the messages of each batch
after those of the batches it proposed before, so a batch must not enter the log unless its predecessor
is there too, in the same term (`Proposal.chain_intact`); otherwise sequences would jump.

Invariants:
  1. `in_flight` counts admitted, unsettled proposals and never exceeds `in_flight_max`. A proposal keeps
     its permit until it settles, even if its caller was cancelled meanwhile: its entry is still in the
     log and still costs the group memory and replication, so cancelling cannot be used to overrun the
     bound.
  2. A proposal settles once; the permit is released exactly then (or when a queued proposal is
     withdrawn by its cancelled caller before it reached the core).
  3. At most one unsettled proposal per index. An entry is ours iff it has our (index, term): only the
     leader of a term creates entries in that term, and it creates one per index.

Imports: L0, L1 (`raft`), trio. Reference: etcd `wait` (etcdserver), hashicorp/raft `ApplyFuture`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import trio

from jsraft.errors import invariant
from jsraft.raft.membership import ConfChange
from jsraft.raft.types import Entry
from jsraft.runtime.errors import OutcomeUnknown


class ProposalState(enum.Enum):
    QUEUED = "queued"  # admitted; waiting for the core to be free of its outstanding Ready
    PROPOSED = "proposed"  # in the core's log at (index, term)
    SETTLED = "settled"


class Proposal:
    """One proposal; created by `ProposalBook.admit`. Plain slots: one per proposal, kept off attrs."""

    __slots__ = ("data", "change", "state", "index", "term", "event", "result", "error", "after", "on_settled")

    def __init__(self, data: bytes, change: ConfChange | None = None) -> None:
        self.data = data
        self.change = change  # a membership change instead of data
        self.state = ProposalState.QUEUED
        self.index = 0
        self.term = 0
        self.event = trio.Event()
        self.result: object = None
        self.error: BaseException | None = None
        # The proposal this one depends on (see `chain_intact`); dropped once this one reached the core.
        self.after: Proposal | None = None
        # Called once, synchronously, when the proposal settles (not when it is withdrawn).
        self.on_settled: Callable[[Proposal], None] | None = None

    def chain_intact(self, term: int) -> bool:
        """May a proposal that depends on this one go into the log now, in `term`? Only if this one is in
        the log in the same term, or was applied from it: then the dependent entry lands after it in
        one leader's log, and is lost if (and only if) this one is. A proposal that failed, was
        withdrawn, or belongs to another term breaks the chain (`Group` then drops the dependent)."""
        if self.term != term:
            return False
        return self.state is ProposalState.PROPOSED or (self.state is ProposalState.SETTLED and self.error is None)

    def outcome(self) -> object:
        """The result, or raise the error; only once settled."""
        invariant(self.state is ProposalState.SETTLED, "a proposal's outcome is read once it settled")
        if self.error is not None:
            raise self.error
        return self.result


class ProposalBook:
    """The proposals of one group on this node (see the module docstring)."""

    def __init__(self, in_flight_max: int) -> None:
        invariant(in_flight_max >= 1, "at least one proposal may be in flight")
        self.in_flight_max = in_flight_max
        self.in_flight = 0
        self._capacity = trio.Semaphore(in_flight_max)
        self._by_index: dict[int, Proposal] = {}

    @property
    def waiting(self) -> int:
        """Proposals in the core's log, waiting for their entries to be applied."""
        return len(self._by_index)

    async def admit(self, data: bytes, change: ConfChange | None = None) -> Proposal:
        """Wait for a permit (backpressure; cancellable), then a new queued proposal holding it. A free
        permit is taken without a scheduling point: on a sync publish's path each one costs a pass of the
        event loop (bench/README.md, "The sync publish path")."""
        try:
            self._capacity.acquire_nowait()
        except trio.WouldBlock:
            await self._capacity.acquire()
        self.in_flight += 1
        invariant(self.in_flight <= self.in_flight_max, "proposals in flight stay within the bound")
        return Proposal(data, change)

    def proposed(self, proposal: Proposal, index: int, term: int, lost: Callable[[], BaseException]) -> None:
        """The core appended the proposal's entry at (`index`, `term`)."""
        invariant(proposal.state is ProposalState.QUEUED, "a proposal is proposed once")
        previous = self._by_index.pop(index, None)
        if previous is not None:
            # Our leadership returned and we appended at an index where an entry of ours from an older
            # term was: that entry was truncated, so it never commits (invariant 3).
            invariant(previous.term < term, "a newer proposal at an index has a newer term")
            self.settle(previous, error=lost())
        proposal.state, proposal.index, proposal.term = ProposalState.PROPOSED, index, term
        self._by_index[index] = proposal

    def settle(self, proposal: Proposal, *, result: object = None,
               error: BaseException | None = None) -> None:
        """Record the outcome, wake the caller, release the permit (invariant 2). Idempotent."""
        if proposal.state is ProposalState.SETTLED:
            return
        if proposal.state is ProposalState.PROPOSED and self._by_index.get(proposal.index) is proposal:
            del self._by_index[proposal.index]
        proposal.state, proposal.result, proposal.error = ProposalState.SETTLED, result, error
        proposal.event.set()
        self._release()
        if proposal.on_settled is not None:
            proposal.on_settled(proposal)

    def withdraw(self, proposal: Proposal) -> None:
        """A queued proposal's caller was cancelled before the core saw it: free its permit."""
        invariant(proposal.state is ProposalState.QUEUED, "only a queued proposal is withdrawn")
        proposal.state = ProposalState.SETTLED
        proposal.error = OutcomeUnknown("withdrawn by its cancelled caller before it reached the core")
        self._release()

    def _release(self) -> None:
        self.in_flight -= 1
        invariant(self.in_flight >= 0, "permits released once each")
        self._capacity.release()

    def on_applied(self, entries: Sequence[Entry], results: Sequence[object],
                   lost: Callable[[], BaseException]) -> None:
        """Settle the proposals whose index was just applied: ours (same term) or lost (another entry)."""
        if not self._by_index:
            return
        for entry, result in zip(entries, results):
            proposal = self._by_index.get(entry.index)
            if proposal is None:
                continue
            if proposal.term == entry.term:
                self.settle(proposal, result=result)
            else:
                self.settle(proposal, error=lost())

    def on_snapshot(self, index: int) -> None:
        """A leader's snapshot replaced the log through `index`: those entries were never applied here."""
        for proposal in [p for i, p in self._by_index.items() if i <= index]:
            self.settle(proposal, error=OutcomeUnknown(
                f"a snapshot through {index} covered the proposal at index {proposal.index}"))

    def fail_all(self, error_for: Callable[[], BaseException]) -> None:
        """Settle every proposal in the log with an error (the group closed)."""
        for proposal in list(self._by_index.values()):
            self.settle(proposal, error=error_for())
