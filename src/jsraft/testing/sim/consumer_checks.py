"""`ConsumerChecker`: the consumer app's checks, on top of the stream app's (`StreamChecker`).

Owns: the reference replica (a `consumer_app.ConsumerMachine` on a `MemStore`, fed the committed log; its
consumers composed in as production composes them, so its store reflects interest / work-queue removals
and the stream audit compares those too), the consumer set it holds at each index, and these checks:

  ack-floor           per consumer, the reference's ack floor never moves back from one index to the next
                      (the floor after index i is a function of the log prefix); and every replica's floors
                      at index i equal the reference's at i (compared before the whole state, for a clear
                      diagnosis).
  consumer-state      every replica's consumer set (`ConsumerSet.key()`: every consumer's config, delivered
                      and ack-floor cursors, pending and redelivered maps) after a CONSUMER entry at index i,
                      and after every snapshot restore (recovery, InstallSnapshot, resync) at its index,
                      equals the reference's at i.
  acked-redelivered   the committed log never records a delivery (DELIVERED op) of a message a committed
                      ACK had acknowledged for that consumer; and a leader never hands out a message its own
                      applied state already counts as acknowledged (`consumer_clients`).
  stream-audit        (the stream checker's) the store states, retention removals included, agree.

Every replica's report is held to equality, whatever the state of its store: a consumer set is a
function of the log alone (a CREATE carries its start and a PURGE its floor: consumer/machine.py
invariant 5, replica/consumer_replica.py invariant 5), so a replica replaying over a store that is ahead
of the entry, one inside a catch-up's window, an unverified or an unhealthy one must agree too. Reports
are still classified as the stream audits are (`StreamChecker.on_audit`: "vouched", "replaying",
"ahead", "unverified", "unhealthy", and "restored" for a snapshot restore) and counted
(`consumer_reports_<status>`), so a run shows how many of each the checks covered.

Invariants:
  1. The checker changes nothing in the cluster; the reference only reads the committed log.
  2. Reports are judged once the reference reached their index (at most one step later).

Imports: stdlib, `jsraft.consumer`, `jsraft.jsapi`, `jsraft.store`, `jsraft.stream`, siblings (never
`consumer_app` at run time: the app builds the reference, `ConsumerApp.reference_machine`).
"""

from __future__ import annotations

import bisect
import zlib
from collections import Counter
from typing import TYPE_CHECKING

from jsraft.consumer import AckOp, DeliveredOp, decode_ops
from jsraft.jsapi.consumer_config import AckPolicy
from jsraft.store.memstore import MemStore
from jsraft.stream.results import Health
from jsraft.testing.sim.stream_checks import StreamChecker
from jsraft.testing.sim.violation import Violation

if TYPE_CHECKING:
    from jsraft.replica.consumer_replica import ConsumerReplica
    from jsraft.stream import StreamStateMachine
    from jsraft.testing.sim.consumer_app import ConsumerApp
    from jsraft.testing.sim.simulator import Simulation

Floors = dict[str, tuple[int, int]]  # consumer -> (ack_floor_stream_seq, ack_floor_consumer_seq)


def consumer_view(replica: ConsumerReplica) -> tuple[int, Floors]:
    """(a CRC of the consumer set's key, the ack floors) of a replica's consumers now."""
    consumers = replica.consumers
    floors = {name: (e.state.ack_floor_stream_seq, e.state.ack_floor_consumer_seq)
              for name, e in consumers.consumers.items()}
    return zlib.crc32(repr(consumers.key()).encode()), floors


