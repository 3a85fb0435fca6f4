"""Range catch-up: a follower fetches exactly the sequences it lacks from the leader (layer L3).

Owns: the follower side (`CatchupSession`: carry out a `RepairPlan` — local steps, then fetch and
reconcile ranges — and verify the result against the group state). The leader side, `serve_catchup`, is
in `catchup_serve` (re-exported here).

Ranges that only a per-range digest found differing (nothing else explained the difference) are
*probed* first: the leader sends each live message's content CRC (12 bytes) instead of its body, the
session compares them with its own and fetches only the sequences that differ. Without that, a range of
4,096 sequences holding one changed message would cross the network whole.

How a fetched sequence is placed (the store's API decides what is possible):
  - above the store's last_seq: appended (messages) or skipped (deleted), in order;
  - a fault of the local store: `repair` (message) or `repair_deleted` (deleted);
  - held locally with the same content CRC: nothing; held but deleted in the group: `delete`;
  - held with other content, or absent although the group holds it: the store cannot take a message
    below its last_seq, so it is truncated just below that sequence and everything above is fetched
    again (or, below its first_seq, replaced by a fresh store from `reset_store`).

Invariants:
  1. Every fetched message's content CRC is recomputed before it is stored; a mismatch fails the session.
  2. A chunk must answer exactly the requested ranges up to its `next_seq`, in order; anything else
     fails the session (`CatchupFailed`) rather than storing a guess.
  3. The leader never serves while not current, nor ranges overlapping its own faults (DESIGN §4;
     catchup_serve invariant 1).
  4. At the end the store's state tuple equals the group's; when the leader reports as deleted a
     sequence the group state held (removed by a later entry), equality is left to the next audit.
  5. The store's limits are lifted for the session (`finish_repair` puts the config's back): the group
     already kept its state within them, and the way there may leave them — the tail is placed before
     the per-range digests find what the group deleted below it — where a store enforcing them would
     refuse (`discard: new`) or evict (`discard: old`, per subject) messages the group holds. A replica
     never refuses what the group committed: limits are the leader's decision.

Imports: L0, L2 (`store`), `stream` below it. Reference: DESIGN.md §6, §8.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from jsraft.errors import BadRequest, DamagedSequence, JsraftError, NoMessageFound, invariant
from jsraft.store.base import UNLIMITED, Discard, StoreState, StreamStore
from jsraft.stream import apply_ops
from jsraft.stream.catchup_serve import serve_catchup
from jsraft.stream.catchup_wire import (
    CHUNK_BYTES_DEFAULT, RANGES_PER_REQUEST_MAX, CatchupChunk, CatchupMsg, CatchupRefusal, CatchupRequest,
)
from jsraft.stream.errors import CatchupFailed
from jsraft.stream.drift import Finding, FindingKind, RepairPlan, merge_ranges
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.snapshot import GroupState

__all__ = ["CatchupResult", "CatchupSession", "serve_catchup"]

_PLAN_ROUNDS_MAX = 4  # reset, compact, truncate, then a plan with no local steps
# Fetch phases: faults and tail, then the ranges whose digests still differ, then one more for what a
# rebuild exposed. A store that still disagrees after that fails verification.
_PHASES_MAX = 3



class _NeedsReset(Exception):
    """Internal: the store must take a message below its first_seq; only a fresh store can."""


# --- Follower side ----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CatchupResult:
    verified: bool | None  # True: state tuple equals the group's; None: left to the next audit
    findings: tuple[Finding, ...]
    fetched_msgs: int
    deleted_seqs: int
    reset: bool
    rebuilt_from: int
    state: StoreState
    probed_seqs: int = 0


class CatchupSession:
    """Bring the machine's store to `group`, requesting ranges from the leader chunk by chunk."""

    def __init__(self, machine: StreamStateMachine, group: GroupState, *, snapshot_index: int,
                 reset_store: Callable[[], StreamStore] | None = None, bytes_max: int = CHUNK_BYTES_DEFAULT,
                 store_may_be_ahead: bool = False) -> None:
        self.machine, self.group = machine, group
        self.snapshot_index, self.reset_store, self.bytes_max = snapshot_index, reset_store, bytes_max
        self.store_may_be_ahead = store_may_be_ahead
        self.findings: tuple[Finding, ...] = ()
        self.remaining: list[tuple[int, int]] = []
        self.fetched_msgs = self.deleted_seqs = self.removed_since_snapshot = self.rebuilt_from = 0
        self.probed_seqs = 0  # sequences whose CRC was compared instead of fetched
        self.probing = False  # the remaining ranges are probed (CRCs), not fetched
        self._differing: list[tuple[int, int]] = []  # what a probe found differing, fetched next
        self.was_reset = False
        self.result: CatchupResult | None = None
        self._request: CatchupRequest | None = None
        self._tail: list[tuple[int, str, bytes, bytes, int]] = []
        self._store_last = 0
        self._phases = 0

    @property
    def store(self) -> StreamStore:
        return self.machine.store

    def start(self, plan: RepairPlan, *, full: bool = False) -> CatchupRequest | None:
        """Run the plan's local steps, then return the first request (None: already done)."""
        self.findings = plan.findings
        if full:
            plan = attrs.evolve(plan, reset=True, recheck=True)
        _lift_limits(self.store)
        self._run_plan(plan)
        return self._next_request()

    def _run_plan(self, plan: RepairPlan) -> None:
        for _ in range(_PLAN_ROUNDS_MAX):
            if not plan.has_local_steps:
                break
            try:
                self._local_steps(plan)
            except _NeedsReset:
                self._reset()
            plan = self.machine.plan_against(self.group, store_may_be_ahead=self.store_may_be_ahead)
        invariant(not plan.has_local_steps, "a repair plan settles within its rounds")
        self.remaining = list(plan.fetch)
        # Only per-range digests found these: most of their messages are likely equal, so probe first.
        self.probing = bool(plan.fetch) and all(f.kind is FindingKind.digest_mismatch for f in plan.findings)
        self._differing = []
        self._store_last = self.store.state().last_seq

    def _local_steps(self, plan: RepairPlan) -> None:
        if plan.reset:
            self._reset()
            return
        if plan.compact_to is not None:
            self.store.compact(plan.compact_to)
        if plan.truncate_to is not None:
            try:
                self.store.truncate(plan.truncate_to)
            except BadRequest:  # nothing live at or below the group's last: only a fresh store fits
                raise _NeedsReset() from None

    def _reset(self) -> None:
        if self.reset_store is None:
            raise CatchupFailed("the store cut its head beyond the group's and no fresh store was provided")
        self.machine.replace_store(self.reset_store())
        _lift_limits(self.store)
        self.was_reset = True

    def _next_request(self) -> CatchupRequest | None:
        if not self.remaining and self.probing:  # every range probed: fetch only what differed
            self.probing = False
            self.remaining, self._differing = list(merge_ranges(self._differing)), []
        if not self.remaining and self._replan():
            self._finish()
            return None
        ranges = tuple(self.remaining[:RANGES_PER_REQUEST_MAX])
        self._request = CatchupRequest(stream=self.machine.config.name, snapshot_index=self.snapshot_index,
                                       ranges=ranges, bytes_max=self.bytes_max, crcs_only=self.probing)
        return self._request

    def _replan(self) -> bool:
        """Everything planned is fetched: plan again (drift invariant 3). True when nothing is left."""
        if self.store_may_be_ahead or self.removed_since_snapshot or self._phases >= _PHASES_MAX:
            return True
        self._flush()
        self._phases += 1
        self._run_plan(self.machine.plan_against(self.group))
        return not self.remaining

    def on_refusal(self, refusal: CatchupRefusal) -> None:
        raise CatchupFailed(f"the leader refused to serve: {refusal.reason}")

    def on_chunk(self, chunk: CatchupChunk) -> CatchupRequest | None:
        """Store what the chunk carries; return the next request, or None when the repair is done."""
        invariant(self._request is not None, "a chunk answers a request")
        served = _served(self._request.ranges, chunk.next_seq)
        if self._request.crcs_only:
            return self._on_crcs(chunk, served)
        _check_chunk(chunk, served)
        events = sorted([(m[0], m) for m in chunk.msgs] + [(r[0], r) for r in chunk.deleted], key=lambda e: e[0])
        faults = self.store.faults()
        for _, event in events:
            try:
                restart = self._place_live(event, faults) if len(event) == 6 else self._place_deleted(event, faults)
            except _NeedsReset:
                self._tail.clear()
                self._reset()
                self._run_plan(self.machine.plan_against(self.group))
                return self._next_request()
            if restart:  # truncated below this chunk's later sequences: fetch everything above again
                self._flush()
                self.remaining = list(merge_ranges([(restart, self.group.last_seq)]))
                return self._next_request()
        self._flush()
        self.remaining = _subtract(self.remaining, served)
        return self._next_request()

    def _on_crcs(self, chunk: CatchupChunk, served: list[tuple[int, int]]) -> CatchupRequest | None:
        """A probe's answer: note every sequence whose content differs here (or that this store holds
        live where the leader holds none); they are fetched once every range was probed."""
        if chunk.msgs:
            raise CatchupFailed("the leader answered a probe with messages")
        _check_coverage([(seq, seq) for seq, _ in chunk.crcs] + list(chunk.deleted), served)
        for seq, crc in chunk.crcs:
            self.probed_seqs += 1
            if self._held_crc(seq) != crc:
                self._differing.append((seq, seq))
        for first, last in chunk.deleted:
            high = min(last, self._store_last)
            if first <= high:
                self._differing += [(seq, seq) for seq in apply_ops.live_seqs(self.store, first, high)]
        self.remaining = _subtract(self.remaining, served)
        return self._next_request()

    def _held_crc(self, seq: int) -> int | None:
        try:
            held = self.store.load(seq)
        except (NoMessageFound, DamagedSequence):
            return None
        return apply_ops.content_crc(seq, held.subject, held.headers, held.payload, held.timestamp_ns)

    def _place_live(self, msg: CatchupMsg, faults) -> int:
        seq, subject, headers, payload, timestamp_ns, crc = msg
        self.fetched_msgs += 1
        if seq > self._store_last:
            if seq != self._store_last + 1:
                raise CatchupFailed(f"catch-up left a gap below sequence {seq}")
            self._tail.append((seq, subject, headers, payload, timestamp_ns))
            self._store_last = seq
            return 0
        if any(f.first <= seq <= f.last for f in faults):
            self.store.repair(seq, subject, headers, payload, timestamp_ns)
            return 0
        try:
            held = self.store.load(seq)
        except NoMessageFound:
            held = None
        except DamagedSequence:  # found damaged just now: a fault, repairable
            self.store.repair(seq, subject, headers, payload, timestamp_ns)
            return 0
        if held is not None and apply_ops.content_crc(seq, held.subject, held.headers, held.payload,
                                                      held.timestamp_ns) == crc:
            return 0
        return self._rebuild_from(msg)

    def _rebuild_from(self, msg: CatchupMsg) -> int:
        """The store holds other content at `msg`'s seq, or lacks it: cut below it and refetch above."""
        seq = msg[0]
        try:
            self.store.truncate(seq - 1)
        except BadRequest:
            raise _NeedsReset() from None
        self.machine.note(Finding(kind=FindingKind.content_mismatch, first=seq, last=self._store_last,
                                  detail="rebuilt from the leader's store"))
        self.rebuilt_from = seq if not self.rebuilt_from else min(self.rebuilt_from, seq)
        self._store_last = seq - 1
        self._tail.append((seq, msg[1], msg[2], msg[3], msg[4]))
        self._store_last = seq
        return seq + 1 if seq < self.group.last_seq else 0

    def _place_deleted(self, deleted: tuple[int, int], faults) -> int:
        first, last = deleted
        self.deleted_seqs += last - first + 1
        self.removed_since_snapshot += _live_count(self.group, first, last)
        high = min(last, self._store_last)
        for fault in faults:
            lo, hi = max(fault.first, first), min(fault.last, high)
            if lo <= hi:
                self.store.repair_deleted(lo, hi)
        if first <= high:
            for seq in apply_ops.live_seqs(self.store, first, high):
                self.store.delete(seq)
        if last > self._store_last:
            start = max(first, self._store_last + 1)
            if start != self._store_last + 1:
                raise CatchupFailed(f"catch-up left a gap below sequence {start}")
            self._flush()
            self.store.skip(start, last - start + 1)
            self._store_last = last
        return 0

    def _flush(self) -> None:
        if self._tail:
            tail, self._tail = self._tail, []
            try:
                self.store.append_batch(tail)
            except JsraftError as error:  # e.g. a limit this store has and the leader's had not
                raise CatchupFailed(f"the store refused fetched messages: {error.description}") from error

    def _finish(self) -> None:
        self._flush()
        state = self.store.state()
        verified: bool | None = None
        if not self.store_may_be_ahead and not self.removed_since_snapshot:
            verified = state.agreement_key() == self.group.agreement_key()
            if not verified:
                raise CatchupFailed(f"after catch-up the store holds {state.agreement_key()}, "
                                    f"the group {self.group.agreement_key()}")
        self.machine.finish_repair()
        self.result = CatchupResult(verified=verified, findings=self.findings, fetched_msgs=self.fetched_msgs,
                                    deleted_seqs=self.deleted_seqs, reset=self.was_reset,
                                    rebuilt_from=self.rebuilt_from, state=state, probed_seqs=self.probed_seqs)


