"""Checks run before anything is written, shared by every store (StreamStore invariant 5).

Owns: sequence order, message validity (subject, timestamp, sizes), the `discard: new` dry run, and
purge argument rules. All-or-nothing: a batch is checked in full, message by message, before any of it
is applied, so bad input never changes a store.

Check order per message: seq, subject, timestamp, size (max_msg_size counts headers + payload, as
nats-server does), then `discard: new` per-subject, max_msgs, max_bytes. The first failure refuses the
whole batch.

Imports: L0, L1 (`subjects`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from jsraft import limits, subjects
from jsraft.errors import (
    BadRequest,
    MaxBytesExceeded,
    MaxMsgsExceeded,
    MaxMsgsPerSubjectExceeded,
    MessageTooLarge,
    SequenceOutOfOrder,
)
from jsraft.store.base import UNLIMITED, Discard, StoreConfig, msg_size

_U64_MAX = (1 << 64) - 1
_UNSEEN = object()  # no subject equals it: the first message's subject is always validated


class _Counts(Protocol):
    config: StoreConfig
    last_seq: int
    msgs: int
    bytes: int

    def subject_count(self, subject: str) -> int: ...

    def subject_sizes(self, subject: str) -> Iterator[int]: ...


def check_append_seq(store: _Counts, seq: int) -> None:
    if seq != store.last_seq + 1:
        raise SequenceOutOfOrder(store.last_seq + 1, seq)


def check_message(config: StoreConfig, subject: str, headers: bytes, payload: bytes,
                  timestamp_ns: int) -> bytes:
    """Refuse a message the store may not hold (semantics 3); return the subject's UTF-8 bytes."""
    subjects.validate_published(subject)
    if not isinstance(timestamp_ns, int) or not 0 <= timestamp_ns <= _U64_MAX:
        raise BadRequest(f"timestamp_ns must be an unsigned 64-bit integer, not {timestamp_ns!r}")
    if len(headers) > limits.headers_bytes_max or len(payload) > limits.payload_bytes_max:
        raise MessageTooLarge("message headers or payload above the server limit")
    size = len(headers) + len(payload)
    if config.max_msg_size != UNLIMITED and size > config.max_msg_size:
        raise MessageTooLarge(f"message size {size} exceeds max_msg_size {config.max_msg_size}")
    return subject.encode()


class DiscardNewCheck:
    """Dry run of `discard: new` for messages about to be appended in order; `add` raises on refusal.
    A message to a subject at its limit evicts the subject's oldest (stored ones, sized oldest first
    by `subject_sizes`, then this batch's own), so it adds only its size difference."""

    def __init__(self, config: StoreConfig, msgs: int, total_bytes: int, subject_count: Callable[[str], int],
                 subject_sizes: Callable[[str], Iterator[int]]) -> None:
        self._config, self._msgs, self._bytes = config, msgs, total_bytes
        self._subject_count, self._subject_sizes = subject_count, subject_sizes
        # Per subject: count so far (int), sizes its evictions take (iterator), this batch's (list).
        self._counts, self._evictions, self._pending = {}, {}, {}

    def add(self, subject: str, size: int) -> None:
        config, per_max = self._config, self._config.max_msgs_per_subject
        if config.discard != Discard.new:
            return
        count = self._counts.get(subject) or self._subject_count(subject)
        pending = self._pending.setdefault(subject, [])
        at_limit = per_max != UNLIMITED and count >= per_max
        if at_limit and config.discard_new_per_subject:
            raise MaxMsgsPerSubjectExceeded(f"subject {subject!r} is at max_msgs_per_subject {per_max}")
        evicted = 0
        if at_limit and config.max_bytes != UNLIMITED:  # only max_bytes needs the evicted size: a read
            if subject not in self._evictions:
                # A chained list iterator also sees the sizes appended to `pending` later.
                self._evictions[subject] = itertools.chain(self._subject_sizes(subject), pending)
            evicted = next(self._evictions[subject])
        new_msgs = self._msgs + (0 if at_limit else 1)
        new_bytes = self._bytes + size - evicted
        if config.max_msgs != UNLIMITED and new_msgs > config.max_msgs:
            raise MaxMsgsExceeded(f"stream is at max_msgs {config.max_msgs}")
        if config.max_bytes != UNLIMITED and new_bytes > config.max_bytes:
            raise MaxBytesExceeded(f"message would take the stream above max_bytes {config.max_bytes}")
        self._msgs, self._bytes, self._counts[subject] = new_msgs, new_bytes, count + (not at_limit)
        pending.append(size)


def check_purge_args(subject: str | None, seq: int | None,
                     keep: int | None) -> tuple[str | None, int | None, int | None]:
    """Normalize a purge request: `(filter or None for every subject, seq or None, keep or None)`."""
    if subject is not None and subjects.validate(subject, wildcards=True) == ">":
        subject = None
    for name, value in (("seq", seq), ("keep", keep)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise BadRequest(f"purge {name} must be a non-negative integer, not {value!r}")
    if seq and keep:
        raise BadRequest("purge: seq and keep cannot both be given")
    return subject, seq or None, keep or None


def check_batch(store: _Counts, msgs: Sequence[tuple[int, str, bytes, bytes, int]]) -> None:
    """Raise on the first problem in `msgs`; the store is untouched either way."""
    config = store.config
    dry_run = None
    if config.discard == Discard.new:
        dry_run = DiscardNewCheck(config, store.msgs, store.bytes, store.subject_count, store.subject_sizes)
    expected = store.last_seq + 1
    if dry_run is None:
        _check_plain(config, expected, msgs)
        return
    for seq, subject, headers, payload, timestamp_ns in msgs:
        if seq != expected:
            raise SequenceOutOfOrder(expected, seq)
        expected += 1
        subject_bytes = check_message(config, subject, headers, payload, timestamp_ns)
        dry_run.add(subject, msg_size(len(subject_bytes), len(headers), len(payload)))


def _check_plain(config: StoreConfig, expected: int, msgs: Sequence[tuple[int, str, bytes, bytes, int]]) -> None:
    """`check_message` for every message of a batch with no dry run, in the same order, with the checks
    inlined (every replica's apply runs this per message): a subject is validated once per batch."""
    subject_seen: object = _UNSEEN
    size_max = None if config.max_msg_size == UNLIMITED else config.max_msg_size
    headers_max, payload_max = limits.headers_bytes_max, limits.payload_bytes_max
    for seq, subject, headers, payload, timestamp_ns in msgs:
        if seq != expected:
            raise SequenceOutOfOrder(expected, seq)
        expected += 1
        if subject != subject_seen:
            subjects.validate_published(subject)
            subject_seen = subject
        if not isinstance(timestamp_ns, int) or not 0 <= timestamp_ns <= _U64_MAX \
                or len(headers) > headers_max or len(payload) > payload_max \
                or size_max is not None and len(headers) + len(payload) > size_max:
            check_message(config, subject, headers, payload, timestamp_ns)  # raises the precise error
