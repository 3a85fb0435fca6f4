"""The stream leader's publish pipeline: decide → open batch → entries, then the batches in flight until
their entries settle (layer L3½).

Owns: `decide` (whether a batch of publishes may be decided now — a `StreamLeader` exists and the stream is
not stopped here — and, if so, `StreamLeader.decide`'s dedup / expected-seq / limits checks and the MSGS
entries to propose), `InFlightBatches.decide_and_open` (that decision opened as a batch: the entries the
trio shell proposes, or every publish refused at once), `BatchAnswers` (one `StreamLeader.decide` batch: which publish gets which answer, filled in by the
runtime's `on_settled` callbacks of its entries' proposals) and `InFlightBatches` (every such batch of
one replica, answered in the order they were decided). With them the replica's pump proposes a batch and
goes on to decide the next one at once, instead of waiting for the first to commit: the entries of
several batches share the leader's and the followers' fsyncs and round trips (DESIGN §2 step 4, group
commit), and no task waits per batch or per publish.

Invariants:
  1. Batches are answered in decision order, each once every entry of it settled (an empty one — all
     duplicates or refusals — once every earlier one was answered).
  2. Each publish is answered once: from the `ApplyResult` of the entry that carried it (its seq, or
     the store's refusal), else — its entry failed (never committed, or its outcome unknown) — with
     that failure, the batch's first. A publish is never answered with an error when its entry applied.
  3. A duplicate of a publish still in flight is answered as its original is (`StreamLeader` marks it
     `pending` with the original's seq), whether the original is in its own batch or an earlier one
     (answered first, by 1) — never acknowledged while the original may yet be lost.
  4. Nothing is decided without a `StreamLeader` (NotLeader) or while the stream is stopped here
     (StreamOffline, stream_replica invariant 6): such a batch is refused whole and opens no batch, so
     no sequence is assigned that no entry will carry.
  5. On a stream with `persist_mode: async` (nats-server 2.12; R1 file streams only, `stream_config`) a
     batch is answered as decided once its entries are proposed (`BatchAnswers.early`), without waiting for
     the fsync that commits them: what the user asked for, and outside jsraft's zero-loss promise — a
     crash before the entries are durable loses them though they were acknowledged (a refusal at apply
     is not reported either). Everything else — the log, the fsync, the commit, the apply, every storage
     rule — is what it is on any stream; reads see a message once it applied.

The trio shell (`server.groups.stream_replica`) only proposes the entries `decide_and_open` returns, in
order; the simulator's stream clients (`testing.sim.stream_clients`) decide through `decide` as well.

Imports: stdlib, L1 (`raft` errors), L3 (`stream` leader, outcomes and results; `meta` errors).
Must not import: trio, anything of the server layer.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

from jsraft.jsapi.stream_config import PersistMode
from jsraft.meta import StreamOffline
from jsraft.raft.errors import NotLeader
from jsraft.stream import ApplyResult, PubOutcome, StreamLeader
from jsraft.stream.leader import Decision

Done = Callable[[Any], None]
Publish = tuple[str, bytes, bytes]  # (subject, headers, payload)
Queued = tuple[str, bytes, bytes, Done]  # a publish and the callback its answer goes to


def decide(leader: StreamLeader | None, publishes: Sequence[Publish], now_ns: int, *,
           leader_id: str | None, stopped_reason: str | None) -> Decision | BaseException:
    """The decision on `publishes` arrived together at `now_ns` (the node's steady wall clock): the
    `StreamLeader`'s outcomes and entries, or why none may be decided now (invariant 4)."""
    if leader is None:
        return NotLeader(leader_id)
    if stopped_reason is not None:
        return StreamOffline(stopped_reason)
    return leader.decide(publishes, now_ns)


class BatchAnswers:
    """One decided batch: its publishes' `done` callbacks and the answers gathered for them."""

    __slots__ = ("dones", "answers", "by_seq", "pending", "entries_open", "submitting", "error", "values", "early")

    def __init__(self, dones: Sequence[Done], outcomes: Sequence[PubOutcome], *, early: bool = False) -> None:
        self.dones = dones
        self.early = early  # `persist_mode: async` (invariant 5): answered as decided once its entries are proposed
        self.answers: list[Any] = [None] * len(dones)
        self.by_seq: dict[int, int] = {}  # seq -> position of the publish stored at it
        self.pending: dict[int, int] = {}  # position of a duplicate -> seq of its in-flight original
        # position -> its decided outcome, answered as decided once applied: a counter's total (ADR-49), an
        # atomic batch's id and count (ADR-50)
        self.values: dict[int, PubOutcome] | None = None
        for position, outcome in enumerate(outcomes):
            if outcome.pending:
                self.pending[position] = outcome.seq
            elif outcome.error is not None or outcome.duplicate or outcome.staged:
                self.answers[position] = outcome
            else:
                self.by_seq[outcome.seq] = position
                if early:
                    self.answers[position] = outcome
                if outcome.value is not None or outcome.batch is not None:
                    if self.values is None:
                        self.values = {}
                    self.values[position] = outcome
        self.entries_open = 0  # entries submitted and not settled
        self.submitting = True  # more entries may still be submitted
        self.error: BaseException | None = None  # the batch's first failed entry's error

    @property
    def complete(self) -> bool:
        return not self.submitting and (self.early or self.entries_open == 0)

    def entry_applied(self, result: Any) -> None:
        if not isinstance(result, ApplyResult) or self.early:
            return
        refused = result.refused or {}
        by_seq, answers = self.by_seq, self.answers
        for seq in range(result.first_seq, result.last_seq + 1):
            position = by_seq.get(seq)
            if position is None:
                continue
            error = refused.get(seq) or result.error
            if error is not None:
                answers[position] = PubOutcome(0, error=error)
            else:
                decided = self.values.get(position) if self.values else None
                answers[position] = decided if decided is not None else PubOutcome(seq)

    def entry_failed(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error


class InFlightBatches:
    """The batches of one replica from decision to answer (invariant 1)."""

    def __init__(self, unknown: Callable[[], BaseException]) -> None:
        self._batches: collections.deque[BatchAnswers] = collections.deque()
        # seq of an original in flight -> [its answer once known, batches waiting for it] (invariant 3)
        self._watched: dict[int, list[Any]] = {}
        self._unknown = unknown  # the answer of a publish whose outcome nothing told

    def __len__(self) -> int:
        return len(self._batches)

    def decide_and_open(self, leader: StreamLeader | None, batch: Sequence[Queued], now_ns: int, *,
                        leader_id: str | None, stopped_reason: str | None) -> tuple[BatchAnswers, list[bytes]] | None:
        """Decide `batch` and open it: its answers and the entries to propose, in order. `None` when it was
        refused whole (invariant 4): every publish has been answered with the refusal already."""
        decision = decide(leader, [(subject, headers, payload) for subject, headers, payload, _ in batch], now_ns,
                          leader_id=leader_id, stopped_reason=stopped_reason)
        if isinstance(decision, BaseException):
            for _, _, _, done in batch:
                done(decision)
            return None
        early = leader is not None and leader.machine.config.persist_mode is PersistMode.async_
        return self.open([done for _, _, _, done in batch], decision.outcomes, early=early), decision.entries

    def open(self, dones: Sequence[Done], outcomes: Sequence[PubOutcome], *, early: bool = False) -> BatchAnswers:
        batch = BatchAnswers(dones, outcomes, early=early)
        for seq in batch.pending.values():
            if seq not in batch.by_seq:
                self._watched.setdefault(seq, [None, 0])[1] += 1
        self._batches.append(batch)
        return batch

    def settled(self, batch: BatchAnswers, error: BaseException | None, result: Any) -> None:
        """One entry of `batch` settled (a proposal's `on_settled`)."""
        batch.entries_open -= 1
        if error is not None:
            batch.entry_failed(error)
        else:
            batch.entry_applied(result)
        self.deliver()

    def close(self, batch: BatchAnswers, error: BaseException | None = None) -> None:
        """No more entries will be submitted for `batch` (`error`: why the rest were not)."""
        batch.submitting = False
        if error is not None:
            batch.entry_failed(error)
        self.deliver()

    def deliver(self) -> None:
        """Answer every complete batch at the head, in order (invariant 1)."""
        batches = self._batches
        while batches and batches[0].complete:
            self._answer(batches.popleft())

    def _answer(self, batch: BatchAnswers) -> None:
        answers, watched = batch.answers, self._watched
        for seq, position in batch.by_seq.items():
            if answers[position] is None and batch.error is not None:
                answers[position] = batch.error  # invariant 2: its entry failed
            held = watched.get(seq)
            if held is not None:
                held[0] = answers[position]
        for position, seq in batch.pending.items():
            original = batch.by_seq.get(seq)
            if original is not None:
                answer = answers[original]
            else:
                held = watched.get(seq)
                answer = held[0] if held is not None else None
                if held is not None:
                    held[1] -= 1
                    if held[1] == 0:
                        del watched[seq]
            if isinstance(answer, PubOutcome) and answer.error is None:
                answers[position] = PubOutcome(seq, duplicate=True)
            else:
                answers[position] = answer  # the original's error, or None: outcome unknown
        for done, answer in zip(batch.dones, answers):
            done(answer if answer is not None else self._unknown())
