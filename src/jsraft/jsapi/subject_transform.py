"""`Transform`: nats-server's subject transforms (`src` -> `dest`), compiled once and applied to subjects.

Owns: compiling a transform the way nats-server's `NewSubjectTransform` does — both subjects valid, `>`
in both or neither, no `*` in the destination, each destination token a literal, `$n`, or one of the
mapping functions `{{wildcard(n)}}`, `{{partition(count, n...)}}`, `{{splitFromLeft(n, pos)}}`,
`{{splitFromRight(n, pos)}}`, `{{sliceFromLeft(n, size)}}`, `{{sliceFromRight(n, size)}}`,
`{{split(n, delimiter)}}`, `{{left(n, len)}}`, `{{right(n, len)}}`, `{{random(count)}}` — with its error
words (`TransformError`, whose text is nats-server's `mappingDestinationErr`), `validate_mapping` (its
`ValidateMapping`: the stricter check of a stream's own `subject_transform`; nats-server 2.15.1 knows `left` and `right` there too), and applying a compiled
transform to a literal subject (`match`: None when the subject is not one of the source's).

Invariants:
  1. `compile_transform(src, dest)` either returns a `Transform` whose `apply` cannot fail on a subject
     `match` accepts, or raises `TransformError`; compiled transforms are kept (`COMPILED_MAX`), a pure
     function of `(src, dest)`.
  2. `match` returns a subject only for a valid literal subject matching `src` (`>` when empty); the
     result may still be unfit to publish to (nats-server then suppresses a republish): callers check.
  3. `{{random(n)}}` draws from the `rng` given to `match` (an injected `random.Random`), else this
     module's own instance, never from the global random functions.

Imports: L0 (`errors`), L1 (`subjects`), stdlib. Reference: nats-server `server/subject_transform.go`
(`NewSubjectTransformWithStrict`, `indexPlaceHolders`, `TransformTokenizedSubject`), `server/sublist.go`
(`ValidateMapping`), docs.nats.io "Subject Mapping and Partitioning".
"""

from __future__ import annotations

import enum
import functools
import random
import re
from typing import NamedTuple

from jsraft import subjects as subjectlib
from jsraft.errors import InvalidSubject

COMPILED_MAX = 256
_INT32_MAX, _INT64 = 2**31 - 1, 2**63
_ARG_SEPARATOR = re.compile(r",\s*")
_ATOI = re.compile(r"[+-]?[0-9]+")
_MAPPING_WHITESPACE = frozenset("\t\n\f\r ")
_RNG = random.Random()  # invariant 3: `{{random(n)}}` without an injected generator


def _function(name: str) -> re.Pattern[str]:
    """nats-server's mapping function pattern: `{{ name(args) }}`, the name's first letter and each
    capital in either case, searched (not anchored) in the token."""
    letters = "".join(f"[{c.lower()}{c.upper()}]" if i == 0 or c.isupper() else c for i, c in enumerate(name))
    return re.compile(r"{{\s*" + letters + r"\s*\((.*)\)\s*}}")


class Kind(enum.Enum):
    literal = "literal"
    partition = "partition"
    wildcard = "wildcard"
    split_from_left = "splitFromLeft"
    split_from_right = "splitFromRight"
    slice_from_left = "sliceFromLeft"
    slice_from_right = "sliceFromRight"
    split = "split"
    left = "left"
    right = "right"
    random = "random"


_PATTERNS = {kind: _function(kind.value) for kind in Kind if kind is not Kind.literal}
# The order nats-server tries them in (`indexPlaceHolders`).
_ORDER = (Kind.wildcard, Kind.partition, Kind.split_from_left, Kind.split_from_right, Kind.slice_from_left,
          Kind.slice_from_right, Kind.right, Kind.left, Kind.split, Kind.random)
_INDEX_INT = (Kind.split_from_left, Kind.split_from_right, Kind.slice_from_left, Kind.slice_from_right,
              Kind.right, Kind.left)

INVALID = "invalid mapping destination"
NOT_ENOUGH_ARGS = f"{INVALID}: not enough arguments passed to the function"
TOO_MANY_ARGS = f"{INVALID}: too many arguments passed to the function"
INVALID_ARG = f"{INVALID}: function argument is invalid or in the wrong format"
INDEX_OUT_OF_RANGE = f"{INVALID}: wildcard index out of range"
UNKNOWN_FUNCTION = f"{INVALID}: unknown function"
INVALID_TRANSFORM = f"{INVALID}: invalid transform"
BAD_SUBJECT = "invalid subject"


class TransformError(ValueError):
    """A transform that cannot be built; `str()` is nats-server's error text."""

    def __init__(self, reason: str, token: str = "") -> None:
        super().__init__(f"{reason} in {token}" if token else reason)


