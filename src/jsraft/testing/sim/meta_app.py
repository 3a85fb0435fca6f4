"""`--app meta`: every simulated node applies its committed entries to a real `MetaStateMachine`.

Owns: `MetaApp` (the replicas' factory, the workload, the checks) and `MetaReplica`, one node's meta
replica — production's `server.meta_adapter.MetaAdapter` around a `MetaStateMachine`:
  - every committed entry goes through `MetaAdapter.apply` (NORMAL entries to `apply(index, data)`,
    NOOP and CONF_CHANGE entries to `note_applied(index)`, a NOOP's term recorded as `noop_term`: the
    node proposes only once its term's NOOP applied, `MetaStateMachine`'s precondition); snapshots go
    through `MetaAdapter.snapshot` / `restore`, at start from the WAL's and on InstallSnapshot;
  - leadership lost (not leader, or another term than the one it proposed in): `abandon_proposals()`.

Checks (besides `SafetyChecker`'s, which compares `digest()` — the committed state without the applied
index — across replicas at every index):
  state-machine-safety  every replica's `Applied` outcome of an entry (ok, or which error) is the same;
                        a *reference replica* (a `MetaStateMachine` that never crashes, fed the committed
                        log `SafetyChecker` recorded) has the replicas' digest at every index; at the end
                        every member's `snapshot()` bytes equal the reference's at the member's index
                        (meta invariant 1: equal states encode to equal bytes).
  acked-lost            after the final power failure, an acknowledged entry counts as durable on a voter
                        whose WAL holds it or whose (decodable) snapshot covers its index.

Invariants:
  1. The replica's `applied_index` is the machine's (`note_applied` moves it for Raft's own entries).
  2. Checks only read; the reference replica is fed only entries some replica applied.

Imports: stdlib, `jsraft.raft`, `jsraft.meta`, `jsraft.replica.meta_adapter`, `jsraft.wal`, siblings.
Reference: meta/machine.py,
replica/meta_adapter.py, DESIGN.md §5.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING

from jsraft.meta import EntryKind as MetaKind
from jsraft.meta import Applied, MalformedMetaSnapshot, MetaStateMachine, PeerAdd, encode_entry
from jsraft.raft import Entry, EntryType, SnapshotMeta
from jsraft.replica.meta_adapter import MetaAdapter
from jsraft.testing.sim.app_mutants import meta_machine_class
from jsraft.testing.sim.meta_clients import PROBE_PREFIX, MetaClients
from jsraft.testing.sim.violation import Violation
from jsraft.wal import Wal

if TYPE_CHECKING:
    from jsraft.testing.sim.config import SimConfig
    from jsraft.testing.sim.node import NodeDriver
    from jsraft.testing.sim.simulator import Simulation


def result_key(applied: object) -> str:
    """What every replica must agree on about one applied entry's outcome."""
    error = getattr(applied, "error", None)
    return "ok" if error is None else f"{type(error).__name__}: {error.description}"


class MetaApp:
    name = "meta"

    def __init__(self, rng: random.Random, config: SimConfig) -> None:
        self.peers = config.node_ids + (config.spare_id,)
        self.mutant = config.mutant
        self.tagged = frozenset(rng.sample(self.peers, rng.randint(0, len(self.peers))))  # placement tags
        self.reference = MetaStateMachine()
        self.results: dict[int, tuple[str, str]] = {}  # index -> (node, outcome) of the first to apply it
        self.checked_index = 0
        self.counts = {"meta_results_compared": 0, "meta_reference_checks": 0}

    def describe(self) -> str:
        return f"meta, peers {','.join(self.peers)}, tagged ssd {','.join(sorted(self.tagged)) or '-'}"

    # --- App interface (module `app`) ------------------------------------------------------------

    def open(self, driver: NodeDriver, index: int, data: bytes | None) -> MetaReplica:
        replica = MetaReplica(self, driver)
        if data is not None:
            replica.install(data, index)
        return replica

    def install(self, driver: NodeDriver, replica: MetaReplica, data: bytes, index: int) -> MetaReplica:
        replica.install(data, index)
        return replica

    def workload(self, sim: Simulation) -> MetaClients:
        return MetaClients(self, sim.rngs.clients, sim.knobs.propose)

    def probe(self, number: int) -> bytes:
        return encode_entry(PeerAdd(peer=f"{PROBE_PREFIX}{number}"))

    def stats(self) -> dict[str, int]:
        return dict(self.counts)

    def on_result(self, node_id: str, index: int, outcome: str) -> None:
        self.counts["meta_results_compared"] += 1
        first = self.results.setdefault(index, (node_id, outcome))
        if first[1] != outcome:
            raise Violation("state-machine-safety", f"{node_id} applied the meta entry at {index} with outcome "
                                                    f"{outcome!r}, {first[0]} with {first[1]!r}")

    def after_step(self, sim: Simulation) -> None:
        """Feed the reference replica what is committed, and hold the replicas' digests to it."""
        digests, reference = sim.checker.digests, self.reference
        for index in _feed(sim.checker.applied, reference, None):
            known = digests.get(index)
            if known is not None:
                self.counts["meta_reference_checks"] += 1
                if known != reference.digest():
                    raise Violation("state-machine-safety", f"replicas' meta digest at {index} is {known:#x}, the "
                                                            f"log applied to a reference replica gives "
                                                            f"{reference.digest():#x}")

    def check_members(self, sim: Simulation, group: tuple[str, ...]) -> None:
        """Each member's snapshot against a fresh reference brought to the member's own applied index.

        Convergence promises every member applied every acknowledged write and the probe, not every entry
        committed since: a member may still lack the latest commit (seed 206: the new leader's NOOP, one
        message away), so members are compared at their own index, in index order."""
        self.after_step(sim)
        final = MetaStateMachine()
        for applied, node_id in sorted((sim.drivers[n].replica.machine.applied_index, n) for n in group):
            machine = sim.drivers[node_id].replica.machine
            for _ in _feed(sim.checker.applied, final, applied):
                pass
            if final.applied_index != applied:
                raise Violation("state-machine-safety", f"{node_id} applied the meta log through {applied}, "
                                                        f"the log is known only through {final.applied_index}")
            if machine.snapshot() != final.snapshot():
                raise Violation("state-machine-safety", f"at the end {node_id}'s meta snapshot differs from the "
                                                        f"reference replica's at {applied}")

    def durable(self, sim: Simulation, driver: NodeDriver):  # type: ignore[no-untyped-def]
        wal, recovered = Wal.open(driver.disk)
        wal.close()
        entries = {e.index: e for e in recovered.entries}
        covered = 0
        if recovered.snapshot is not None:
            probe = MetaStateMachine()
            probe.restore(recovered.snapshot[1])  # a snapshot that does not decode raises: a failure
            covered = probe.applied_index

        def held(index: int, term: int, value: bytes) -> bool:
            if index <= covered:
                return True
            entry = entries.get(index)
            return entry is not None and entry.term == term and entry.data == value

        return held


