"""`--app consumer`: the stream app with the stream's consumers, as production's `StreamAdapter` composes them.

Owns: `ConsumerApp` (the stream app with a retention policy drawn from the seed — limits, interest or
work-queue — the consumer workload and the consumer checker), `ObservedConsumers`, production's
`replica.consumer_replica.ConsumerReplica` with the checker watching it, and `ConsumerMachine`, the
checker's *reference* composition (a `StreamStateMachine` on a `MemStore` with a `ConsumerReplica`,
fed the committed log; an oracle, never a replica under test).

Each replica is production's: `stream_app.StreamReplica` wraps a `StreamAdapter`, which hands every applied
entry to its `ConsumerReplica` (stream_adapter invariant 7: CONSUMER ops, retention removals at the same
index, interest retention after MSGS, `on_purge` after a PURGE, the stream config after CONFIG), carries
the consumers in every snapshot's `extra` and restores them with every restore (recovery, InstallSnapshot,
resync). `attach_consumers` replaces the adapter's fresh `ConsumerReplica` by an `ObservedConsumers`
before anything applied, so the checker sees each applied CONSUMER-carrying index (and each restore) with
the consumer set's key, its ack floors and the replica's health, to be compared with the reference
replica at the same index.

Invariants:
  1. `ObservedConsumers` changes nothing production does, except under the mutant.
  2. The mutant `consumer-skip-ops` (node `n1` only) never hands CONSUMER entries to its consumers.

Imports: stdlib, `jsraft.jsapi`, `jsraft.replica.consumer_replica` (testing may import anything),
`jsraft.store`, `jsraft.stream`, siblings.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from jsraft.jsapi.stream_config import StreamConfig
from jsraft.replica.consumer_replica import ConsumerReplica
from jsraft.store.base import StreamStore
from jsraft.stream import ApplyResult, EntryKind, RepairPlan, StreamStateMachine
from jsraft.testing.sim.consumer_checks import ConsumerChecker
from jsraft.testing.sim.consumer_clients import ConsumerClients
from jsraft.testing.sim.stream_app import StreamApp

if TYPE_CHECKING:
    from jsraft.testing.sim.simulator import Simulation
    from jsraft.testing.sim.stream_app import StreamReplica

RETENTIONS = ("limits", "interest", "workqueue")

# (node id, machine, consumers, index, CONSUMER body or None, phase) -> None; phase: "before" a CONSUMER
# entry applies to the consumers, "after" any entry applied, "restored" after a snapshot restore.
Observer = Callable[[str, StreamStateMachine, ConsumerReplica, int, "bytes | None", str], None]


class ObservedConsumers(ConsumerReplica):
    """Production's consumer replica, watched by the checker (invariant 1)."""

    def __init__(self, machine: StreamStateMachine, *, node_id: str, observer: Observer | None,
                 skip_consumer_ops: bool = False) -> None:
        super().__init__(machine)
        self.node_id, self.observer, self.skip_consumer_ops = node_id, observer, skip_consumer_ops

    def on_applied(self, index, result, data=None):  # type: ignore[no-untyped-def]
        body = result.consumer_body if result.kind is EntryKind.CONSUMER else None
        if body is not None and self.observer is not None:
            self.observer(self.node_id, self.machine, self, index, body, "before")
        applied = None
        if body is None or not self.skip_consumer_ops:  # invariant 2: the mutant skips the consumers' part
            applied = super().on_applied(index, result, data)
        if self.observer is not None:
            self.observer(self.node_id, self.machine, self, index, body, "after")
        return applied

    def restored(self) -> None:
        super().restored()
        if self.observer is not None:
            self.observer(self.node_id, self.machine, self, self.machine.applied_index, None, "restored")


class ConsumerMachine(StreamStateMachine):
    """The checker's reference: a stream machine with its consumers applied next to it."""

    def __init__(self, store: StreamStore, config: StreamConfig, raw: bytes, *,
                 observer: Observer | None = None) -> None:
        super().__init__(store, config, raw)
        self.consumer_replica = ObservedConsumers(self, node_id="reference", observer=observer)

    def apply(self, index: int, data: bytes) -> ApplyResult:
        result = super().apply(index, data)
        if isinstance(result, ApplyResult) and self.applied_index == index:
            self.consumer_replica.on_applied(index, result, data)
        return result

    def snapshot(self, extra: bytes = b"") -> bytes:
        return super().snapshot(extra=self.consumer_replica.snapshot_extra())

    def restore(self, data: bytes, *, recovering: bool = False) -> RepairPlan:
        plan = super().restore(data, recovering=recovering)
        self.consumer_replica.restored()
        return plan


class ConsumerApp(StreamApp):
    name = "consumer"

    def __init__(self, rng: random.Random, mutant: str | None = None) -> None:
        super().__init__(rng, mutant)
        self.checker: ConsumerChecker = ConsumerChecker(self)

    def reference_machine(self, store: StreamStore, *, observer: Observer | None) -> ConsumerMachine:
        """The checker's reference on `store` (`ConsumerChecker.new_reference`)."""
        return ConsumerMachine(store, self.config, self.raw, observer=observer)

    def extra_stream_fields(self, rng: random.Random) -> dict[str, object]:
        return {"retention": rng.choice(RETENTIONS)}

    def attach_consumers(self, replica: StreamReplica) -> None:
        adapter = replica.adapter
        skip = self.mutant == "consumer-skip-ops" and replica.node_id == "n1"
        adapter.consumers = ObservedConsumers(adapter.machine, node_id=replica.node_id,
                                              observer=self.checker.on_replica, skip_consumer_ops=skip)

    def workload(self, sim: Simulation) -> ConsumerClients:
        return ConsumerClients(self, sim.rngs.clients, sim.knobs.propose)