class Step(NamedTuple):
    kind: Kind
    token: str  # the destination token as written (a literal is written as is)
    indexes: tuple[int, ...] = ()  # source token positions the function reads
    number: int = -1  # partitions, position, size or length
    text: str = ""  # split's delimiter


def _atoi(text: str, token: str, *, bits: int = 64) -> int:
    """Go's `strconv.Atoi` / `ParseInt(s, 10, bits)` on a space-trimmed argument."""
    text = text.strip(" ")
    if not _ATOI.fullmatch(text) or not -(2 ** (bits - 1)) <= int(text) < 2 ** (bits - 1):
        raise TransformError(INVALID_ARG, token)
    return int(text)


def _args(kind: Kind, token: str) -> list[str] | None:
    found = _PATTERNS[kind].search(token)
    return _ARG_SEPARATOR.split(found.group(1)) if found else None


def _count(text: str, token: str) -> int:
    number = _atoi(text, token)
    if number > _INT32_MAX:
        raise TransformError(INVALID_ARG, token)
    return (number + 2**31) % 2**32 - 2**31  # Go's int32() of it


def parse_token(token: str) -> Step:
    """One destination token (nats-server's `indexPlaceHolders`); raises `TransformError`."""
    if len(token) > 1 and token[0] == "$":
        if _ATOI.fullmatch(token[1:]) and -_INT64 <= int(token[1:]) < _INT64:
            return Step(Kind.wildcard, token, (int(token[1:]),))
        return Step(Kind.literal, token)  # other things rely on tokens starting with $
    if not (len(token) > 4 and token.startswith("{{") and token.endswith("}}")):
        return Step(Kind.literal, token)
    for kind in _ORDER:
        args = _args(kind, token)
        if args is None:
            continue
        if kind is Kind.wildcard:
            if args == [""]:
                raise TransformError(NOT_ENOUGH_ARGS, token)
            if len(args) > 1:
                raise TransformError(TOO_MANY_ARGS, token)
            return Step(kind, token, (_atoi(args[0], token),))
        if kind is Kind.partition:
            return Step(kind, token, tuple(_atoi(a, token) for a in args[1:]), _count(args[0], token))
        if kind in _INDEX_INT:
            if len(args) != 2:
                raise TransformError(NOT_ENOUGH_ARGS if len(args) < 2 else TOO_MANY_ARGS, token)
            return Step(kind, token, (_atoi(args[0], token),), _atoi(args[1], token, bits=32))
        if kind is Kind.split:
            if len(args) != 2:
                raise TransformError(NOT_ENOUGH_ARGS if len(args) < 2 else TOO_MANY_ARGS, token)
            index = _atoi(args[0], token)
            if " " in args[1] or "." in args[1]:
                raise TransformError(INVALID_ARG, token)
            return Step(kind, token, (index,), -1, args[1])
        if len(args) != 1:  # random
            raise TransformError(NOT_ENOUGH_ARGS, token)
        return Step(kind, token, (), _count(args[0], token))
    raise TransformError(UNKNOWN_FUNCTION, token)


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """(valid, tokens, number of `*`, has `>`) as nats-server's `subjectInfo` sees a subject."""
    tokens = subject.split(".")
    wildcards, full = 0, False
    for token in tokens:
        if not token or full:
            return False, [], 0, False
        full, wildcards = full or token == ">", wildcards + (token == "*")
    return bool(subject), tokens, wildcards, full


class Transform:
    """A compiled `src` -> `dest` transform (invariant 1). Build with `compile_transform`."""

    __slots__ = ("src", "dest", "steps", "source_tokens", "_identity")

    def __init__(self, src: str, dest: str, steps: tuple[Step, ...], source_tokens: list[str]) -> None:
        self.src, self.dest, self.steps, self.source_tokens = src, dest, steps, source_tokens
        self._identity = src in ("", ">") and dest in ("", ">")

    def match(self, subject: str, rng: random.Random | None = None) -> str | None:
        """`subject` transformed, or None when it is not a valid literal subject matching `src`
        (nats-server's `Match`, invariant 2)."""
        if self._identity:
            return subject
        tokens = subject.split(".")
        if not all(token and token not in ("*", ">") for token in tokens):
            return None
        if self.src != ">" and not subjectlib.matches(self.src, subject):
            return None
        return self.apply(tokens, rng or _RNG)

    def apply(self, tokens: list[str], rng: random.Random) -> str:
        """nats-server's `TransformTokenizedSubject` on a matching subject's tokens."""
        out: list[str] = []
        last = len(self.steps) - 1
        for position, step in enumerate(self.steps):
            if step.kind is Kind.literal:
                if step.token == ">":
                    break
                out.append(step.token)
            else:
                out.append(_apply_function(step, tokens, rng))
            if position < last:
                out.append(".")
        if self.steps[-1].token == ">":
            out.append(".".join(tokens[len(self.source_tokens) - 1:]))
        return "".join(out)


