"""Interest and work-queue retention: which stream messages no consumer needs any more (layer L3).

Owns: the removal decision, as a pure function of the replicated consumer states and the store's
contents. The caller (the stream group's runtime) deletes the returned sequences from the store at the
same log index on every replica, so every replica removes the same messages.

Rules (nats-server `stream.go` checkForInterest / `consumer.go` needAck):
  - limits: acks never remove anything.
  - interest: a message is removable once no consumer whose filter matches its subject still needs it
    (`seq` above that consumer's delivered cursor, or still pending). A message published when no
    consumer needs it is not kept (`removable_on_publish`). Deleting a consumer may make any message
    removable.
  - workqueue: a message is removed once acked by the (single) consumer that matches it; a message no
    consumer matches is kept until one is created; deleting a consumer removes nothing.
  An offline consumer (config this build cannot read) needs everything: we cannot tell what it needs,
  and removing a message is the one mistake retention cannot undo.

Invariants:
  1. `removable` returns sorted, distinct seqs of live messages within the candidate ranges.
  2. The result depends only on its arguments (no clock, no randomness, no iteration-order effects).

Imports: L0, L1 (`jsapi`, `subjects`), L2 (`store`). Reference: nats-server `server/stream.go`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.jsapi.stream_config import Retention
from jsraft.store.base import StreamStore

Range = tuple[int, int]


class Interested(Protocol):
    """What retention needs of one consumer (`machine.ConsumerEntry` provides it)."""

    def matches(self, subject: str) -> bool: ...

    def needs(self, seq: int, subject: str) -> bool: ...


def _merged(ranges: Iterable[Range]) -> list[Range]:
    merged: list[Range] = []
    for low, high in sorted(r for r in ranges if r[0] <= r[1]):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def removable(retention: Retention, store: StreamStore, consumers: Sequence[Interested],
              candidates: Iterable[Range]) -> list[int]:
    """Seqs in `candidates` that may now be removed under `retention` (see the module rules)."""
    if retention is Retention.limits:
        return []
    found: list[int] = []
    for low, high in _merged(candidates):
        seq = max(low, 1)
        while seq <= high:
            try:
                msg = store.load_next(None, seq)
            except NoMessageFound:
                break
            except DamagedSequence as error:
                # Its subject cannot be read: keep it. The store lists the fault now, so this replica no
                # longer vouches for its store, and the repair that follows brings the group's removals.
                seq = error.seq + 1
                continue
            if msg.seq > high:
                break
            if _unneeded(retention, consumers, msg.seq, msg.subject):
                found.append(msg.seq)
            seq = msg.seq + 1
    return found


def _unneeded(retention: Retention, consumers: Sequence[Interested], seq: int, subject: str) -> bool:
    if retention is Retention.workqueue and not any(consumer.matches(subject) for consumer in consumers):
        return False  # a work queue keeps a message until a consumer takes it
    return not any(consumer.needs(seq, subject) for consumer in consumers)


def removable_on_publish(retention: Retention, consumers: Sequence[Interested],
                         msgs: Iterable[tuple[int, str]]) -> list[int]:
    """Of the just-stored `(seq, subject)` messages, those an interest stream does not keep."""
    if retention is not Retention.interest:
        return []
    return [seq for seq, subject in msgs if not any(c.needs(seq, subject) for c in consumers)]