def _feed(applied: dict[int, tuple[int, EntryType, bytes]], machine: MetaStateMachine,
          to_index: int | None) -> Iterator[int]:
    """Apply the known committed log to `machine` up to `to_index` (None: as far as known), yielding each
    index once applied."""
    while (to_index is None or machine.applied_index < to_index) and machine.applied_index + 1 in applied:
        index = machine.applied_index + 1
        _, entry_type, data = applied[index]
        if entry_type is EntryType.NORMAL:
            machine.apply(index, data)
        else:
            machine.note_applied(index)
        yield index


class MetaReplica:
    def __init__(self, app: MetaApp, driver: NodeDriver) -> None:
        self.app, self.driver, self.node_id = app, driver, driver.node_id
        self.machine = meta_machine_class(app.mutant, self.node_id)()
        self.adapter = MetaAdapter(self.machine, on_applied=self._on_applied, on_restored=_ignore)
        self.leading_term = 0  # the term this node proposed in (its in-flight proposals belong to it)
        self.probes: dict[int, bytes] = {}

    @property
    def applied_index(self) -> int:
        return self.machine.applied_index

    @property
    def digest(self) -> int:
        return self.machine.digest()

    def apply(self, entry: Entry) -> int:
        [applied] = self.adapter.apply([entry])
        if applied is not None:
            if applied.kind is MetaKind.PEER_ADD and applied.target.startswith(PROBE_PREFIX):
                self.probes[entry.index] = entry.data
            self.app.on_result(self.node_id, entry.index, result_key(applied))
        return self.digest

    def _on_applied(self, applied: Applied) -> None:
        return None  # production opens and closes stream groups here; the meta app runs none

    def install(self, data: bytes, index: int) -> None:
        try:
            self.adapter.restore(data)
        except MalformedMetaSnapshot as error:
            raise Violation("state-machine-safety", f"{self.node_id}: meta snapshot {index} does not decode: "
                                                    f"{error}") from None
        if self.machine.applied_index != index:
            raise Violation("state-machine-safety", f"{self.node_id}: meta snapshot {index} holds state applied "
                                                    f"through {self.machine.applied_index}")
        self.leading_term = 0

    def snapshot_ready(self) -> bool:
        return self.adapter.snapshot_ready()

    def snapshot_data(self) -> bytes:
        return self.adapter.snapshot()

    def prepare_install(self, meta: SnapshotMeta) -> None:
        return None

    def holds(self, index: int, value: bytes) -> bool:
        return self.probes.get(index) == value

    def unsettled(self) -> str | None:
        return None

    def step(self, sim: Simulation) -> None:
        """Leadership lost since this node proposed: forget its in-flight proposals (meta/machine.py 2)."""
        node = self.driver.node
        if self.leading_term and (node is None or node.role != "leader" or node.current_term != self.leading_term):
            self.machine.abandon_proposals()
            self.leading_term = 0

    def ready_to_propose(self) -> bool:
        node = self.driver.node
        if (node is None or node.role != "leader" or self.adapter.noop_term != node.current_term
                or self.driver.persisting):
            return False  # (a persisting leader would queue the proposal, not refuse it: wait a step)
        self.leading_term = node.current_term
        return True

    def propose(self, proposal_data: bytes) -> bool:
        """Hand a proposal to Raft; if Raft refuses it, the machine stops counting it."""
        if self.driver.propose(proposal_data) is None:
            self.machine.cancel_proposal(proposal_data)
            return False
        return True


def _ignore(replaced: list[tuple[str, str]]) -> None:
    return None  # production reconciles its stream groups with the restored assignments; none run here
