"""The Raft core's inputs at construction: its configuration and what storage recovered (layer L1).

Owns: `RaftConfig` (static tuning, validated once) and `RestoredState` (the durable state a `wal`
recovered, handed to `RaftNode` at start). Both are frozen values; nothing here has behaviour beyond
validation.

Invariants:
  1. `RaftConfig.validate()` passes before a node uses a config: `election_ticks > heartbeat_ticks`
     (followers must hear several heartbeats per election timeout) and every bound is positive.
  2. `RestoredState.entries` start right after the snapshot (or at index 1) and cover every index up to
     the last one, except that a faulty index may be missing (storage could not read it at all) or present
     as a placeholder (identity as read, data unknown). The terms of non-faulty entries never decrease.
  3. A snapshot's data travels with its metadata: both present or both absent.
  4. The membership is always learnable from the log: `conf_state` is the snapshot's, or empty when there
     is no snapshot. A new group records its initial members as its first entries (`bootstrap()`), so a
     member added later replays them too and never applies a change to the wrong base membership (a
     blank node that saw only "add n4, promote n4" would otherwise count itself a quorum of one).

Imports: L0, attrs. Reference: etcd-io/raft `Config`, hashicorp/raft `Config.validate`.
"""

from __future__ import annotations

import attrs

from jsraft.errors import InvalidConfig, invariant
from jsraft.raft.membership import ConfChange, ConfChangeType, encode_conf_change
from jsraft.raft.types import ConfState, Entry, EntryType, HardState, SnapshotMeta


@attrs.frozen(kw_only=True)
class RaftConfig:
    """Static settings of one replica of one Raft group. Times are in ticks of the driver's clock."""

    node_id: str
    # An election starts after a randomized timeout in [election_ticks, 2 * election_ticks).
    election_ticks: int = 10
    heartbeat_ticks: int = 1
    # Per-follower flow control: AppendEntries messages in flight before the leader waits for acks.
    max_inflight_msgs: int = 64
    max_entries_per_msg: int = 64
    # A message holds at least one entry even when that entry alone is larger than this.
    max_bytes_per_msg: int = 1 << 20
    pre_vote: bool = True
    check_quorum: bool = True
    snapshot_chunk_bytes: int = 256 << 10
    # A follower refuses an InstallSnapshot whose announced size is larger than this.
    snapshot_bytes_max: int = 1 << 30
    # A learner is promoted only when its match index is within this many entries of the leader's last.
    learner_catchup_entries_max: int = 16
    # The leader refuses proposals while this many of its entries are not committed yet.
    uncommitted_entries_max: int = 8192
    committed_entries_per_ready_max: int = 1024
    pending_reads_max: int = 4096
    # When a follower's acknowledgement (or the leader's own fsync) commits entries: True sends every
    # follower an AppendEntries at once, empty if it lacks nothing, to tell it the new commit index (etcd's
    # `bcastAppend`, nats-server's commit heartbeat); False lets the index travel with the next
    # AppendEntries that carries entries, or the next heartbeat (`replication` invariant 5). Only the
    # followers' apply waits for it; what is committed, and when, does not change.
    prompt_commit: bool = True

    def validate(self) -> None:
        """Raise `InvalidConfig` if a field or a relation between fields is wrong."""
        if not self.node_id:
            raise InvalidConfig("raft: node_id must not be empty")
        if self.heartbeat_ticks < 1:
            raise InvalidConfig("raft: heartbeat_ticks must be at least 1")
        if self.election_ticks <= self.heartbeat_ticks:
            raise InvalidConfig("raft: election_ticks must be greater than heartbeat_ticks")
        positive = {
            "max_inflight_msgs": self.max_inflight_msgs,
            "max_entries_per_msg": self.max_entries_per_msg,
            "max_bytes_per_msg": self.max_bytes_per_msg,
            "snapshot_chunk_bytes": self.snapshot_chunk_bytes,
            "uncommitted_entries_max": self.uncommitted_entries_max,
            "committed_entries_per_ready_max": self.committed_entries_per_ready_max,
            "pending_reads_max": self.pending_reads_max,
        }
        for name, value in positive.items():
            if value < 1:
                raise InvalidConfig(f"raft: {name} must be at least 1")
        if self.snapshot_bytes_max < self.snapshot_chunk_bytes:
            raise InvalidConfig("raft: snapshot_bytes_max must be at least snapshot_chunk_bytes")
        if self.learner_catchup_entries_max < 0:
            raise InvalidConfig("raft: learner_catchup_entries_max must not be negative")


