"""NATS subjects: validation, wildcard matching, overlap, and a filter tree (layer L1).

Owns: the rules for what a subject is. A subject is dot-separated tokens; a token is non-empty and has
no whitespace. A *filter* may also use `*` (exactly one token) and `>` (one or more trailing tokens,
last token only). Published subjects must be literal.

Invariants:
  1. `matches(f, s)` is true exactly when the literal subject `s` is in the set filter `f` describes.
  2. `overlaps(a, b)` is true exactly when some literal subject matches both filters.
  3. `FilterSet.matches(s)` equals `any(matches(f, s) for f in filters)`.

Imports: L0 (`errors`, `limits`).
Reference: NATS subject-based messaging (docs.nats.io, "Subjects"), nats-server `sublist.go`.
"""

from __future__ import annotations

from collections.abc import Iterable

from jsraft import limits
from jsraft.errors import InvalidSubject

_WHITESPACE = frozenset(" \t\r\n\f\v")


def _check_token(token: str, subject: str, wildcards: bool) -> None:
    if not token:
        raise InvalidSubject(f"invalid subject {subject!r}: empty token")
    if not wildcards and token in ("*", ">"):
        raise InvalidSubject(f"invalid subject {subject!r}: wildcards are not allowed here")
    if len(token) > 1 and ("*" in token or ">" in token) and wildcards:
        # "foo*" is a literal token in NATS, not a wildcard; it is allowed but never matches as one.
        pass
    if _WHITESPACE.intersection(token):
        raise InvalidSubject(f"invalid subject {subject!r}: whitespace in token")


_valid_literals: dict[str, bool] = {}
_valid_literals_max = 8192


def validate_literal_cached(subject: str) -> str:
    """`validate(subject)` for published subjects, memoised: streams reuse a few subjects millions of times.

    Only valid subjects are cached, and the cache is bounded (cleared when full), so a client sending
    many distinct or invalid subjects costs memory proportional to the bound, not to its traffic.
    """
    if subject in _valid_literals:
        return subject
    validate(subject)
    if len(_valid_literals) >= _valid_literals_max:
        _valid_literals.clear()
    _valid_literals[subject] = True
    return subject


def validate_published(subject: str) -> str:
    """A subject a message is published and stored under: well-formed, wildcard tokens allowed and
    taken literally (nats-server stores a message published to `$KV.B.hello.*`, a KV purge of `hello.*`,
    under that subject). Literal subjects take the memoised path."""
    try:
        return validate_literal_cached(subject)
    except InvalidSubject:
        return validate(subject, wildcards=True)


def validate(subject: str, *, wildcards: bool = False) -> str:
    """Return `subject` if it is a valid literal subject (or filter, when `wildcards`), else raise."""
    if not isinstance(subject, str) or not subject:
        raise InvalidSubject("invalid subject: empty")
    if len(subject.encode()) > limits.subject_bytes_max:
        raise InvalidSubject(f"invalid subject: longer than {limits.subject_bytes_max} bytes")
    tokens = subject.split(".")
    for position, token in enumerate(tokens):
        _check_token(token, subject, wildcards)
        if token == ">" and position != len(tokens) - 1:
            raise InvalidSubject(f"invalid subject {subject!r}: '>' must be the last token")
    return subject


def is_valid(subject: str, *, wildcards: bool = False) -> bool:
    """Whether `validate` accepts `subject` (a literal subject, or a filter when `wildcards`)."""
    try:
        validate(subject, wildcards=wildcards)
    except InvalidSubject:
        return False
    return True


def is_literal(subject: str) -> bool:
    """True when `subject` contains no wildcard token."""
    return not any(token in ("*", ">") for token in subject.split("."))


def matches(filter_subject: str, subject: str) -> bool:
    """True when literal `subject` matches `filter_subject` (which may use `*` and `>`)."""
    if filter_subject == subject or filter_subject == ">":
        return True
    if "*" not in filter_subject and ">" not in filter_subject:
        return False
    f_tokens = filter_subject.split(".")
    s_tokens = subject.split(".")
    for position, f_token in enumerate(f_tokens):
        if f_token == ">":
            return len(s_tokens) > position
        if position >= len(s_tokens):
            return False
        if f_token != "*" and f_token != s_tokens[position]:
            return False
    return len(s_tokens) == len(f_tokens)


def overlaps(a: str, b: str) -> bool:
    """True when some literal subject matches both filters `a` and `b`."""
    a_tokens = a.split(".")
    b_tokens = b.split(".")
    for position in range(max(len(a_tokens), len(b_tokens))):
        a_token = a_tokens[position] if position < len(a_tokens) else None
        b_token = b_tokens[position] if position < len(b_tokens) else None
        if a_token == ">" or b_token == ">":
            # '>' needs at least one token at this position from the other side.
            return a_token is not None and b_token is not None
        if a_token is None or b_token is None:
            return False
        if a_token != b_token and a_token != "*" and b_token != "*":
            return False
    return True


def is_subset(inner: str, outer: str) -> bool:
    """True when every literal subject matching `inner` also matches `outer`."""
    i_tokens = inner.split(".")
    o_tokens = outer.split(".")
    for position, o_token in enumerate(o_tokens):
        if o_token == ">":
            return len(i_tokens) > position
        if position >= len(i_tokens):
            return False
        i_token = i_tokens[position]
        if i_token == ">":
            return False
        if o_token != "*" and (i_token == "*" or i_token != o_token):
            return False
    return len(i_tokens) == len(o_tokens)


class FilterSet:
    """Many filters matched against one subject at a time, in time proportional to its tokens.

    A trie keyed by token; `*` and `>` children are followed alongside the literal child. Used for a
    consumer's `filter_subjects` and the store's multi-filter loads. Results for literal subjects are
    memoised in a bounded cache because the same few subjects recur in most streams.
    """

    _cache_entries_max = 4096

    def __init__(self, filters: Iterable[str]) -> None:
        self.filters: tuple[str, ...] = tuple(dict.fromkeys(filters))
        self._root: dict = {}
        self._match_all = False
        for f in self.filters:
            validate(f, wildcards=True)
            if f == ">":
                self._match_all = True
            node = self._root
            for token in f.split("."):
                node = node.setdefault(token, {})
            node[None] = True  # end-of-filter marker
        self._cache: dict[str, bool] = {}

    def __bool__(self) -> bool:
        return bool(self.filters)

    def matches(self, subject: str) -> bool:
        if self._match_all:
            return True
        cached = self._cache.get(subject)
        if cached is not None:
            return cached
        result = self._walk(self._root, subject.split("."), 0)
        if len(self._cache) >= self._cache_entries_max:
            self._cache.clear()
        self._cache[subject] = result
        return result

    def _walk(self, node: dict, tokens: list[str], position: int) -> bool:
        if position == len(tokens):
            return None in node
        if ">" in node:
            return True
        token = tokens[position]
        child = node.get(token)
        if child is not None and self._walk(child, tokens, position + 1):
            return True
        star = node.get("*")
        return star is not None and self._walk(star, tokens, position + 1)
