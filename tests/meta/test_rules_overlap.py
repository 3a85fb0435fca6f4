"""`jsraft.meta.rules.find_overlap`: the first-token shortcut answers what the full comparison answers.

Method: Hypothesis draws subjects (literal tokens from a small alphabet, `*` and `>` tokens, so that
overlaps are common) for a new stream and for up to a dozen existing streams, and compares
`find_overlap` with the plain nested comparison of every pair through `subjects.overlaps`, in the same
order (rules invariant 3), with and without a stream excluded.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from jsraft import subjects as subjectlib
from jsraft.meta.rules import find_overlap

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
