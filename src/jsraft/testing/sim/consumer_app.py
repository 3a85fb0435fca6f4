"""`--app consumer`: the stream app with the stream's consumers composed in, as production composes them.

Owns: `ConsumerApp` (the stream app with a retention policy drawn from the seed — limits, interest or
work-queue — the consumer workload and the consumer checker) and `ConsumerMachine`, a `StreamStateMachine`
that carries a real `server.consumer_replica.ConsumerReplica` the way `server.stream_adapter` does
(its invariant 7): every entry the machine applies is handed to `ConsumerReplica.on_applied` right after
(CONSUMER ops, retention removals at the same index, interest retention after MSGS, `on_purge` after a
PURGE, from the entry's content, the stream config after CONFIG); `snapshot()` carries `encode_snapshot(consumers)` as its
`extra`; every `restore()` (recovery, InstallSnapshot, resync) is followed by `ConsumerReplica.restored()`.
Because the composition lives in the machine, every path of `stream_app` / `stream_repair` that applies,
snapshots or restores takes the consumers along without knowing about them.

Each applied CONSUMER-carrying index (and each restore) is reported to the checker (`consumer_checks`)
with the consumer set's key, its ack floors and the replica's health, to be compared with the reference
replica at the same index.

Liveness probes are CONSUMER entries here too, but well-formed ones (a DELETE of a consumer that never
exists): a malformed body stops the group, as it must (consumer/errors.py invariant 2).

Invariants:
  1. The consumer set sees exactly the entries the stream machine applied, in index order, at the same
     index (no entry skipped, none applied twice: `ConsumerSet.apply_ops` ignores an index it is past).
  2. The mutant `consumer-skip-ops` (node `n1` only) never hands CONSUMER entries to its consumers.

Imports: stdlib, `jsraft.consumer`, `jsraft.replica.consumer_replica` (testing may import anything),
`jsraft.stream`, siblings.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from jsraft.consumer import DeleteOp, encode_ops
from jsraft.jsapi.stream_config import StreamConfig
from jsraft.replica.consumer_replica import ConsumerReplica
from jsraft.store.base import StreamStore
from jsraft.stream import ApplyResult, EntryKind, RepairPlan, StreamStateMachine
from jsraft.stream.entries import encode_consumer
from jsraft.testing.sim.consumer_checks import ConsumerChecker
from jsraft.testing.sim.consumer_clients import ConsumerClients
from jsraft.testing.sim.stream_app import StreamApp

if TYPE_CHECKING:
    from jsraft.testing.sim.simulator import Simulation

RETENTIONS = ("limits", "interest", "workqueue")
PROBE_NAME = "probe-"

# (machine, index, CONSUMER body or None, phase) -> None; phase: "before" a CONSUMER entry applies to the
# consumers, "after" any entry applied, "snapshot" / "restored" with a snapshot's bytes.
Observer = Callable[["ConsumerMachine", int, "bytes | None", str], None]


class ConsumerMachine(StreamStateMachine):
    """A stream machine with its consumers applied next to it (module docstring, invariant 1)."""

    def __init__(self, store: StreamStore, config: StreamConfig, raw: bytes, *, node_id: str = "",
                 observer: Observer | None = None, skip_consumer_ops: bool = False) -> None:
        super().__init__(store, config, raw)
        self.node_id = node_id
        self.observer = observer
        self.skip_consumer_ops = skip_consumer_ops
        self.consumer_replica = ConsumerReplica(self)

    def apply(self, index: int, data: bytes) -> ApplyResult:
        result = super().apply(index, data)
        if not isinstance(result, ApplyResult) or self.applied_index != index:
            return result
        body = result.consumer_body if result.kind is EntryKind.CONSUMER else None
        if body is not None and self.observer is not None:
            self.observer(self, index, body, "before")  # the observer may look at the state it changes
        if body is None or not self.skip_consumer_ops:  # invariant 2: the mutant skips the consumers' part
            self.consumer_replica.on_applied(index, result, data)
        if self.observer is not None:
            self.observer(self, index, body, "after")
        return result

    def snapshot(self, extra: bytes = b"") -> bytes:
        data = super().snapshot(extra=self.consumer_replica.snapshot_extra())
        if self.observer is not None:
            self.observer(self, self.applied_index, data, "snapshot")
        return data

    def restore(self, data: bytes, *, recovering: bool = False) -> RepairPlan:
        plan = super().restore(data, recovering=recovering)
        self.consumer_replica.restored()
        if self.observer is not None:
            self.observer(self, self.applied_index, data, "restored")
        return plan


class ConsumerApp(StreamApp):
    name = "consumer"

    def __init__(self, rng: random.Random, mutant: str | None = None) -> None:
        super().__init__(rng, mutant)
        self.checker: ConsumerChecker = ConsumerChecker(self)
        self.probe_values: set[bytes] = set()

    def extra_stream_fields(self, rng: random.Random) -> dict[str, object]:
        return {"retention": rng.choice(RETENTIONS)}

    def machine_class(self, node_id: str):  # type: ignore[no-untyped-def]
        skip = self.mutant == "consumer-skip-ops" and node_id == "n1"

        def build(store: StreamStore, config: StreamConfig, raw: bytes) -> ConsumerMachine:
            return ConsumerMachine(store, config, raw, node_id=node_id, observer=self.checker.on_replica,
                                   skip_consumer_ops=skip)

        return build

    def workload(self, sim: Simulation) -> ConsumerClients:
        return ConsumerClients(self, sim.rngs.clients, sim.knobs.propose)

    def probe(self, number: int) -> bytes:
        value = encode_consumer(encode_ops([DeleteOp(name=f"{PROBE_NAME}{number}")]))
        self.probe_values.add(value)
        return value
