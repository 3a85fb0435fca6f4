"""`MetaStateMachine.stream_changes` (meta.state invariant 6): a reader that follows the stream journal
sees every stream the state has, as the state has it, without looking at the unchanged ones.

Method: Hypothesis draws a history of creates, replacements and deletes of a few streams, with reads
interleaved and, now and then, the state replaced as a snapshot restore replaces it. The reader keeps a
copy (name -> subjects) updated only for the names it is given (every name the state has, and every name
it holds, when given None); after each read the copy must equal the state's streams. The journal is kept
short (`JOURNAL_KEPT` 3), so a reader that fell behind is told to look at everything, and the test
checks it was told so only when its position was dropped or the state was replaced.
"""

from __future__ import annotations

from types import SimpleNamespace

import hypothesis.strategies as st
from hypothesis import given, settings
import pytest

from jsraft.meta import state as state_module
from jsraft.meta.machine import MetaStateMachine
from jsraft.meta.state import MetaState

_STEP = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 5), st.integers(0, 3)),  # assign S<n> with subjects version v
    st.tuples(st.just("del"), st.integers(0, 5), st.just(0)),
    st.tuples(st.just("read"), st.just(0), st.just(0)),
    st.tuples(st.just("restore"), st.just(0), st.just(0)),
)


class _Reader:
    def __init__(self, machine: MetaStateMachine) -> None:
        self.machine, self.cursor, self.copy = machine, None, {}
        self.full_reads = 0

    def read(self) -> None:
        names, self.cursor = self.machine.stream_changes(self.cursor)
        if names is None:
            self.full_reads += 1
            names = set(self.machine.names()) | self.copy.keys()
        for name in names:
            if self.machine.has_stream(name):
                self.copy[name] = self.machine.stream(name).subjects
            else:
                self.copy.pop(name, None)


@settings(max_examples=300, deadline=None)
@given(history=st.lists(_STEP, max_size=40))
def test_a_reader_of_the_journal_keeps_an_exact_copy(history):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(state_module, "JOURNAL_KEPT", 3)
        _follow(history)


def _follow(history) -> None:
    machine = MetaStateMachine()
    reader = _Reader(machine)
    expected_full = 1  # the first read looks at everything
    reader.read()
    for op, number, version in history:
        streams = machine._state.streams
        name = f"S{number}"
        if op == "set":
            streams[name] = SimpleNamespace(name=name, subjects=(f"s{number}.v{version}",))
        elif op == "del" and name in streams:
            del streams[name]
        elif op == "restore":  # as `restore` does: a new state, built apart, then put in place
            state = MetaState()
            for kept in sorted(streams):
                state.streams[kept] = streams[kept]
            machine._state = state
        elif op == "read":
            table, position = reader.cursor
            if table is not machine._state.streams or position < machine._state.streams.journal_start:
                expected_full += 1
            reader.read()
            assert reader.copy == {n: a.subjects for n, a in machine._state.streams.items()}
            assert reader.full_reads == expected_full


def test_a_reader_is_given_only_the_streams_changed_since_its_last_read():
    machine = MetaStateMachine()
    streams = machine._state.streams
    for number in range(10):
        streams[f"S{number}"] = SimpleNamespace(subjects=(f"s{number}",))
    names, cursor = machine.stream_changes(None)
    assert names is None  # the first time: everything
    streams["S3"] = SimpleNamespace(subjects=("other",))
    del streams["S7"]
    names, cursor = machine.stream_changes(cursor)
    assert names == {"S3", "S7"}
    names, cursor = machine.stream_changes(cursor)
    assert names == set()


def test_a_reader_further_behind_than_the_journal_keeps_looks_at_everything():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(state_module, "JOURNAL_KEPT", 3)
        # ten changes between two reads: the journal dropped the reader's position
        _follow([("set", i % 5, i) for i in range(10)] + [("read", 0, 0)] + [("del", 1, 0), ("read", 0, 0)])
