"""Damaged or missing sequence ranges, kept sorted and merged (used by FileStore).

Invariant: ranges are disjoint, sorted by `first`, and adjacent ranges of the same kind are merged.
"""

from __future__ import annotations

import bisect

from jsraft.store.base import Fault, FaultKind


class FaultMap:
    __slots__ = ("_ranges",)

    def __init__(self) -> None:
        self._ranges: list[list] = []  # [first, last, kind]

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def add(self, first: int, last: int, kind: FaultKind) -> None:
        if first > last:
            return
        self.remove(first, last)
        position = bisect.bisect_left(self._ranges, first, key=lambda r: r[0])
        self._ranges.insert(position, [first, last, kind])
        self._merge_around(position)

    def _merge_around(self, position: int) -> None:
        start = max(position - 1, 0)
        merged: list[list] = []
        for item in self._ranges[start : position + 2]:
            if merged and merged[-1][2] == item[2] and merged[-1][1] + 1 >= item[0]:
                merged[-1][1] = max(merged[-1][1], item[1])
            else:
                merged.append(item)
        self._ranges[start : position + 2] = merged

    def remove(self, first: int, last: int) -> None:
        """Forget faults in `first..last` (repaired, deleted, or removed from the store)."""
        kept: list[list] = []
        for lo, hi, kind in self._ranges:
            if hi < first or lo > last:
                kept.append([lo, hi, kind])
                continue
            if lo < first:
                kept.append([lo, first - 1, kind])
            if hi > last:
                kept.append([last + 1, hi, kind])
        self._ranges = kept

    def kind_of(self, seq: int) -> FaultKind | None:
        position = bisect.bisect_right(self._ranges, seq, key=lambda r: r[0]) - 1
        if position >= 0 and self._ranges[position][0] <= seq <= self._ranges[position][1]:
            return self._ranges[position][2]
        return None

    def faults(self) -> list[Fault]:
        return [Fault(first=lo, last=hi, kind=kind) for lo, hi, kind in self._ranges]

    def to_json(self) -> list[list]:
        return [[lo, hi, str(kind)] for lo, hi, kind in self._ranges]

    @classmethod
    def from_json(cls, data: list[list]) -> "FaultMap":
        fault_map = cls()
        for lo, hi, kind in data:
            fault_map.add(int(lo), int(hi), FaultKind(kind))
        return fault_map