def _lift_limits(store: StreamStore) -> None:
    """Invariant 5: no limit of the store's applies while the session places the group's messages."""
    config = store.config
    lifted = attrs.evolve(config, max_msgs=UNLIMITED, max_bytes=UNLIMITED, max_msgs_per_subject=UNLIMITED,
                          max_msg_size=UNLIMITED, discard=Discard.old, discard_new_per_subject=False)
    if lifted != config:
        store.update_config(lifted, enforce_limits=False)


def _served(ranges: tuple[tuple[int, int], ...], next_seq: int) -> list[tuple[int, int]]:
    """The parts of `ranges` a chunk with `next_seq` answers (all of them when it is 0)."""
    if not next_seq:
        return list(ranges)
    return [(first, min(last, next_seq - 1)) for first, last in ranges if first < next_seq]


def _subtract(remaining: list[tuple[int, int]], served: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in remaining:
        pieces = [(first, last)]
        for lo, hi in served:
            pieces = [p for a, b in pieces for p in ((a, min(b, lo - 1)), (max(a, hi + 1), b)) if p[0] <= p[1]]
        out += pieces
    return list(merge_ranges(out))


def _check_chunk(chunk: CatchupChunk, served: list[tuple[int, int]]) -> None:
    """Invariants 1 and 2: exact coverage of `served` in order, and every message's CRC."""
    if chunk.crcs:
        raise CatchupFailed("the leader answered a fetch with CRCs")
    _check_coverage([(m[0], m[0]) for m in chunk.msgs] + list(chunk.deleted), served)
    for seq, subject, headers, payload, timestamp_ns, crc in chunk.msgs:
        if apply_ops.content_crc(seq, subject, headers, payload, timestamp_ns) != crc:
            raise CatchupFailed(f"sequence {seq} from the leader fails its CRC")


def _check_coverage(pieces: list[tuple[int, int]], served: list[tuple[int, int]]) -> None:
    """Invariant 2: `pieces` cover exactly `served`, in order, each sequence once."""
    pieces = sorted(pieces)
    previous, position = 0, 0
    for first, last in pieces:  # both lists are sorted: walk them together
        while position < len(served) and served[position][1] < first:
            position += 1
        inside = position < len(served) and served[position][0] <= first and last <= served[position][1]
        if first <= previous or not inside:
            raise CatchupFailed(f"the leader's chunk answers {first}..{last}, which was not asked or overlaps")
        previous = last
    if sum(last - first + 1 for first, last in pieces) != sum(last - first + 1 for first, last in served):
        raise CatchupFailed("the leader's chunk does not answer every requested sequence")


def _live_count(group: GroupState, first: int, last: int) -> int:
    """How many of `first..last` the group state holds live."""
    if not group.msgs:
        return 0
    lo, hi = max(first, group.first_seq), min(last, group.last_seq)
    if lo > hi:
        return 0
    holes = sum(max(0, min(b, hi) - max(a, lo) + 1) for a, b in group.deleted)
    return hi - lo + 1 - holes
