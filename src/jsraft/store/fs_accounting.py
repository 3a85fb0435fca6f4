"""The FileStore's totals: message count, bytes, content digest, per-range digests, per-subject counts (L2).

Owns: `Accounting`, the mixin `FileStore` keeps its totals with — one place that adds a message to them and
removes it (used by appends, removals, recovery and repair), so the state tuple and the per-range digests
always move together.

Invariants:
  1. `digest` is the sum (mod 2**64) of `message_digest(seq, crc)` over live messages, and `ranges[k]` the
     same sum over the live messages of range k (`DIGEST_RANGE_SEQS` sequences), `range_counts[k]` their
     number; a range with no live message has no entry.
  2. A record detached because it no longer reads back leaves the count and digests at once (its content
     CRC is known), `bytes` and its subject count once its group is settled (`fs_unreadable`): from then
     on the totals cover exactly the live messages, and a repair adds the message like any other.
  3. `psim[s]` is `[count, first, last]`: `first` is the subject's first live sequence when positive; 0
     or negative when unknown — 0: look from the head; `-b`: no live message of `s` lies below `b`, so
     `subject_first` looks from `b`. Only known values reach the index file (`fs_index`): a bound is 0 there.

Imports: L1 (`codec`), L2 (`store.base`). Reference: DESIGN.md §3 (state tuple), §8.
"""

from __future__ import annotations

from jsraft.codec.records import message_digest
from jsraft.store.base import DIGEST_RANGE_SEQS

_U64 = (1 << 64) - 1
_RANGE_SHIFT = DIGEST_RANGE_SEQS.bit_length() - 1


class Accounting:
    msgs: int
    bytes: int
    digest: int
    ranges: dict[int, int]
    range_counts: dict[int, int]
    psim: dict[str, list[int]]


    def account_add(self, seq: int, subject: str, size: int, crc: int) -> None:
        self.msgs += 1
        self._add_term(seq, message_digest(seq, crc))
        self.bytes += size
        self._count_subject(seq, subject)

    def _add_term(self, seq: int, term: int) -> None:
        self.digest = (self.digest + term) & _U64
        key = (seq - 1) >> _RANGE_SHIFT
        self.ranges[key] = (self.ranges.get(key, 0) + term) & _U64
        self.range_counts[key] = self.range_counts.get(key, 0) + 1

    def _count_subject(self, seq: int, subject: str) -> None:
        entry = self.psim.get(subject)
        if entry is None:
            self.psim[subject] = [1, seq, seq]
        else:
            entry[0] += 1
            if (entry[1] > 0 and seq < entry[1]) or (entry[1] < 0 and seq < -entry[1]):
                entry[1] = seq  # below a known first, or below the bound of an unknown one: the first
            if entry[2] and seq > entry[2]:
                entry[2] = seq

    def account_remove(self, seq: int, subject: str, size: int, crc: int) -> None:
        self.msgs -= 1
        self.bytes -= size
        self._remove_term(seq, message_digest(seq, crc))
        self._uncount_subject(seq, subject)

    def _remove_term(self, seq: int, term: int) -> None:
        self.digest = (self.digest - term) & _U64
        key = (seq - 1) >> _RANGE_SHIFT
        left = self.range_counts.get(key, 0) - 1
        if left > 0:
            self.range_counts[key] = left
            self.ranges[key] = (self.ranges[key] - term) & _U64
        else:
            self.range_counts.pop(key, None)
            self.ranges.pop(key, None)

    def _uncount_subject(self, seq: int, subject: str) -> None:
        entry = self.psim.get(subject)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] <= 0:
            del self.psim[subject]
            return
        if entry[1] == seq:
            # Unknown now, but nothing of the subject lives below `seq + 1`: `subject_first` looks from there
            # (a KV key's oldest revision removed by its history limit: the scan starts past it, not at the head).
            entry[1] = -(seq + 1)
        if entry[2] == seq:
            entry[2] = 0
