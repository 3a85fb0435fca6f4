"""`StreamAdapter`: `StreamStateMachine` behind the runtime's `StateMachine` protocol (layer L5).

Owns: feeding a stream group's committed entries to its state machine (NOOP and CONF_CHANGE entries only
move `applied_index`), the end of the WAL replay after a restart (`finish_recovery`, stream/machine.py
lifecycle), and the repair plan a restored snapshot leaves (`pending_plan`).

Invariants:
  1. Every committed entry moves the machine's `applied_index` by exactly one, in order.
  2. `finish_recovery()` is called once, when the replay reached the log's last index at open time
     (`recovery_target`): only then is a store still ahead of the log truly ahead.
  3. `noop_term`: as in `meta_adapter` — a StreamLeader is built only once its term's NOOP applied.

Imports: L1 (`raft.types`), L3 (`stream`), stdlib. Reference: stream/machine.py "Lifecycle".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from jsraft.raft.types import Entry, EntryType
from jsraft.stream import RepairPlan, StreamStateMachine

log = logging.getLogger("jsraft.server.stream")


class StreamAdapter:
    def __init__(self, machine: StreamStateMachine) -> None:
        self.machine = machine
        self.noop_term = 0
        self.recovery_target: int | None = None  # set once the group is open; None: not known yet
        self.pending_plan: RepairPlan | None = None

    @property
    def applied_index(self) -> int:
        return self.machine.applied_index

    def apply(self, entries: Sequence[Entry]) -> list[object]:
        results: list[object] = []
        machine = self.machine
        for entry in entries:
            if entry.type is EntryType.NORMAL:
                results.append(machine.apply(entry.index, entry.data))
            else:
                machine.applied_index = entry.index  # nothing for the stream: only the position moves
                if entry.type is EntryType.NOOP:
                    self.noop_term = max(self.noop_term, entry.term)
                results.append(None)
        self.check_recovery()
        return results

    def check_recovery(self) -> None:
        target = self.recovery_target
        if target is not None and self.machine.replaying and self.machine.applied_index >= target:
            findings = self.machine.finish_recovery()
            if findings:
                log.warning("stream %s: recovery findings: %s", self.machine.config.name, findings)

    def snapshot(self) -> bytes:
        return self.machine.snapshot()

    def restore(self, data: bytes) -> None:
        plan = self.machine.restore(data, recovering=self.recovery_target is None)
        if not plan.is_empty:
            # TODO(#4): run a CatchupSession against the leader over $rpc; until then the replica stays
            # `repairing` and says so in stream info.
            log.warning("stream %s: snapshot leaves a repair plan: %s", self.machine.config.name, plan)
            self.pending_plan = plan
