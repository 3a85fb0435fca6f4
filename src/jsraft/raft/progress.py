"""The leader's view of one follower's log: match/next index and flow control (layer L1).

Owns: `Progress`, one per member while this node leads. A follower is in one of three states: PROBE
(we do not know where its log matches: send one AppendEntries and wait), REPLICATE (it matches: pipeline
batches, at most `max_inflight_msgs` unacknowledged) or SNAPSHOT (it needs the snapshot: send chunks).

Invariants:
  1. `match_index < next_index`. `match_index` only grows, except through `regress()`, which the leader
     calls when a *repairing* follower proves it lost entries it had acknowledged (rule 3).
  2. `inflight` holds the last index of each unacknowledged AppendEntries, ascending, bounded by
     `inflight_max`.

Imports: stdlib. Reference: etcd-io/raft `tracker/progress.go`, `tracker/inflights.go`.
"""

from __future__ import annotations

import collections
import enum


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Progress:
    __slots__ = ("match_index", "next_index", "state", "probe_sent", "inflight", "inflight_max",
                 "pending_snapshot_index", "snapshot_offset", "snapshot_idle_ticks", "recent_active",
                 "repairing", "repair_watermark", "read_round_acked", "sent_commit")

    def __init__(self, next_index: int, inflight_max: int) -> None:
        self.match_index = 0
        self.next_index = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight: collections.deque[int] = collections.deque()
        self.inflight_max = inflight_max
        self.pending_snapshot_index = 0
        self.snapshot_offset = 0
        self.snapshot_idle_ticks = 0
        # Heard from since the last check-quorum round.
        self.recent_active = True
        self.repairing = False
        # A repairing follower's acked watermark (0 when it is not repairing): see `repair.pad_for_repairing`.
        self.repair_watermark = 0
        self.read_round_acked = 0
        # The highest commit index sent to this follower: tells the leader when an empty
        # AppendEntries is needed just to spread a new commit index.
        self.sent_commit = 0

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            self.next_index = max(self.match_index + 1, self.pending_snapshot_index + 1)
        else:
            self.next_index = self.match_index + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next_index = self.match_index + 1
        self.inflight.clear()

    def become_snapshot(self, snapshot_index: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot_index = snapshot_index
        self.snapshot_offset = 0
        self.snapshot_idle_ticks = 0
        self.inflight.clear()

    def maybe_update(self, index: int) -> bool:
        """The follower matches up to `index`; False if that is old news."""
        updated = index > self.match_index
        if updated:
            self.match_index = index
            self.probe_sent = False
        self.next_index = max(self.next_index, index + 1)
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        return updated

    def maybe_decrease(self, rejected_index: int, match_hint: int) -> bool:
        """A rejection of the AppendEntries at `rejected_index`; False if it is stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected_index <= self.match_index:
                return False
            self.next_index = self.match_index + 1
            return True
        if self.next_index - 1 != rejected_index:
            return False
        self.next_index = max(min(rejected_index, match_hint + 1), self.match_index + 1)
        self.probe_sent = False
        return True

    def regress(self, index: int) -> None:
        """Rule 3: a repairing follower lost entries it acknowledged; resend from `index + 1`."""
        self.match_index = min(self.match_index, index)
        self.state = ProgressState.PROBE
        self.next_index = index + 1
        self.probe_sent = False
        self.inflight.clear()

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return len(self.inflight) >= self.inflight_max
        return True

    def sent_append(self, last_index: int, entry_count: int) -> None:
        if self.state is ProgressState.REPLICATE:
            if entry_count:
                self.next_index = last_index + 1
                self.inflight.append(last_index)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True