@attrs.frozen(kw_only=True)
class RestoredState:
    """What storage recovered for this replica; a brand-new group comes from `bootstrap()`.

    `entries` are those after the snapshot, in order. An index in `faulty` is one whose record was found
    corrupt: its data is unknown and its term is not trusted; `entries` may hold a placeholder for it
    (identity as read) or leave it out (invariant 2). `applied_index` is what the application has durably applied (default: the
    snapshot's index). `storage_uuid_changed` says the data directory is not the one this member used
    before; `repair_reasons` are storage's own findings. If a snapshot was unreadable, storage passes `snapshot=None`, no entries and
    `hard_state.repairing=True`: the leader then sends a fresh snapshot. `conf_state` is the membership
    before the first entry (invariant 4). `entries_persisted` is False only for `bootstrap()`: the first
    `Ready` then writes the bootstrap entries and hard state.
    """

    hard_state: HardState = attrs.field(factory=HardState)
    conf_state: ConfState = attrs.field(factory=lambda: ConfState(voters=()))
    snapshot: SnapshotMeta | None = None
    snapshot_data: bytes | None = None
    entries: tuple[Entry, ...] = attrs.field(default=(), converter=tuple)
    faulty: frozenset[int] = attrs.field(default=frozenset(), converter=frozenset)
    applied_index: int | None = None
    storage_uuid_changed: bool = False
    # What storage found wrong at recovery (e.g. the WAL's findings: a rolled-back stretch, a bad hard-state
    # slot); any reason makes the replica repairing.
    repair_reasons: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    entries_persisted: bool = True
    # Lost storage with no bound on the terms it voted in (no vote-term ceiling): the voters whose term the
    # member learns before it answers anything (`term_query`). None: its votes are bounded.
    term_query_voters: tuple[str, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(tuple))

    @classmethod
    def bootstrap(cls, voters: tuple[str, ...], learners: tuple[str, ...] = ()) -> RestoredState:
        """A member of a brand-new group: the initial membership as committed entries of term 1.

        Every initial member builds the same entries (sorted), so their logs agree from the start, as
        in etcd's `Bootstrap`. A node that is added later starts from `RestoredState()` (empty).
        """
        invariant(len(voters) > 0 and not set(voters) & set(learners), "bootstrap voters given, disjoint")
        changes = [ConfChange(type=ConfChangeType.ADD_VOTER, node_id=v) for v in sorted(voters)]
        changes += [ConfChange(type=ConfChangeType.ADD_LEARNER, node_id=n) for n in sorted(learners)]
        entries = tuple(Entry(index=i, term=1, type=EntryType.CONF_CHANGE, data=encode_conf_change(c))
                        for i, c in enumerate(changes, start=1))
        return cls(hard_state=HardState(current_term=1, commit_index=len(entries)), entries=entries,
                   entries_persisted=False)

    @property
    def snapshot_index(self) -> int:
        return self.snapshot.index if self.snapshot is not None else 0

    @property
    def last_index(self) -> int:
        last_entry = self.entries[-1].index if self.entries else self.snapshot_index
        return max(last_entry, max(self.faulty, default=self.snapshot_index))

    def contiguous_entries(self) -> tuple[Entry, ...]:
        """`entries` with a placeholder at every faulty index left out (term: the previous known one)."""
        if not self.faulty:
            return self.entries
        by_index = {entry.index: entry for entry in self.entries}
        term = self.snapshot.term if self.snapshot is not None else 0
        out: list[Entry] = []
        for index in range(self.snapshot_index + 1, self.last_index + 1):
            entry = by_index.get(index) or Entry(index=index, term=max(term, 1))
            if index not in self.faulty:
                term = entry.term
            out.append(entry)
        return tuple(out)

    def validate(self) -> None:
        """Check the structure storage promised (a storage bug, not an operating error, if broken)."""
        invariant((self.snapshot is None) == (self.snapshot_data is None),
                  "restored snapshot metadata and data come together")
        if self.snapshot is not None:
            invariant(self.snapshot.conf == self.conf_state, "restored conf_state is the snapshot's")
        else:
            invariant(self.conf_state == ConfState(voters=()), "without a snapshot the base membership is "
                      "empty; initial members come from bootstrap entries (invariant 4)")
        expected = self.snapshot_index + 1
        previous_term = self.snapshot.term if self.snapshot is not None else 0
        for entry in self.entries:
            while expected < entry.index and expected in self.faulty:
                expected += 1  # a faulty index storage left out
            invariant(entry.index == expected, f"restored entries contiguous at {expected}")
            if entry.index not in self.faulty:
                invariant(entry.term >= previous_term, f"restored terms non-decreasing at {entry.index}")
                previous_term = entry.term
            expected += 1
        for index in self.faulty:
            invariant(self.snapshot_index < index <= self.last_index, f"faulty index {index} is in the log")
        if self.applied_index is not None:
            invariant(self.applied_index >= self.snapshot_index, "applied index not below the snapshot")
        invariant(self.term_query_voters is None or self.storage_uuid_changed,
                  "only a member that lost its storage queries the term")
