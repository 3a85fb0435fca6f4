"""The deterministic whole-cluster simulator (DESIGN.md §11): one seed drives a cluster of real Raft cores
and real WALs on simulated disks through a hostile network, crashes, power failures and disk corruption on
a minority, applying committed entries to a replicated application (a register, or the real stream or meta
state machine), checking safety invariants after every step and liveness after healing.

Modules, one concept each: `config` (SimConfig, per-seed knobs, sub-generators), `network` (SimNetwork),
`clock` (SimClock), `app` (the replicated application a run drives: `--app register|stream|meta`),
`register` (the default, tiny replicated state machine), `node` (NodeDriver: the production Ready cycle,
`jsraft.replica.GroupCycle`, on a real Wal + SimDisk), `node_storage` (the node level of a node's storage:
`node.json`, the record of the groups it started, the store lock — production's start-up glue),
`storage_faults` (fault kind `storage`: lost group directory, marker or record, a power cut inside the
hard-state witness fsync, a second process on a running node's directory), `atlas` (which disks may be corrupted, and how), `faults` (FaultScheduler), `clients`,
`membership`, `checkers` (SafetyChecker), `availability` (term inflation), `liveness` (the final phase and
end-of-run checks), `violation`, `trace`, `mutants` (Raft mutants), `app_mutants` (broken state
machines), `simulator` (the step loop and `run_seed`), `batch` (many seeds; what the CLI and tests call),
`cli` (`python -m jsraft.testing.sim`). The stream app: `stream_app` (production's `StreamAdapter` on a
FileStore per node), `stream_clients` (workload), `stream_repair` (production's repair decisions,
`jsraft.replica.stream_repair`, with the simulated stream leader as the peer), `stream_checks` (audits,
reference replica); the consumer app (the stream app with consumers): `consumer_app` (the adapter's
`ConsumerReplica`, watched), `consumer_clients`, `consumer_checks`; the meta app: `meta_app` (production's
`MetaAdapter`), `meta_clients`. No Ready loop, stream application or repair of the simulator's own: the
replicas are production's objects, driven synchronously.

Public API: `SimConfig`, `run_seed`, `SeedResult`, `run_batch`, `BatchResult`, `MUTANTS`, `APPS`,
`APP_MUTANTS`, `SimNetwork`,
`SimClock`, `SafetyChecker`, `Violation`, `INVARIANTS`, `parse_faults`.
"""

from jsraft.testing.sim.app import APPS
from jsraft.testing.sim.app_mutants import APP_MUTANTS
from jsraft.testing.sim.batch import BatchResult, run_batch
from jsraft.testing.sim.checkers import SafetyChecker
from jsraft.testing.sim.clock import SimClock
from jsraft.testing.sim.config import FAULT_KINDS, SimConfig, parse_faults
from jsraft.testing.sim.mutants import MUTANTS
from jsraft.testing.sim.network import SimNetwork
from jsraft.testing.sim.simulator import SeedResult, run_seed
from jsraft.testing.sim.violation import INVARIANTS, Violation

__all__ = [
    "APPS", "APP_MUTANTS", "FAULT_KINDS", "INVARIANTS", "MUTANTS",
    "BatchResult", "SafetyChecker", "SeedResult", "SimClock",
    "SimConfig", "SimNetwork", "Violation", "parse_faults", "run_batch", "run_seed",
]
