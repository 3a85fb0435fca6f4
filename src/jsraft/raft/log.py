"""The in-memory view of one replica's Raft log (layer L1).

Owns: the entries after the snapshot, the faulty indexes, `commit_index`, `applied_index`, and the
bookkeeping of what storage already holds (`stable_index`) versus what the next `Ready` must write. It
never does I/O: `take_writes()` hands the pending writes to a `Ready`, `mark_stable()` records that
storage made them durable.

Invariants:
  1. `entries[k].index == snapshot_index + 1 + k`; terms of non-faulty entries never decrease.
  2. `applied_index <= commit_index <= last_index` (applied may exceed commit only when storage restored
     an application ahead of a damaged log, which makes the replica repairing).
  3. `snapshot_index <= stable_index <= last_index`: storage holds, durably, exactly our entries up to
     `stable_index`; anything it holds above that is removed by the next `Ready.truncate_from`.
  4. A faulty index has a placeholder entry whose term is not trusted: `term_at()` answers None for it,
     so every consistency check that relies on it fails (rule 3). Faulty indexes are `<= stable_index`.
  5. Nothing at or below `commit_index` is ever truncated (rule 5; the caller also checks it through
     `RaftNode.rule_check_truncation`, the pair of this assertion).

Imports: L0. Reference: etcd-io/raft `log.go`, `log_unstable.go`.
"""

from __future__ import annotations

from jsraft.errors import invariant
from jsraft.raft.types import Entry


