"""Values the Raft core shares with its storage (`wal`) and its driver (`runtime`).

These are the durable vocabulary of a Raft group: an entry, the hard state, a snapshot's metadata and
the membership. They live in `raft` (L1) so that `wal` (L2) can persist them without importing the core.

Invariants:
  1. `Entry.index >= 1` and `Entry.term >= 1`; entries in a log have strictly increasing indexes and
     non-decreasing terms.
  2. `HardState.acked_watermark` never decreases across persists: it is the highest log index this
     replica has told anyone it holds durably. Two exceptions, both decided by the Raft core and
     persisted in the same `Ready` as the change they describe: on a replica that is not repairing, a
     conflict truncation or snapshot install lowers it to the new last index (the entries above were
     acknowledged to a leader of an older term and never committed, so nobody counts them any more);
     and the operator command
     `RaftNode.accept_data_loss()` lowers it explicitly.
  3. Node ids are non-empty strings (`"n1"`), stable for the life of a data directory.

Imports: L0, attrs. Reference: Raft paper §5 (Ongaro & Ousterhout, 2014), etcd-io/raft `raftpb`.
"""

from __future__ import annotations

import enum

import attrs


class EntryType(enum.IntEnum):
    NORMAL = 0  # application data (a batch of stream/meta operations)
    NOOP = 1  # appended by a new leader so it commits its predecessors' entries (§5.4.2)
    CONF_CHANGE = 2  # a single-server membership change; data encodes it (see `ConfChange`)


@attrs.frozen(slots=True)
class Entry:
    index: int
    term: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""


@attrs.frozen(kw_only=True)
class ConfState:
    """The membership in force: voters count toward majorities; learners only receive the log."""

    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class HardState:
    """What must be durable before the core acts on it (persist-before-use).

    `current_term` and `voted_for`: the paper's persistent state. `commit_index`: a hint for faster
    restart (safe to lose). `acked_watermark`: the highest index this replica has acknowledged as
    durable to a leader; a log that recovers shorter than it has lost acknowledged data. `repairing`:
    the replica knows it lost or damaged data and must not vote or lead until it is repaired.
    `vote_fence_term`: no vote is cast or granted in any term up to it — terms a lost or damaged hard state
    may have voted in (`raft.vote_fence`); 0 when none is fenced. `voted_for` is always a node id or None.
    """

    current_term: int = 0
    voted_for: str | None = None
    commit_index: int = 0
    acked_watermark: int = 0
    repairing: bool = False
    vote_fence_term: int = 0


@attrs.frozen(kw_only=True)
class SnapshotMeta:
    """The last entry a snapshot covers, and the membership at that entry."""

    index: int
    term: int
    conf: ConfState