class ConsumerChecker(StreamChecker):
    def __init__(self, app: ConsumerApp) -> None:
        self.views: dict[int, tuple[int, Floors]] = {}  # reference: index -> view after it (changes only)
        self.last_floors: Floors = {}
        self.acked: dict[str, set[int]] = {}  # reference: consumer -> seqs a committed ACK acknowledged
        self.before: dict[str, set[int]] = {}  # pending seqs of acked consumers before the entry applies
        self.reports: list[tuple[str, int, tuple[int, Floors], str]] = []
        self.consumer_reports: Counter[str] = Counter()
        self.view_indexes: list[int] = []  # the keys of `views`, ascending
        super().__init__(app)
        self._record(0, consumer_view(self.reference.consumer_replica))

    def new_reference(self, *, final: bool = False):  # type: ignore[no-untyped-def]
        # The app builds its own composition (`ConsumerApp.reference_machine`): the checker does not
        # import the app at run time (no import cycle between the two).
        return self.app.reference_machine(MemStore(self.app.store_config()),
                                          observer=None if final else self.on_reference)

    def stats(self) -> dict[str, int]:
        counts = {f"consumer_reports_{k}": v for k, v in sorted(self.consumer_reports.items())}
        return {**super().stats(), **counts}

    # --- The reference ------------------------------------------------------------------------

    def on_reference(self, node_id: str, machine: StreamStateMachine, consumers: ConsumerReplica, index: int,
                     body: bytes | None, phase: str) -> None:
        if phase == "before":
            self._before(consumers, index, body or b"")
            return
        if body is not None:
            self._acks(consumers, body)
        view = consumer_view(consumers)
        for name, floor in view[1].items():
            last = self.last_floors.get(name)
            if last is not None and floor < last:
                raise Violation("ack-floor", f"consumer {name}'s ack floor moved back from {last} to {floor} at "
                                             f"index {index} of the committed log")
        self.last_floors = view[1]
        self._record(index, view)

    def _before(self, replica: ConsumerReplica, index: int, body: bytes) -> None:
        consumers = replica.consumers.consumers
        self.before = {}
        for op in decode_ops(body):
            if isinstance(op, DeliveredOp):
                acked = self.acked.get(op.name, set())
                again = [r[0] for r in op.records if r[0] in acked]
                if again:
                    raise Violation("acked-redelivered", f"the DELIVERED op committed at {index} delivers {again[:5]} "
                                                         f"to {op.name}, which committed ACKs acknowledged")
            elif isinstance(op, AckOp) and op.name in consumers:
                self.before[op.name] = set(consumers[op.name].state.pending)

    def _acks(self, replica: ConsumerReplica, body: bytes) -> None:
        consumers = replica.consumers.consumers
        for op in decode_ops(body):
            if not isinstance(op, AckOp) or op.name not in self.before or op.name not in consumers:
                continue
            entry = consumers[op.name]
            pending = self.before[op.name]
            if entry.config is not None and entry.config.ack_policy is AckPolicy.all:
                top = max(op.seqs)
                done = {s for s in pending if s <= top}
            else:
                done = {s for s in op.seqs if s in pending}
            self.acked.setdefault(op.name, set()).update(done - set(entry.state.pending))

    def _record(self, index: int, view: tuple[int, Floors]) -> None:
        if not self.view_indexes or self.views[self.view_indexes[-1]] != view:
            self.views[index] = view
            self.view_indexes.append(index)

    def view_at(self, index: int) -> tuple[int, Floors]:
        """The reference's view after `index` (the latest change at or before it)."""
        return self.views[self.view_indexes[bisect.bisect_right(self.view_indexes, index) - 1]]

    # --- Replicas -------------------------------------------------------------------------------

    def on_replica(self, node_id: str, machine: StreamStateMachine, consumers: ConsumerReplica, index: int,
                   body: bytes | None, phase: str) -> None:
        if phase == "before" or (phase == "after" and body is None):
            return
        if phase == "restored":
            status = "restored"  # the snapshot's set replaces the node's: held to equality at its index
        elif machine.health is not Health.current or machine.store.faults():
            status = "unhealthy"
        elif machine.replaying:
            status = "replaying"
        elif index <= self.vouch_after.get(node_id, 0):
            status = "ahead"
        elif node_id in self.unverified:
            status = "unverified"
        else:
            status = "vouched"
        self.reports.append((node_id, index, consumer_view(consumers), status))

    def after_step(self, sim: Simulation) -> None:
        self._judge_reports(sim)  # first: a consumer divergence is named before the removals it causes
        super().after_step(sim)

    def _judge_reports(self, sim: Simulation) -> None:
        reports, self.reports = self.reports, []
        for node_id, index, view, status in reports:
            self.advance(sim.checker, index)
            if self.reference.applied_index < index:
                self.reports.append((node_id, index, view, status))
                continue
            self.consumer_reports[status] += 1
            self._judge_consumers(node_id, index, view, status)

    def _judge_consumers(self, node_id: str, index: int, view: tuple[int, Floors], status: str) -> None:
        reference = self.view_at(index)
        what = "after restoring a snapshot at" if status == "restored" else f"({status}) at"
        if view[1] != reference[1]:
            raise Violation("ack-floor", f"{node_id} {what} index {index} holds ack floors {view[1]}, the log "
                                         f"gives {reference[1]}")
        if view[0] != reference[0]:
            raise Violation("consumer-state", f"{node_id} {what} index {index} holds consumer set {view[0]:#x}, "
                                              f"the log applied to a reference replica gives {reference[0]:#x}")
