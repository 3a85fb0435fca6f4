"""The `StreamStore` protocol and the values it speaks in (layer L2).

Owns: what a message store must do, independent of where the bytes live. `MemStore` and `FileStore`
implement it and are tested by one parametrized suite (`tests/store/`).

Invariants (every implementation):
  1. Sequences are assigned by the caller and are contiguous: an append or skip must be exactly
     `last_seq + 1`, else `SequenceOutOfOrder` and nothing changes.
  2. `state().digest` is the sum mod 2^64 of `message_digest(seq, crc)` over the live messages, where
     `crc` is the CRC of the message's canonical `MSG` record (`codec.encode_message`). So two stores
     holding the same messages have the same digest, whatever their layout.
  3. `msgs` counts live messages; `num_deleted` counts sequences in `[first_seq, last_seq]` that hold no
     live message; `msgs + num_deleted == last_seq - first_seq + 1` when `msgs > 0`.
  4. A store never reads a clock: time-based expiry is `expire(cutoff_ns)` with the cut-off decided by
     the caller (the stream leader, through the log).
  5. Bad input (size, subject, sequence, config) raises before anything changes.
  6. A damaged or missing sequence is never served: `load` raises `DamagedSequence`, and `faults()`
     lists it until the caller replaces it (`repair`) or removes it.
  7. `changes` grows with every call that may remove, replace, restore or detach a message — every one but
     an append the limits removed nothing for, a skip, and reads that found nothing damaged. While it has
     not moved, the live messages up to the old `last_seq` are the ones there were: a count a reader
     kept of them (a consumer leader's `num_pending`) needs only the messages appended since.

Imports: L0, L1, attrs.
Reference: DESIGN.md §6; nats-server `server/store.go` (the StreamStore interface).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import attrs

from jsraft import limits
from jsraft.codec import structure
from jsraft.errors import InvalidConfig

# Per-range digests use fixed sequence ranges, not physical blocks, so that replicas whose files are
# laid out differently can still compare range by range and fetch only the ranges that differ.
DIGEST_RANGE_SEQS = 4096

UNLIMITED = -1
# Runs a job on another thread; returns a call that waits for it and raises what it raised (a FileStore's
# deferred block rolls, store/fs_append.py invariant 3).
Background = Callable[[Callable[[], None]], Callable[[], None]]


def msg_size(subject_len: int, headers_len: int, payload_len: int) -> int:
    """Bytes a message counts for, exactly as nats-server's file store counts them.

    (record length 4 + seq 8 + timestamp 8 + subject length 2 + subject + [headers length 4 + headers]
    + payload + hash 8). Clients and tests that assert a stream's `bytes` then agree with nats-server.
    """
    if headers_len == 0:
        return 30 + subject_len + payload_len
    return 34 + subject_len + headers_len + payload_len


class Discard(enum.StrEnum):
    old = "old"
    new = "new"


class Compression(enum.StrEnum):
    none = "none"
    zstd = "zstd"


@attrs.frozen(kw_only=True)
class StoreConfig:
    """The part of a stream's config the store enforces. Names follow the JetStream JSON API."""

    name: str = "store"
    max_msgs: int = UNLIMITED
    max_bytes: int = UNLIMITED
    max_msgs_per_subject: int = UNLIMITED
    max_msg_size: int = UNLIMITED
    discard: Discard = attrs.field(default=Discard.old, converter=Discard)
    discard_new_per_subject: bool = False
    compression: Compression = attrs.field(default=Compression.none, converter=Compression)
    block_size: int = limits.block_bytes_default

    def validate(self) -> "StoreConfig":
        for field in ("max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size"):
            value = getattr(self, field)
            if value < UNLIMITED or value == 0:
                raise InvalidConfig(f"{field} must be -1 (unlimited) or positive, not {value}")
        if not limits.block_bytes_min <= self.block_size <= limits.block_bytes_max:
            raise InvalidConfig(
                f"block_size must be between {limits.block_bytes_min} and {limits.block_bytes_max}"
            )
        if self.discard_new_per_subject and (
            self.discard is not Discard.new or self.max_msgs_per_subject == UNLIMITED
        ):
            raise InvalidConfig("discard_new_per_subject needs discard 'new' and max_msgs_per_subject")
        if self.max_msg_size != UNLIMITED and self.max_msg_size > limits.payload_bytes_max:
            raise InvalidConfig(f"max_msg_size above the server limit of {limits.payload_bytes_max}")
        return self

    @classmethod
    def from_dict(cls, data: dict) -> "StoreConfig":
        """Structure strictly from JSON-shaped data: unknown fields are an error naming them."""
        return structure(data, cls, where="store config").validate()


class StoredMsg(NamedTuple):
    """One stored message as a read returns it. Immutable; a named tuple rather than a frozen attrs class
    because every message read builds one — a consumer's delivery pass, one per message — and a frozen
    slotted class costs about twice as much to build (STYLE: keep those off the per-message path)."""

    subject: str
    seq: int
    headers: bytes
    payload: bytes
    timestamp_ns: int


@attrs.frozen(kw_only=True)
class StoreState:
    first_seq: int
    last_seq: int
    msgs: int
    bytes: int
    num_deleted: int
    num_subjects: int
    digest: int
    first_timestamp_ns: int = 0
    last_timestamp_ns: int = 0

    def agreement_key(self) -> tuple[int, int, int, int, int]:
        """What two replicas must share to agree (DESIGN §6)."""
        return (self.first_seq, self.last_seq, self.msgs, self.bytes, self.digest)


