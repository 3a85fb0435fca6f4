"""Tests for `jsraft.subjects`: validation, matching, overlap, subset and `FilterSet`.

Method: example tests pin the NATS rules one edge case at a time (empty tokens, whitespace, `>` only
last and needing at least one token, `*` exactly one token, the byte-length limit). Property tests then
check the three functions against their definitions by brute force: filters and subjects are drawn from
a tiny token alphabet, so every literal subject that could witness an overlap (or refute a subset) can
be enumerated. The universe holds subjects one token longer than the longest filter, which is enough
for a `>` to be exercised beyond every other filter's end. Hypothesis is derandomized and bounded, so
the file is deterministic and fast.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsraft import limits, subjects
from jsraft.errors import InvalidSubject
from jsraft.subjects import FilterSet, is_literal, is_subset, matches, overlaps, validate

_PROPERTY = settings(max_examples=300, derandomize=True, deadline=None, database=None)

# The literal tokens filters are built from; the brute-force universe adds one more token ("c") so a
# `*` can always be shown a token that differs from every literal in the filters.
_FILTER_TOKENS = ("a", "b")
_UNIVERSE_TOKENS = ("a", "b", "c")


# --- Validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("subject", ["a", "a.b", "ORDERS.new", "a.b.c.d.e", "foo*", "f>o", "$JS.API.INFO"])
def test_valid_literal_subjects_are_returned_unchanged(subject: str) -> None:
    assert validate(subject) == subject


@pytest.mark.parametrize("subject", ["", ".", "a.", ".a", "a..b", "..", "a.b."])
def test_empty_tokens_are_refused(subject: str) -> None:
    with pytest.raises(InvalidSubject):
        validate(subject)
    with pytest.raises(InvalidSubject):
        validate(subject, wildcards=True)


@pytest.mark.parametrize("subject", [" ", "a b", "a.b c", "a\tb", "a\nb", "a\rb", "a\fb", "a\vb", " a", "a "])
def test_whitespace_is_refused(subject: str) -> None:
    with pytest.raises(InvalidSubject, match="whitespace|empty"):
        validate(subject)
    with pytest.raises(InvalidSubject):
        validate(subject, wildcards=True)


@pytest.mark.parametrize("subject", [">.a", "a.>.b", ">.>", "a.>.>"])
def test_full_wildcard_must_be_the_last_token(subject: str) -> None:
    with pytest.raises(InvalidSubject, match="last token"):
        validate(subject, wildcards=True)


@pytest.mark.parametrize("subject", ["*", ">", "a.*", "a.>", "*.b", "a.*.c"])
def test_wildcards_are_refused_in_literal_subjects(subject: str) -> None:
    with pytest.raises(InvalidSubject, match="wildcards"):
        validate(subject)
    assert validate(subject, wildcards=True) == subject


def test_partial_wildcard_characters_are_literal_tokens() -> None:
    # In NATS `*` and `>` are wildcards only as whole tokens; "foo*" is an ordinary literal token.
    assert is_literal("foo*.b>")
    assert matches("foo*", "foo*")
    assert not matches("foo*", "foox")
    assert not matches("a.b>", "a.bc")


def test_length_limit_counts_bytes_not_characters() -> None:
    at_limit = "a" * limits.subject_bytes_max
    assert validate(at_limit) == at_limit
    with pytest.raises(InvalidSubject, match="longer"):
        validate(at_limit + "a")
    # "é" is two bytes in UTF-8: fewer characters than the limit, more bytes than it.
    wide = "é" * (limits.subject_bytes_max // 2 + 1)
    assert len(wide) < limits.subject_bytes_max
    with pytest.raises(InvalidSubject, match="longer"):
        validate(wide)


@pytest.mark.parametrize("value", [None, b"a.b", 7, ["a"]])
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(InvalidSubject):
        validate(value)  # type: ignore[arg-type]


def test_invalid_subject_has_its_error_code() -> None:
    with pytest.raises(InvalidSubject) as caught:
        validate("a..b")
    assert caught.value.err_code == 20001
    assert caught.value.http_code == 400


def test_is_literal() -> None:
    assert is_literal("a.b.c")
    assert not is_literal("a.*")
    assert not is_literal(">")
    assert not is_literal("*.b")


@pytest.mark.parametrize("wildcards", [False, True])
@pytest.mark.parametrize("subject", ["a.b", "a.*", "a.>", ">", "a..b", "a.>.b", "a b", "", "*.x", "x" * 300, 7])
def test_is_valid_says_whether_validate_accepts(subject: object, wildcards: bool) -> None:
    try:
        validate(subject, wildcards=wildcards)  # type: ignore[arg-type]
        accepted = True
    except InvalidSubject:
        accepted = False
    assert subjects.is_valid(subject, wildcards=wildcards) is accepted  # type: ignore[arg-type]


def test_validate_literal_cached_agrees_with_validate() -> None:
    for subject in ("orders.new", "orders.new", "a", "foo*"):
        assert subjects.validate_literal_cached(subject) == subject
    for bad in ("a..b", "a.*", ">", "a b", "", "a..b"):  # invalid subjects raise every time
        with pytest.raises(InvalidSubject):
            subjects.validate_literal_cached(bad)
    assert "a..b" not in subjects._valid_literals


def test_validate_literal_cache_is_bounded() -> None:
    for number in range(subjects._valid_literals_max + 100):
        subjects.validate_literal_cached(f"bound.{number}")
    assert len(subjects._valid_literals) <= subjects._valid_literals_max


# --- Matching -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filter_subject", "subject", "expected"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.bb", False),
        ("a.b", "a.b.c", False),
        ("a.b.c", "a.b", False),
        ("*", "a", True),
        ("*", "a.b", False),
        ("a.*", "a", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("*.b", "a.b", True),
        ("*.b", "a.c", False),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.b.d", False),
        ("*.*", "a.b", True),
        ("*.*", "a", False),
        (">", "a", True),
        (">", "a.b.c", True),
        ("a.>", "a", False),  # '>' needs at least one token
        ("a.>", "a.b", True),
        ("a.>", "a.b.c.d", True),
        ("a.>", "b.c", False),
        ("*.>", "a", False),
        ("*.>", "a.b", True),
        ("a.*.>", "a.b", False),
        ("a.*.>", "a.b.c", True),
    ],
)
def test_matches(filter_subject: str, subject: str, expected: bool) -> None:
    assert matches(filter_subject, subject) is expected
    assert FilterSet([filter_subject]).matches(subject) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("a", "a", True),
        ("a", "b", False),
        ("a.b", "a", False),
        ("*", "a", True),
        ("*", "a.b", False),
        (">", "a", True),
        (">", "a.b.c", True),
        (">", "*", True),
        ("a.>", "a", False),  # no subject is both "a" and at least two tokens
        ("a.>", "a.b", True),
        ("a.>", "a.*", True),
        ("a.>", "*.b.c", True),
        ("a.>", "b.>", False),
        ("a.*", "*.b", True),
        ("a.*", "b.*", False),
        ("a.*.c", "a.b.*", True),
        ("a.*.c", "a.b", False),
        ("*.>", "a", False),
        ("*.*", "a.>", True),
        ("*.*", ">", True),
    ],
)
def test_overlaps(a: str, b: str, expected: bool) -> None:
    assert overlaps(a, b) is expected
    assert overlaps(b, a) is expected


@pytest.mark.parametrize(
    ("inner", "outer", "expected"),
    [
        ("a", "a", True),
        ("a", ">", True),
        ("a", "*", True),
        ("*", "a", False),
        ("a.b", "a.>", True),
        ("a", "a.>", False),
        ("a.>", "a.>", True),
        ("a.>", "a.*", False),  # a.b.c is in the inner set only
        ("a.*", "a.>", True),
        ("a.*.c", "a.>", True),
        ("a.*.c", "*.*.*", True),
        ("*.*.*", "a.*.c", False),
        (">", "*.>", False),  # a single token subject is in the inner set only
        ("*.>", ">", True),
        ("a.>", "*.*.>", False),
        ("a.b.>", "*.*.>", True),
    ],
)
def test_is_subset(inner: str, outer: str, expected: bool) -> None:
    assert is_subset(inner, outer) is expected


def test_filter_set_basics() -> None:
    filters = FilterSet(["orders.*", "billing.>", "orders.*"])
    assert filters.filters == ("orders.*", "billing.>")  # duplicates dropped, order kept
    assert filters
    assert not FilterSet([])
    assert not FilterSet([]).matches("a")
    assert filters.matches("orders.new")
    assert not filters.matches("orders.new.eu")
    assert not filters.matches("billing")
    assert filters.matches("billing.x.y")
    # A second call is answered from the cache and must give the same answer.
    assert filters.matches("orders.new")
    assert not filters.matches("orders.new.eu")
    assert FilterSet(["a", ">"]).matches("anything.at.all")


def test_filter_set_validates_its_filters() -> None:
    with pytest.raises(InvalidSubject):
        FilterSet(["a..b"])
    with pytest.raises(InvalidSubject):
        FilterSet(["a.>.b"])


def test_filter_set_cache_is_bounded() -> None:
    filters = FilterSet(["a.*"])
    for number in range(FilterSet._cache_entries_max * 2 + 10):
        assert filters.matches(f"a.{number}")
        assert not filters.matches(f"b.{number}")
    assert len(filters._cache) <= FilterSet._cache_entries_max


# --- Properties by brute force over a tiny alphabet --------------------------------------------


@st.composite
def filter_strategy(draw: st.DrawFn) -> str:
    tokens = draw(st.lists(st.sampled_from([*_FILTER_TOKENS, "*"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        # Replace the last token with '>' (the only position it may take) half the time.
        tokens[-1] = ">"
    return ".".join(tokens)


literal_strategy = st.lists(st.sampled_from(_UNIVERSE_TOKENS), min_size=1, max_size=4).map(".".join)


def _universe(*filters: str) -> list[str]:
    """Every literal subject over the universe alphabet, up to one token past the longest filter."""
    longest = max(len(f.split(".")) for f in filters) + 1
    return [
        ".".join(tokens)
        for length in range(1, longest + 1)
        for tokens in itertools.product(_UNIVERSE_TOKENS, repeat=length)
    ]


def _matches_by_definition(filter_subject: str, subject: str) -> bool:
    """The definition of a match, written independently of the code under test."""
    f_tokens = filter_subject.split(".")
    s_tokens = subject.split(".")
    if f_tokens[-1] == ">":
        head = f_tokens[:-1]
        if len(s_tokens) <= len(head):
            return False
        s_tokens = s_tokens[: len(head)]
        f_tokens = head
    if len(f_tokens) != len(s_tokens):
        return False
    return all(f == "*" or f == s for f, s in zip(f_tokens, s_tokens))


@_PROPERTY
@given(filter_strategy(), literal_strategy)
def test_matches_agrees_with_the_definition(filter_subject: str, subject: str) -> None:
    assert matches(filter_subject, subject) == _matches_by_definition(filter_subject, subject)


@_PROPERTY
@given(st.lists(filter_strategy(), max_size=5), st.lists(literal_strategy, min_size=1, max_size=10))
def test_filter_set_equals_any_match(filters: list[str], subjects: list[str]) -> None:
    filter_set = FilterSet(filters)
    for subject in subjects + subjects:  # the second pass goes through the cache
        assert filter_set.matches(subject) == any(matches(f, subject) for f in filters), subject


@_PROPERTY
@given(filter_strategy(), filter_strategy())
def test_overlaps_iff_a_witness_subject_exists(a: str, b: str) -> None:
    witnesses = [s for s in _universe(a, b) if matches(a, s) and matches(b, s)]
    assert overlaps(a, b) == bool(witnesses), witnesses[:3]
    assert overlaps(a, b) == overlaps(b, a)


@_PROPERTY
@given(filter_strategy(), filter_strategy())
def test_is_subset_iff_no_counterexample_exists(inner: str, outer: str) -> None:
    counterexamples = [s for s in _universe(inner, outer) if matches(inner, s) and not matches(outer, s)]
    assert is_subset(inner, outer) == (not counterexamples), counterexamples[:3]


@_PROPERTY
@given(filter_strategy(), filter_strategy())
def test_subset_implies_overlap(inner: str, outer: str) -> None:
    # Every filter matches at least one subject, so a subset always shares that subject.
    if is_subset(inner, outer):
        assert overlaps(inner, outer)
