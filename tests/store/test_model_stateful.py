"""Stateful property test: a store under test and the naive `ModelStore` must never disagree.

Method: Hypothesis' `RuleBasedStateMachine` draws a config, then random sequences of every operation
(appends with some bad seqs/subjects, batches, skips across digest ranges, deletes, purges, compacts,
truncates, expiry with non-monotonic timestamps, config updates, reads). Each operation runs on both;
they must return equal values or raise the same error class and err_code, and after every step the
state, digest ranges, subject counts and faults must be equal.

The system under test comes from the `store_kit` fixture (`StoreMachine.kit`), so the same machine runs
on every store kind; `reopen` is a rule that runs only where the kit can reopen (file). Extend it by
subclassing `StoreMachine` (e.g. a power-cut rule) and running it with `run_machine`.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from reference_model import ModelStore

from jsraft.errors import JsraftError
from jsraft.store.base import DIGEST_RANGE_SEQS, Discard, StoreConfig

SETTINGS = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

SUBJECTS = ["a", "b", "a.x", "a.y.z", "b.x"]
PAYLOADS = [b"", b"x", b"xy"]
FILTERS = [">", "*", "a", "a.*", "a.>", "*.x", "b.>", "c", "*.*.z"]
HEADER_CHOICES = [b"", b"NATS/1.0\r\n\r\n"]


@st.composite
def configs(draw) -> StoreConfig:
    discard = draw(st.sampled_from([Discard.old, Discard.new]))
    per_max = draw(st.sampled_from([-1, 1, 2, 3]))
    # Most messages are 31..33 bytes ("a"/"b", payload of 0..2 bytes), so these budgets are often
    # filled exactly: the boundary of "would exceed" is exercised, not only the middle.
    return StoreConfig(
        max_msgs=draw(st.sampled_from([-1, 2, 3, 5])),
        max_bytes=draw(st.sampled_from([-1, -1, 64, 96, 128, 400])),
        max_msgs_per_subject=per_max,
        max_msg_size=draw(st.sampled_from([-1, -1, 8, 16])),
        discard=discard,
        discard_new_per_subject=discard == Discard.new and per_max != -1 and draw(st.booleans()),
    )


messages = st.tuples(
    st.sampled_from(SUBJECTS + SUBJECTS[:2] * 3),
    st.sampled_from(HEADER_CHOICES + [b""] * 4),
    st.one_of(st.sampled_from(PAYLOADS), st.binary(max_size=12)),
)


class StoreMachine(RuleBasedStateMachine):
    kit = None  # a conftest.StoreKit; set by `run_machine`

    def __init__(self) -> None:
        super().__init__()
        self.sut = None
        self.model: ModelStore | None = None
        self.clock_ns = 1_000

    @initialize(config=configs())
    def open_store(self, config: StoreConfig) -> None:
        self.sut = self.kit.make(config)
        self.model = ModelStore(config)

    def both(self, name: str, *args):
        """Run `name` on the store and the model; they must return or fail alike."""
        outcomes = []
        for target in (self.sut, self.model):
            try:
                outcomes.append(("returned", getattr(target, name)(*args)))
            except JsraftError as error:
                outcomes.append(("raised", type(error).__name__, error.err_code))
        assert outcomes[0] == outcomes[1], f"{name}{args}: store {outcomes[0]} != model {outcomes[1]}"
        return outcomes[0]

    def first_seq(self) -> int:
        return self.model.state().first_seq

    def tick(self, step_ns: int) -> int:
        """Timestamps mostly rise but sometimes go back, so expiry's stop rule is exercised."""
        self.clock_ns = max(0, self.clock_ns + step_ns)
        return self.clock_ns

    # --- writes ---

    @rule(
        message=messages,
        step_ns=st.integers(-5, 20),
        seq_offset=st.sampled_from([0] * 10 + [1, -1]),
        bad_subject=st.sampled_from([None] * 10 + ["a.*", "a b"]),
    )
    def append(self, message, step_ns: int, seq_offset: int, bad_subject: str | None) -> None:
        subject, headers, payload = message
        subject = bad_subject or subject
        seq = self.model.last_seq + 1 + seq_offset
        self.both("append", seq, subject, headers, payload, self.tick(step_ns))

    @rule(payload=st.sampled_from(PAYLOADS), back=st.integers(0, 2))
    def append_to_a_recent_subject(self, payload: bytes, back: int) -> None:
        """Re-use a live subject: drives per-subject limits and `discard: new` replacements."""
        recent = [self.model.msgs[seq].subject for seq in self.model.seqs()[-3:]] or ["a"]
        subject = recent[min(back, len(recent) - 1)]
        self.both("append", self.model.last_seq + 1, subject, b"", payload, self.tick(1))

    @rule(batch=st.lists(messages, min_size=1, max_size=6))
    def append_many(self, batch) -> None:
        """Valid appends one by one: the removal rules need something to remove."""
        for subject, headers, payload in batch:
            self.both("append", self.model.last_seq + 1, subject, headers, payload, self.tick(2))

    @rule(batch=st.lists(messages, min_size=1, max_size=5), bad_at=st.sampled_from([None] * 4 + [0, 1, 2]))
    def append_batch(self, batch, bad_at) -> None:
        start = self.model.last_seq + 1
        rows = [(start + i, s, h, p, self.tick(3)) for i, (s, h, p) in enumerate(batch)]
        if bad_at is not None and bad_at < len(rows):
            rows[bad_at] = (rows[bad_at][0], "bad subject", b"", b"", 1)
        self.both("append_batch", rows)

    @rule(
        count=st.sampled_from([1, 1, 2, 5, DIGEST_RANGE_SEQS, 0]),
        seq_offset=st.sampled_from([0] * 8 + [1]),
    )
    def skip(self, count: int, seq_offset: int) -> None:
        self.both("skip", self.model.last_seq + 1 + seq_offset, count)

    # --- removal ---

    @rule(offset=st.integers(-2, 12), erase=st.booleans())
    def delete(self, offset: int, erase: bool) -> None:
        self.both("erase" if erase else "delete", max(0, self.first_seq() + offset))

    @rule(
        subject=st.sampled_from([None] + FILTERS * 2),
        seq_offset=st.one_of(st.none(), st.integers(0, 6)),
        keep=st.one_of(st.none(), st.integers(0, 4)),
    )
    def purge(self, subject, seq_offset, keep) -> None:
        seq = None if seq_offset is None else self.first_seq() + seq_offset
        self.both("purge", subject, seq, keep)

    @rule(subject=st.sampled_from([None, ">", "a", "a.*", "*", "b.>"]), keep=st.integers(1, 3))
    def purge_keep(self, subject, keep: int) -> None:
        self.both("purge", subject, None, keep)

    @rule(offset=st.integers(-1, 4))
    def compact(self, offset: int) -> None:
        self.both("compact", max(0, self.first_seq() + offset))

    @rule(back=st.integers(0, 4), valid=st.sampled_from([True] * 4 + [False]))
    def truncate(self, back: int, valid: bool) -> None:
        low, high = max(0, self.first_seq() - 1), self.model.last_seq
        seq = max(low, high - back) if valid else high + 1 + back
        self.both("truncate", seq)

    @rule(back_ns=st.integers(0, 80), at_message=st.integers(0, 4), plus=st.sampled_from([0, 1]))
    def expire(self, back_ns: int, at_message: int, plus: int) -> None:
        stamps = [m.timestamp_ns for m in self.model.msgs.values()]
        if stamps and at_message < len(stamps):
            # A cut-off equal to (or just above) a stored timestamp: the boundary of "below".
            self.both("expire", stamps[at_message] + plus)
        else:
            self.both("expire", self.clock_ns - 20 - back_ns)

    @rule(config=configs())
    def update_config(self, config: StoreConfig) -> None:
        self.both("update_config", config)

    # --- reads ---

    @rule(
        subject_filter=st.sampled_from(FILTERS + ["a b"]),
        filters=st.lists(st.sampled_from(FILTERS), max_size=3),
        offset=st.integers(-1, 12),
    )
    def read(self, subject_filter: str, filters: list[str], offset: int) -> None:
        self.both("load_last", subject_filter)
        self.both("last_matching_seq", subject_filter)
        self.both("load_next", filters, self.first_seq() + offset)
        self.both("load_next", subject_filter, self.first_seq() + offset)
        self.both("subject_counts", subject_filter)
        self.both("load", self.first_seq() + offset)

    # --- persistence (only where the kit can reopen) ---

    @precondition(lambda self: self.kit.can_reopen)
    @rule()
    def reopen(self) -> None:
        self.sut.sync()
        self.sut = self.kit.reopen(self.sut)

    @invariant()
    def agrees(self) -> None:
        if self.sut is None:
            return
        assert self.sut.state() == self.model.state()
        assert self.sut.digest_ranges() == self.model.digest_ranges()
        assert self.sut.subject_counts() == self.model.subject_counts()
        assert self.sut.faults() == []

    def teardown(self) -> None:
        if self.sut is not None:
            assert self.sut.scan() == []
            self.sut.close()


def run_machine(machine: type[StoreMachine], kit) -> None:
    """Run `machine` with the system under test supplied by `kit` (a `StoreKit` from conftest)."""
    bound = type(machine.__name__, (machine,), {"kit": kit})
    run_state_machine_as_test(bound, settings=SETTINGS)


def test_store_agrees_with_model(store_kit) -> None:
    run_machine(StoreMachine, store_kit)
