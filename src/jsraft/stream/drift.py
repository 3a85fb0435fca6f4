"""Drift detection at recovery: DESIGN §8's reactions table as a pure function (layer L3).

Owns: `Finding` (one disagreement between a replica's store and the group state), `RepairPlan` (what
to do about all of them) and `plan_repair`, which compares a store's state, faults and per-range
digests with a `GroupState` (from a snapshot: the local one at startup, the leader's when resyncing).

| finding                                   | reaction (plan field)                                   |
|-------------------------------------------|---------------------------------------------------------|
| local first_seq < group first_seq          | `compact_to` group first_seq                            |
| a fault below group first_seq             | `compact_to` group first_seq (the group removed it)     |
| local first_seq > group first_seq          | fetch it: faults are `repair`ed; a head the store cut   |
|   (missing head)                          |   itself cannot be put back below it: `reset` the store |
| a hole or a corrupt record below last_seq | `fetch` exactly those sequences (the store's faults)    |
| local last_seq > group last_seq (ahead)   | `truncate_to` group last_seq (the log replays the rest) |
| local last_seq < group last_seq (behind)  | `fetch` the tail                                        |
| digest differs with equal sequences       | compare per-range digests, `fetch` the differing ranges |

Invariants:
  1. A plan never removes a message the group holds: `compact_to` is the group's first_seq, `truncate_to`
     its last_seq, and `reset` is chosen only together with fetching everything the group holds.
  2. With `store_may_be_ahead` (startup: the store may already hold entries applied after the snapshot,
     which the WAL replay verifies) only the rules that hold whatever was applied later are used:
     head behind the group's, faults, tail behind the snapshot's. The rest waits for the replay and
     the post-recovery audit.
  3. A plan with local steps (`reset`, `compact_to`, `truncate_to`) sets `recheck`: the store changes
     under them, so fetch ranges and digest comparisons are computed again afterwards. Per-range digests
     are compared only when no fault or tail is left to fetch: those change the digests themselves, so
     the catch-up session plans once more after fetching them.

Imports: L2 (`store` values), `stream.snapshot`, attrs. Reference: DESIGN.md §8.
"""

from __future__ import annotations

import enum

import attrs

from jsraft.store.base import DIGEST_RANGE_SEQS, Fault, FaultKind, StoreState
from jsraft.stream.snapshot import GroupState, Ranges


class FindingKind(enum.StrEnum):
    head_behind = "head_behind"  # local first_seq below the group's: messages the group removed
    missing_head = "missing_head"  # local first_seq above the group's
    hole = "hole"  # a missing record below last_seq (store fault `missing`)
    corrupt = "corrupt"  # a record that does not verify (store fault `corrupt`)
    tombstone_unknown = "tombstone_unknown"  # a damaged delete record (store fault `tombstone`)
    store_ahead = "store_ahead"  # local last_seq above the log's
    store_behind = "store_behind"  # local last_seq below the log's
    digest_mismatch = "digest_mismatch"  # equal sequences, different content
    content_mismatch = "content_mismatch"  # a replayed MSGS entry differs from the stored message
    sequence_mismatch = "sequence_mismatch"  # a MSGS entry did not start at the store's last_seq + 1
    audit_mismatch = "audit_mismatch"  # the replica's state tuple disagreed with the majority at an audit
    memory_lost = "memory_lost"  # a memory store's messages, gone with the process that held them (not damage)


@attrs.frozen(kw_only=True)
class Finding:
    kind: FindingKind
    first: int = 0
    last: int = 0
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {"kind": str(self.kind), "first_seq": self.first, "last_seq": self.last, "detail": self.detail}


@attrs.frozen(kw_only=True)
class RepairPlan:
    group: GroupState
    findings: tuple[Finding, ...] = ()
    reset: bool = False
    compact_to: int | None = None
    truncate_to: int | None = None
    fetch: Ranges = ()
    recheck: bool = False

    @property
    def has_local_steps(self) -> bool:
        return self.reset or self.compact_to is not None or self.truncate_to is not None

    @property
    def is_empty(self) -> bool:
        return not self.has_local_steps and not self.fetch


def merge_ranges(ranges: list[tuple[int, int]]) -> Ranges:
    """Sorted, disjoint, adjacent ranges joined."""
    merged: list[list[int]] = []
    for first, last in sorted(r for r in ranges if r[0] <= r[1]):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return tuple((first, last) for first, last in merged)


def fault_finding(fault: Fault, local: StoreState) -> Finding:
    if fault.kind is FaultKind.corrupt:
        return Finding(kind=FindingKind.corrupt, first=fault.first, last=fault.last)
    if fault.kind is FaultKind.tombstone:
        return Finding(kind=FindingKind.tombstone_unknown, first=fault.first, last=fault.last)
    below_head = local.msgs == 0 or fault.last < local.first_seq
    kind = FindingKind.missing_head if below_head else FindingKind.hole
    return Finding(kind=kind, first=fault.first, last=fault.last)