def _apply_function(step: Step, tokens: list[str], rng: random.Random) -> str:
    kind, number = step.kind, step.number
    if kind is Kind.partition:
        key = "".join(tokens[i] for i in step.indexes) if step.indexes else ".".join(tokens)
        return str(_fnv1a_32(key.encode()) % (number % 2**32)) if number else "0"
    if kind is Kind.random:
        return str(rng.randrange(2**31) % number) if number else "0"
    if kind is Kind.wildcard:
        index = step.indexes[0]
        return tokens[index] if index < len(tokens) else ""
    source = tokens[step.indexes[0]]
    size = len(source)
    if kind is Kind.split:
        parts = source.split(step.text) if step.text else list(source)
        out = []
        for j, part in enumerate(parts):
            out.append(part)
            if j < len(parts) - 1 and parts[j + 1] and not (j == 0 and not part):
                out.append(".")
        return "".join(out)
    if not 0 < number < size:  # too small to split or slice at the requested place: left whole
        return source
    if kind is Kind.split_from_left:
        return f"{source[:number]}.{source[number:]}"
    if kind is Kind.split_from_right:
        return f"{source[:size - number]}.{source[size - number:]}"
    if kind is Kind.left:
        return source[:number]
    if kind is Kind.right:
        return source[size - number:]
    if kind is Kind.slice_from_left:
        pieces = [source[i:i + number] for i in range(0, size, number)]
        return ".".join(pieces)
    remainder = size % number  # slice_from_right
    pieces = ([source[:remainder]] if remainder else []) + [source[i:i + number] for i in range(remainder, size, number)]
    return ".".join(pieces)


def _fnv1a_32(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


@functools.lru_cache(maxsize=COMPILED_MAX)
def compile_transform(src: str, dest: str) -> Transform | None:
    """nats-server's `NewSubjectTransform(src, dest)`: None for an empty `dest` (no transform); an empty
    `src` is `>`. Raises `TransformError` (invariant 1)."""
    if not dest:
        return None
    src = src or ">"
    source_ok, source_tokens, wildcards, source_full = _subject_info(src)
    dest_ok, dest_tokens, dest_wildcards, dest_full = _subject_info(dest)
    if not source_ok or not dest_ok or dest_wildcards or source_full != dest_full:
        raise TransformError(BAD_SUBJECT)
    positions = [i for i, token in enumerate(source_tokens) if token == "*"]  # the n-th `*` is positions[n-1]
    steps = []
    for token in dest_tokens:
        step = parse_token(token)
        if step.kind in (Kind.literal, Kind.random) or (step.kind is Kind.partition and not wildcards and not source_full):
            steps.append(step._replace(indexes=()) if step.kind is Kind.partition else step)
            continue
        if not wildcards and not source_full:
            raise TransformError(INDEX_OUT_OF_RANGE, token)
        for index in step.indexes:
            if index > wildcards:
                raise TransformError(INDEX_OUT_OF_RANGE, f"{token}: [{index}]")
        # nats-server looks the index up in a map of the wildcards' positions: 0 or less finds token 0.
        steps.append(step._replace(indexes=tuple(positions[i - 1] if i >= 1 else 0 for i in step.indexes)))
    return Transform(src, dest, tuple(steps), source_tokens)


def validate_mapping(src: str, dest: str) -> None:
    """nats-server's `ValidateMapping`, used for a stream's `subject_transform`; raises `TransformError`."""
    if not dest:
        return
    full = False
    for token in dest.split("."):
        if not token or full:
            raise TransformError(INVALID_TRANSFORM, token)
        if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
            if not any(_PATTERNS[kind].search(token) for kind in _ORDER):
                raise TransformError(UNKNOWN_FUNCTION, token)
            continue
        if token == ">":
            full = True
        elif _MAPPING_WHITESPACE.intersection(token):
            raise TransformError(INVALID_TRANSFORM)
    compile_transform(src, dest)


def publishable(subject: str) -> bool:
    """Whether `subject` may be published to (nats-server's `IsValidPublishSubject`)."""
    try:
        subjectlib.validate(subject)
    except InvalidSubject:
        return False
    return True


def stored_subject(src: str | None, dest: str, subject: str) -> str:
    """The subject a stream with `subject_transform: {src, dest}` stores a message published to
    `subject` under: transformed when it matches `src`, else unchanged (nats-server: "no filtering")."""
    transform = compile_transform(src or "", dest)
    result = transform.match(subject) if transform is not None else None
    return result if result is not None and publishable(result) else subject
