"""`publish_pipeline.InFlightBatches`: which publish gets which answer, and when, with batches in flight.

Method: unit tests with no runtime at all. A batch is opened with the `PubOutcome`s a `StreamLeader.decide`
would give; its entries then "settle" in the order a test chooses, with `ApplyResult`s or errors, as the
runtime's `on_settled` callbacks would deliver them. Each publish's `done` callback records its answer and
the moment it came (a global counter), so the tests read both what was answered and in which order.
"""

from __future__ import annotations

import itertools

from jsraft.raft import NotLeader
from jsraft.replica.publish_pipeline import InFlightBatches
from jsraft.stream import ApplyResult, PubOutcome
from jsraft.stream.entries import EntryKind
from jsraft.stream.outcomes import ApiError

UNKNOWN = RuntimeError("outcome unknown")


class Recorder:
    def __init__(self) -> None:
        self.answers: dict[str, object] = {}
        self.order: list[str] = []

    def done(self, name: str):
        def record(answer: object) -> None:
            assert name not in self.answers, f"{name} answered twice"
            self.answers[name] = answer
            self.order.append(name)
        return record


def _applied(first: int, last: int, refused: dict[int, ApiError] | None = None) -> ApplyResult:
    return ApplyResult(index=first, kind=EntryKind.MSGS, first_seq=first, last_seq=last, refused=refused)


def _open(batches: InFlightBatches, recorder: Recorder, prefix: str, outcomes: list[PubOutcome]):
    dones = [recorder.done(f"{prefix}{i}") for i in range(len(outcomes))]
    return batches.open(dones, outcomes)


def test_batches_are_answered_in_decision_order_even_when_a_later_one_settles_first():
    recorder, batches = Recorder(), InFlightBatches(lambda: UNKNOWN)
    a = _open(batches, recorder, "a", [PubOutcome(1), PubOutcome(2)])
    a.entries_open = 1
    batches.close(a)
    b = _open(batches, recorder, "b", [PubOutcome(3)])
    b.entries_open = 1
    batches.close(b)
    empty = _open(batches, recorder, "c", [PubOutcome(0, error=ApiError(400, 10003, "bad"))])
    batches.close(empty)  # nothing to wait for, but it waits for a and b
    batches.settled(b, None, _applied(3, 3))
    assert recorder.order == []
    batches.settled(a, None, _applied(1, 2))
    assert recorder.order == ["a0", "a1", "b0", "c0"]
    assert recorder.answers["a1"] == PubOutcome(2) and recorder.answers["b0"] == PubOutcome(3)
    assert len(batches) == 0


def test_only_the_publishes_of_a_failed_entry_get_its_error():
    recorder, batches = Recorder(), InFlightBatches(lambda: UNKNOWN)
    batch = _open(batches, recorder, "p", [PubOutcome(seq) for seq in (1, 2, 3, 4)])
    batch.entries_open = 2  # entry 1 carries seqs 1-2, entry 2 carries 3-4
    batches.close(batch)
    lost = NotLeader("n2")
    batches.settled(batch, lost, None)  # entry 2 failed first (its chain broke before entry 1 applied)
    batches.settled(batch, None, _applied(1, 2))
    assert recorder.answers == {"p0": PubOutcome(1), "p1": PubOutcome(2), "p2": lost, "p3": lost}


def test_a_store_refusal_answers_that_publish_alone():
    recorder, batches = Recorder(), InFlightBatches(lambda: UNKNOWN)
    batch = _open(batches, recorder, "p", [PubOutcome(1), PubOutcome(2)])
    batch.entries_open = 1
    batches.close(batch)
    refusal = ApiError(400, 10077, "maximum messages exceeded")
    batches.settled(batch, None, _applied(1, 2, {2: refusal}))
    assert recorder.answers == {"p0": PubOutcome(1), "p1": PubOutcome(0, error=refusal)}


def test_a_duplicate_waits_for_its_original_in_an_earlier_batch():
    recorder, batches = Recorder(), InFlightBatches(lambda: UNKNOWN)
    original = _open(batches, recorder, "o", [PubOutcome(7)])
    original.entries_open = 1
    batches.close(original)
    duplicate = _open(batches, recorder, "d", [PubOutcome(7, duplicate=True, pending=True)])
    batches.close(duplicate)  # no entries of its own
    assert recorder.order == []  # never acknowledged while the original may yet be lost
    batches.settled(original, None, _applied(7, 7))
    assert recorder.answers == {"o0": PubOutcome(7), "d0": PubOutcome(7, duplicate=True)}


def test_a_duplicate_of_a_lost_original_gets_the_original_error():
    recorder, batches = Recorder(), InFlightBatches(lambda: UNKNOWN)
    original = _open(batches, recorder, "o", [PubOutcome(7), PubOutcome(7, duplicate=True, pending=True)])
    original.entries_open = 1
    batches.close(original)
    later = _open(batches, recorder, "l", [PubOutcome(7, duplicate=True, pending=True)])
    batches.close(later)
    lost = NotLeader(None)
    batches.settled(original, lost, None)
    assert recorder.answers == {"o0": lost, "o1": lost, "l0": lost}


def test_a_batch_whose_entries_were_not_all_submitted_answers_the_rest_with_the_submit_error():
    recorder, batches = Recorder(), InFlightBatches(lambda: UNKNOWN)
    batch = _open(batches, recorder, "p", [PubOutcome(1), PubOutcome(2)])
    batch.entries_open = 1  # entry 1 (seq 1) submitted; submitting entry 2 (seq 2) raised
    refused = NotLeader(None)
    batches.close(batch, refused)
    assert recorder.order == []
    batches.settled(batch, None, _applied(1, 1))
    assert recorder.answers == {"p0": PubOutcome(1), "p1": refused}


def test_every_publish_is_answered_once_whatever_the_settle_order():
    for order in itertools.permutations(range(3)):
        recorder, batches = Recorder(), InFlightBatches(lambda: UNKNOWN)
        opened = []
        for b in range(3):
            batch = _open(batches, recorder, f"b{b}-", [PubOutcome(b * 2 + 1), PubOutcome(b * 2 + 2)])
            batch.entries_open = 1
            batches.close(batch)
            opened.append(batch)
        for b in order:
            batches.settled(opened[b], None, _applied(b * 2 + 1, b * 2 + 2))
        assert recorder.order == [f"b{b}-{i}" for b in range(3) for i in range(2)], order