def _covers(faults: list[Fault], seq: int) -> bool:
    return any(f.first <= seq <= f.last for f in faults)


def plan_repair(local: StoreState, faults: list[Fault], local_ranges: dict[int, int], group: GroupState,
                *, store_may_be_ahead: bool = False) -> RepairPlan:
    """Compare a store with `group` and say how to make it hold exactly the group's messages."""
    findings: list[Finding] = []
    fetch: list[tuple[int, int]] = []
    compact_to = truncate_to = None
    reset = False
    g_first, g_last = group.first_seq, group.last_seq
    # The first sequence the group could hold, even when it holds none (first = last + 1 then).
    g_floor = g_first if group.msgs else g_last + 1
    if local.msgs and local.first_seq < g_floor:
        findings.append(Finding(kind=FindingKind.head_behind, first=local.first_seq, last=g_floor - 1))
        compact_to = g_floor
    elif local.last_seq < g_floor - 1 or (not local.msgs and group.first_seq and local.first_seq < g_floor):
        # Nothing to remove: lift an empty or short store to the group's floor — also an empty one at the
        # same last_seq whose first_seq never moved (0: nothing ever stored) while the group's did (a purge
        # of an empty stream makes it first = last + 1). A group that never moved (first 0) stays as it is.
        compact_to = g_floor
    below_floor = min((fault.first for fault in faults), default=g_floor)
    if compact_to is None and below_floor < g_floor:
        # A damaged sequence the group has removed since (a subject purge cannot match a record whose
        # subject no longer reads back, so the replica kept its fault while every other replica removed
        # the message): nothing to fetch, nothing held — the head cut forgets it (simulator, `--app
        # consumer` seed 10568: the fault stayed below first_seq and the replica resynced forever).
        findings.append(Finding(kind=FindingKind.head_behind, first=below_floor, last=g_floor - 1,
                                detail="damaged sequences the group removed"))
        compact_to = g_floor
    for fault in faults:
        if fault.last >= g_floor and fault.first <= g_last:
            findings.append(fault_finding(fault, local))
            fetch.append((max(fault.first, g_floor), min(fault.last, g_last)))
    if local.last_seq < g_last:
        tail_first = max(local.last_seq + 1, g_floor)
        findings.append(Finding(kind=FindingKind.store_behind, first=tail_first, last=g_last))
        fetch.append((tail_first, g_last))
    if not store_may_be_ahead:
        reset = _missing_head(local, faults, group, findings)
        if local.last_seq > g_last and not reset:
            findings.append(Finding(kind=FindingKind.store_ahead, first=g_last + 1, last=local.last_seq))
            truncate_to = g_last
    if reset:
        compact_to, truncate_to = g_floor, None
        fetch = [(g_floor, g_last)] if group.msgs else []
    elif not store_may_be_ahead and compact_to is None and truncate_to is None and not fetch:
        # Faults and a missing tail explain a different digest by themselves: compare ranges only when
        # nothing else is left (the session plans again after fetching those).
        fetch += _differing_ranges(local, local_ranges, group, findings)
    recheck = reset or compact_to is not None or truncate_to is not None
    return RepairPlan(group=group, findings=tuple(findings), reset=reset, compact_to=compact_to,
                      truncate_to=truncate_to, fetch=merge_ranges(fetch), recheck=recheck)


def _missing_head(local: StoreState, faults: list[Fault], group: GroupState, findings: list[Finding]) -> bool:
    """True when the group's first message lies at or below the store's last_seq but the store neither
    holds it nor lists it as a fault: a store takes no message below its own first_seq, so only a
    fresh store can be brought back to the group's head."""
    if not group.msgs or _covers(faults, group.first_seq):
        return False
    lacks = (local.first_seq > group.first_seq) if local.msgs else (local.last_seq >= group.first_seq)
    if lacks:
        findings.append(Finding(kind=FindingKind.missing_head, first=group.first_seq,
                                last=min(local.first_seq if local.msgs else local.last_seq + 1, group.last_seq + 1) - 1,
                                detail="the store cut its head beyond the group's; it needs a fresh store"))
    return lacks


def _differing_ranges(local: StoreState, local_ranges: dict[int, int], group: GroupState,
                      findings: list[Finding]) -> list[tuple[int, int]]:
    """Per-range digest comparison, when the state tuples differ although no rule above explained it."""
    if local.agreement_key() == group.agreement_key():
        return []
    group_ranges = group.range_digests()
    low, high = group.first_seq if group.msgs else group.last_seq + 1, min(local.last_seq, group.last_seq)
    differing = []
    for number in sorted(set(group_ranges) | set(local_ranges)):
        if group_ranges.get(number) == local_ranges.get(number):
            continue
        first = max(number * DIGEST_RANGE_SEQS + 1, low)
        last = min((number + 1) * DIGEST_RANGE_SEQS, high)
        if first <= last:
            differing.append((first, last))
    for first, last in differing:
        findings.append(Finding(kind=FindingKind.digest_mismatch, first=first, last=last,
                                detail="per-range digest differs"))
    return differing