class FaultKind(enum.StrEnum):
    corrupt = "corrupt"  # a record exists for the sequence but does not verify
    missing = "missing"  # no record covers the sequence (lost block, lost head, hole)
    tombstone = "tombstone"  # a delete record was damaged: these sequences' delete state is unknown


@attrs.frozen(kw_only=True)
class Fault:
    first: int
    last: int
    kind: FaultKind


class StreamStore(Protocol):
    """A stream's messages. See the module docstring for the invariants every store keeps."""

    config: StoreConfig
    changes: int  # invariant 7

    def append(self, seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> None: ...

    def append_batch(self, msgs: Sequence[tuple[int, str, bytes, bytes, int]]) -> None:
        """Append `(seq, subject, headers, payload, timestamp_ns)` tuples; all or nothing on bad input."""
        ...

    def skip(self, seq: int, count: int = 1) -> None:
        """Consume sequences `seq .. seq+count-1` with no message."""
        ...

    def load(self, seq: int) -> StoredMsg: ...

    def held_run(self, first_seq: int, msgs: Sequence[Sequence], start: int = 0) -> int:
        """The index of the first of `msgs[start:]` (message `i` has seq `first_seq + i`; its first four
        items are subject, headers, payload, timestamp) that the store does not hold live, intact and
        exactly; `len(msgs)` if it holds them all. A replay's fast comparison: stopping says nothing (the
        caller `load`s that message and compares)."""
        ...

    def load_last(self, subject_filter: str = ">") -> StoredMsg: ...

    def last_matching_seq(self, subject_filter: str = ">") -> int:
        """`load_last`'s sequence (0 when nothing matches) without reading its record: the same answer for
        a record that would fail verification, whose sequence the store still knows."""
        ...

    def load_next(self, filters: str | Sequence[str] | None, start_seq: int) -> StoredMsg:
        """The first live message at or after `start_seq` matching any filter (None or ">" = all)."""
        ...

    def load_run(self, start_seq: int, count_max: int,
                 filters: str | Sequence[str] | None = None) -> list[StoredMsg]:
        """Up to `count_max` messages that successive `load_next(filters, ...)` calls from `start_seq`
        would return, each after the previous one; it may stop early (at a damaged, missing or moved
        record, or the end of a block: ask `load_next` then), so `[]` says nothing about what follows."""
        ...

    def run_pays(self, filters: str | Sequence[str], seq: int) -> bool:
        """Whether a filtered `load_run` from `seq` reads at most twice the messages it returns: at least half
        of the messages stored around `seq` match `filters` (a file store: of the block holding it, by its
        subject counts). A hint for a reader choosing between a run and `load_next` (a sparse filter reads
        less by `load_next`, which skips blocks by their subjects); what a run returns never depends on it."""
        ...

    def verify_run(self, start_seq: int, count_max: int) -> int:
        """The last sequence `load_run(start_seq, count_max)` would return, 0 when it would return none;
        a file store checks the records as `load_run` does without decoding them (a snapshot's read-back)."""
        ...

    def delete(self, seq: int) -> bool: ...

    def erase(self, seq: int) -> bool:
        """Delete and overwrite the message's bytes wherever they are stored."""
        ...

    def purge(self, subject: str | None = None, seq: int | None = None, keep: int | None = None) -> int:
        """JetStream purge: by subject filter, below `seq` (exclusive), keeping the newest `keep`."""
        ...

    def compact(self, seq: int) -> int:
        """Remove every message below `seq`; `first_seq` becomes `seq`."""
        ...

    def truncate(self, seq: int) -> None:
        """Remove every message above `seq`; `last_seq` becomes `seq`."""
        ...

    def expire(self, cutoff_ns: int) -> int:
        """Remove messages with a timestamp below `cutoff_ns`, from the head."""
        ...

    def subject_counts(self, subject_filter: str = ">") -> dict[str, int]: ...

    def state(self) -> StoreState: ...

    def digest_ranges(self) -> dict[int, int]:
        """Range number `(seq - 1) // DIGEST_RANGE_SEQS` -> digest of the live messages in it."""
        ...

    def faults(self) -> list[Fault]: ...

    def scan(self) -> list[Fault]:
        """Verify every stored record now; return (and remember) what is damaged or missing."""
        ...

    def repair(self, seq: int, subject: str, headers: bytes, payload: bytes, timestamp_ns: int) -> None:
        """Put back a damaged or missing message fetched from a peer; clears its fault.

        Only a sequence listed in `faults()` may be repaired: a store never overwrites a message it
        holds intact.
        """
        ...

    def repair_deleted(self, first: int, last: int) -> None:
        """A peer says `first..last` hold no live message: record them deleted and clear their faults."""
        ...

    def update_config(self, config: StoreConfig, *, enforce_limits: bool = True) -> None:
        """Adopt `config`. With `enforce_limits` its limits apply to the stored messages at once;
        without, the messages stay as they are and later appends enforce them: for a caller that knows
        the store holds a state reached under other limits (a stream replay against a store ahead of
        the log, a repair in progress)."""
        ...

    def sync(self) -> None: ...

    def close(self) -> None: ...
