"""`jsraft.meta.rules.find_overlap`: the first-token shortcut answers what the full comparison answers.

Method: Hypothesis draws subjects (literal tokens from a small alphabet, `*` and `>` tokens, so that
overlaps are common) for a new stream and for up to a dozen existing streams, and compares
`find_overlap` with the plain nested comparison of every pair through `subjects.overlaps`, in the same
order (rules invariant 3), with and without a stream excluded. Then the same for the claims a
`MetaState` offers the check (`claims_meeting`, state invariant 5): after a random history of creates,
replacements and deletes of its streams, its first-token index equals one rebuilt from scratch, and
`find_overlap` over `claims_meeting` answers what it answers over every stream's claims.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from types import SimpleNamespace

import pytest

from jsraft import subjects as subjectlib
from jsraft.meta.rules import find_overlap
from jsraft.meta.state import MetaState

_TOKEN = st.sampled_from(["a", "b", "c", "*"])
_SUBJECT = st.builds(
    lambda tokens, tail: ".".join(tokens + ([">"] if tail else [])),
    st.lists(_TOKEN, min_size=1, max_size=3), st.booleans(),
) | st.just(">")
_SUBJECTS = st.lists(_SUBJECT, min_size=1, max_size=3).map(tuple)


def _plain(subjects, others, exclude):
    for name, theirs in others:
        if name == exclude:
            continue
        for subject in subjects:
            for other in theirs:
                if subjectlib.overlaps(subject, other):
                    return name, other, subject
    return None


@settings(max_examples=400, deadline=None)
@given(mine=_SUBJECTS, theirs=st.lists(_SUBJECTS, max_size=12), exclude=st.integers(-1, 11))
def test_find_overlap_matches_the_plain_comparison(mine, theirs, exclude):
    others = [(f"S{i}", subjects) for i, subjects in enumerate(theirs)]
    excluded = f"S{exclude}" if exclude >= 0 else None
    assert find_overlap(mine, others, exclude=excluded) == _plain(mine, others, excluded)


def test_streams_whose_first_tokens_differ_do_not_overlap_and_wildcards_still_do():
    others = [("ORDERS", ("orders.>",)), ("ALL", ("*.eu",))]
    assert find_overlap(("kv.a",), others) is None
    assert find_overlap(("kv.eu",), others) == ("ALL", "*.eu", "kv.eu")
    assert find_overlap((">",), others) == ("ORDERS", "orders.>", ">")
    assert find_overlap(("orders.x",), others, exclude="ORDERS") is None


_HISTORY = st.lists(st.tuples(st.integers(0, 7), st.one_of(st.none(), _SUBJECTS)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(history=_HISTORY, mine=_SUBJECTS, exclude=st.integers(-1, 7))
def test_the_claims_meeting_a_create_find_what_every_claim_finds(history, mine, exclude):
    state = MetaState()
    for number, subjects in history:  # None deletes the stream (if it exists), else creates or replaces it
        name = f"S{number}"
        if subjects is None:
            if name in state.streams:
                del state.streams[name]
        else:
            state.streams[name] = SimpleNamespace(subjects=subjects)
    rebuilt: dict[str, set[str]] = {}
    for name, assignment in state.streams.items():
        for subject in assignment.subjects:
            rebuilt.setdefault(subject.partition(".")[0], set()).add(name)
    assert state.streams.by_head == rebuilt
    excluded = f"S{exclude}" if exclude >= 0 else None
    assert (find_overlap(mine, state.claims_meeting(mine), exclude=excluded)
            == find_overlap(mine, state.subject_claims(), exclude=excluded))


def test_a_stream_table_refuses_the_changes_its_index_would_miss():
    state = MetaState()
    state.streams["A"] = SimpleNamespace(subjects=("a.>",))
    for change in (lambda t: t.pop("A"), lambda t: t.clear(), lambda t: t.update(B=None),
                   lambda t: t.setdefault("B", None), lambda t: t.popitem()):
        with pytest.raises(TypeError):
            change(state.streams)
    assert list(state.claims_meeting(("b.x",))) == [] and list(state.claims_meeting(("a.x",))) == [("A", ("a.>",))]