class RaftLog:
    def __init__(self, *, snapshot_index: int, snapshot_term: int, entries: list[Entry],
                 faulty: set[int], commit_index: int, applied_index: int, persisted: bool = True,
                 storage_last_index: int | None = None) -> None:
        self.snapshot_index = snapshot_index
        self.snapshot_term = snapshot_term
        self.entries: list[Entry] = list(entries)
        self.faulty: set[int] = set(faulty)
        self.commit_index = commit_index
        self.applied_index = applied_index
        # Restored entries are on disk, except a bootstrap's (`persisted=False`), which the first Ready writes.
        self.stable_index = self.last_index if persisted else snapshot_index
        # Highest index storage may hold (written by a Ready, maybe not yet advanced): a truncation at
        # or below it must be passed on to storage.
        self._written_index_max = self.stable_index
        self._truncate_pending = False
        if storage_last_index is not None and storage_last_index > self.last_index:
            # Storage holds more than we took from it: the next Ready tells it to drop the rest.
            self._written_index_max = storage_last_index
            self._truncate_pending = True
        # Faulty placeholders replaced in memory by the leader's entry; storage rewrites them in place.
        self._repaired: set[int] = set()

    # --- Reading -------------------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        return self.snapshot_index + 1

    @property
    def last_index(self) -> int:
        return self.snapshot_index + len(self.entries)

    def last_term(self) -> int:
        """The last entry's term as recorded (a faulty last entry only makes the replica repairing)."""
        return self.entries[-1].term if self.entries else self.snapshot_term

    def term_at(self, index: int) -> int | None:
        """The term at `index`, or None if compacted, beyond the end, or faulty (untrusted)."""
        if index == self.snapshot_index:
            return self.snapshot_term
        if index < self.snapshot_index or index > self.last_index or index in self.faulty:
            return None
        return self.entries[index - self.first_index].term

    def entry_at(self, index: int) -> Entry:
        invariant(self.first_index <= index <= self.last_index, f"entry {index} is in the log")
        return self.entries[index - self.first_index]

    def next_known_term(self, index: int) -> int | None:
        """The term of the first non-faulty entry after `index` (skipping faulty placeholders), or None."""
        for later in range(max(index, self.snapshot_index) + 1, self.last_index + 1):
            if later not in self.faulty:
                return self.entries[later - self.first_index].term
        return None

    def first_faulty(self) -> int | None:
        return min(self.faulty) if self.faulty else None

    def verified_last_index(self) -> int:
        """The end of the verified prefix: everything up to it is present and not faulty."""
        first_faulty = self.first_faulty()
        return self.last_index if first_faulty is None else first_faulty - 1

    def slice(self, low: int, count_max: int, bytes_max: int) -> list[Entry]:
        """Entries from `low`, at most `count_max` of them and `bytes_max` of data (at least one)."""
        invariant(low > self.snapshot_index, f"slice from {low} is not compacted")
        out: list[Entry] = []
        size = 0
        for index in range(low, min(self.last_index, low + count_max - 1) + 1):
            invariant(index not in self.faulty, "a faulty entry is never sent (rule 6)")
            entry = self.entries[index - self.first_index]
            size += len(entry.data)
            if out and size > bytes_max:
                break
            out.append(entry)
        return out

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Election restriction (§5.4.1): is a candidate's log at least as up to date as ours?"""
        return (last_term, last_index) >= (self.last_term(), self.last_index)

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest index <= `index` whose term is <= `term` (fast back-off), with its term (0: unknown)."""
        index = min(index, self.verified_last_index())
        while index > self.snapshot_index:
            known = self.term_at(index)
            if known is not None and known <= term:
                return index, known
            index -= 1
        if index == self.snapshot_index and self.snapshot_term <= term:
            return index, self.snapshot_term
        return index, 0

    def committed_to_apply(self, count_max: int, trusted_index: int | None = None) -> list[Entry]:
        """Committed entries not yet applied, stopping before the first faulty or untrusted one."""
        low = max(self.applied_index, self.snapshot_index) + 1
        high = min(self.commit_index, self.verified_last_index(), low + count_max - 1)
        if trusted_index is not None:
            high = min(high, trusted_index)
        if high < low:
            return []
        return self.entries[low - self.first_index:high - self.first_index + 1]

    # --- Changing ------------------------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        if not entries:
            return
        invariant(entries[0].index == self.last_index + 1, "appended entries follow the last index")
        invariant(self.last_index in self.faulty or entries[0].term >= self.last_term(),
                  "appended entries do not lower the term")
        self.entries.extend(entries)

    def truncate_from(self, index: int) -> None:
        """Remove entries at `index` and above (a conflict with the leader's log)."""
        invariant(self.snapshot_index < index <= self.last_index, f"truncation at {index} is inside the log")
        invariant(index > self.commit_index, f"rule 5: truncation at {index} removes committed entries")
        del self.entries[index - self.first_index:]
        self.faulty = {f for f in self.faulty if f < index}
        self._repaired = {r for r in self._repaired if r < index}
        self.stable_index = min(self.stable_index, index - 1)
        if index <= self._written_index_max:
            self._truncate_pending = True

    def replace_faulty(self, entry: Entry) -> None:
        """Put the leader's copy of a faulty entry in place, without touching anything after it."""
        invariant(entry.index in self.faulty, f"entry {entry.index} is faulty")
        self.entries[entry.index - self.first_index] = entry
        self.faulty.discard(entry.index)
        self._repaired.add(entry.index)

    def commit_to(self, index: int) -> bool:
        if index <= self.commit_index:
            return False
        invariant(index <= self.last_index, f"commit {index} within the log ({self.last_index})")
        self.commit_index = index
        return True

    def lower_commit(self, index: int) -> None:
        """Operator override only (`accept_data_loss`): forget that entries above `index` committed."""
        self.commit_index = min(self.commit_index, index)
        self.applied_index = min(self.applied_index, self.commit_index)

    def compact(self, index: int) -> int:
        """Drop entries up to `index` (an application snapshot covers them); returns the term at it."""
        invariant(self.snapshot_index < index <= min(self.applied_index, self.stable_index),
                  f"compaction at {index} covers only applied, durable entries")
        term = self.term_at(index)
        invariant(term is not None, f"compaction point {index} has a known term")
        self._drop_through(index, term)
        return term

    def install_snapshot(self, index: int, term: int, keep_suffix: bool) -> None:
        """A leader's snapshot replaces our log up to `index`; the rest is kept only if it matches."""
        if keep_suffix and index <= self.last_index:
            self._drop_through(index, term)
            self.stable_index = max(self.stable_index, index)
        else:
            invariant(self.commit_index <= index, "rule 5: a snapshot install never drops committed entries")
            if self._written_index_max > index:
                self._truncate_pending = True
            self.entries = []
            self.faulty = set()
            self._repaired = set()
            self.snapshot_index, self.snapshot_term = index, term
            self.stable_index = index
        self._written_index_max = max(self._written_index_max, index)
        self.commit_index = max(self.commit_index, index)

    def _drop_through(self, index: int, term: int) -> None:
        del self.entries[:index - self.snapshot_index]
        self.faulty = {f for f in self.faulty if f > index}
        self._repaired = {r for r in self._repaired if r > index}
        self.snapshot_index, self.snapshot_term = index, term

    # --- Handing writes to storage -------------------------------------------------------------

    def take_writes(self) -> tuple[int | None, list[Entry], list[Entry]]:
        """What storage must do next: (truncate_from, entries to append, entries to rewrite in place)."""
        truncate_from = self.stable_index + 1 if self._truncate_pending else None
        self._truncate_pending = False
        unstable = self.entries[self.stable_index - self.snapshot_index:]
        repaired = [self.entry_at(i) for i in sorted(self._repaired) if i <= self.stable_index]
        self._repaired = set()
        if truncate_from is not None:
            self._written_index_max = self.last_index
        else:
            self._written_index_max = max(self._written_index_max, self.last_index)
        return truncate_from, unstable, repaired

    def has_writes(self) -> bool:
        return self._truncate_pending or bool(self._repaired) or self.stable_index < self.last_index

    def mark_stable(self, last_written: Entry) -> None:
        """Storage made entries up to `last_written` durable; they count only if still ours (same term)."""
        if self.term_at(last_written.index) == last_written.term:
            self.stable_index = max(self.stable_index, last_written.index)
