"""`StorageFaults`: the fault kind `storage` — a node's storage lost as a whole or in part, a power cut inside
the hard-state witness write, and a second process on a running node's store directory (issue #14).

Owns: these faults' timeline and their trace lines, and `STORAGE_MUTANTS`. Kinds:

  lose-group    while the node is down, its group's whole directory is gone (WAL, hard state, snapshots,
                the `group.json` marker and, for the stream app, the store): an operator's `rm -r` of
                `streams/<S>/`. Production must open it as a member that lost its storage (the record of
                started groups says it started here): repairing, no vote until repaired, never a bootstrap.
  lose-raft     the same for the Raft part only (`raft/`: WAL, hard state, snapshots, marker) while the
                stream's store survives (stream and consumer apps).
  lose-marker   only the group marker is gone; the WAL is intact (a restart from the WAL, the record vouches
                that the group started here).
  lose-record   the node-level record of started groups (`groups.rec`) is gone while `node.json` stays:
                every group counts as possibly started (`runtime.group_record` decision 2). Drawn alone or
                together with `lose-group` (then only the lost record's rule keeps the group from
                bootstrapping).
  witness-cut   the power goes out inside the fsync of the hard-state witness (`wal.hardstate`): the slot
                write is torn by the crash (`SimDisk.arm_power_cut`, then `crash(torn=True)`); half the time
                every other running node loses power at the same instant (a coordinated power cut). Any
                node, not only the minority: a torn witness is not damage (its segment record was fsynced
                first), so the durability checker holds a node outside the minority to "recovers undamaged".
  second-process  a second opener of a running node's store directory (`jsraft serve` twice): production's
                lock (`disk.lock.acquire_store_lock`, `node_storage`) must refuse it with `StoreLocked`;
                if it does not, the run fails (`store-lock`) before the second process writes anything.

The loss kinds strike only the run's loss minority — the fault atlas when it names any node, else
`(nodes - 1) // 2` or fewer initial voters drawn here — so a majority keeps intact durable copies (atlas
invariant 1); those nodes count as corruptible for the checkers (`minority`). Loss is applied at a restart,
while the node is down, before production's start-up reads anything.

Mutants (`--mutant`, real Raft core): `forget-lost-groups` — the record never says a group lost its storage
(`node_storage.ForgetfulRecord`), so a lost directory bootstraps a new log at term 0 that may vote for a
stale candidate; `no-store-lock` — nodes never take their store lock, so a second opener is not refused;
`no-vote-ceiling` — the record never raises a group's vote-term ceiling (`node_storage.CeilinglessRecord`),
so a lost directory has no bound on its lost votes; since the term query (`raft.term_query`) it then waits for
every voter's term, which covers it (tests/sim/test_sim_mutants.py: it fails its seeds again only with the
query disabled as well).

Invariants:
  1. Every choice comes from this module's own generator, seeded from the run's seed without drawing from
     any other: a seed on which no storage fault fires runs exactly as it did before this kind existed.
  2. No new fault once the fault scheduler stopped (the liveness phase); armed power cuts are disarmed then.
  3. A node powered off here has exactly one pending restart (fault scheduler invariant 4).

Imports: stdlib, `jsraft.errors`, `jsraft.runtime.group_record`, `jsraft.replica`, `jsraft.wal.format`,
`jsraft.testing.simdisk`, siblings. Reference: issue #14; CHAOS.md S13.
"""

from __future__ import annotations

import collections
import os
import random
from typing import TYPE_CHECKING

from jsraft.errors import StoreLocked
from jsraft.replica import GROUP_MARKER
from jsraft.runtime.group_record import GROUP_RECORD_FILE
from jsraft.testing.sim.violation import Violation
from jsraft.wal.format import HARD_STATE_FILE

if TYPE_CHECKING:
    from jsraft.testing.sim.config import SimConfig
    from jsraft.testing.sim.simulator import Simulation
    from jsraft.testing.simdisk import SimDisk

STORAGE_MUTANTS = {
    "forget-lost-groups": "the record of started groups never reports a lost group (a lost directory bootstraps)",
    "no-store-lock": "nodes never take their store lock (a second process on a node's directory is not refused)",
    "no-vote-ceiling": "the record never raises a vote-term ceiling (a lost directory waits for every voter's term)",
}
_STREAM_DIR = "stream"  # the stream app's store and install mark (`stream_app.STREAM_DIR`)
_LOSSES = (("lose-group", 3), ("lose-raft", 2), ("lose-marker", 2), ("lose-record", 2), ("lose-record+group", 1))


class StorageFaults:
    def __init__(self, config: SimConfig, atlas: frozenset[str]) -> None:
        self.rng = rng = random.Random(f"jsraft-sim-storage-{config.seed}")  # invariant 1
        self.active = "storage" in config.faults
        ids = config.node_ids
        if atlas:
            self.minority = atlas
        elif self.active:
            self.minority = frozenset(rng.sample(ids, rng.randint(1, (config.nodes - 1) // 2)))
        else:
            self.minority = frozenset()
        self.loss = rng.choice((0.1, 0.25, 0.5)) if self.active else 0.0  # per restart of a minority node
        self.witness_cut = rng.choice((0.001, 0.002, 0.004)) if self.active else 0.0  # per step
        self.second_process = rng.choice((0.002, 0.005)) if self.active else 0.0  # per step
        self.counts = {"storage_losses": 0, "witness_cuts": 0, "second_process_refused": 0}
        self.fired: collections.Counter[str] = collections.Counter()  # kind (module docstring) -> times
        self._armed: set[str] = set()

    def describe(self) -> str:
        return (f"storage faults: minority {','.join(sorted(self.minority)) or 'none'}, loss {self.loss}, "
                f"witness cut {self.witness_cut}, second process {self.second_process}")

    def loses(self, node_id: str) -> bool:
        return self.active and node_id in self.minority

    # --- Each step ------------------------------------------------------------------------------------

    def step(self, sim: Simulation) -> None:
        if not self.active:
            return
        if not sim.faults.enabled:  # invariant 2
            for node_id in sorted(self._armed):
                sim.drivers[node_id].disk.disarm_power_cuts()
            self._armed.clear()
            return
        up = [node_id for node_id in sorted(sim.drivers) if sim.drivers[node_id].up]
        if not up:
            return
        if self.rng.random() < self.witness_cut:
            node_id = self.rng.choice(up)
            sim.drivers[node_id].disk.arm_power_cut(HARD_STATE_FILE)
            self._armed.add(node_id)
            sim.trace.add(f"fault: armed a power cut inside {node_id}'s next hard-state witness fsync")
        if self.rng.random() < self.second_process:
            self._second_process(sim, self.rng.choice(up))

    def _second_process(self, sim: Simulation, node_id: str) -> None:
        storage = sim.drivers[node_id].storage
        try:
            lock = storage.second_open()
        except StoreLocked as refused:
            # The refusal names the directory and the holder (this process: the simulated nodes run in it).
            if storage.lock_dir not in str(refused) or f"(pid {os.getpid()})" not in str(refused):
                raise Violation("store-lock", f"the refusal does not name {storage.lock_dir} and its holder: "
                                              f"{refused}") from None
            self.counts["second_process_refused"] += 1
            self.fired["second-process"] += 1
            # Not the message itself in the trace: it holds a temporary path and a pid (trace invariant).
            sim.trace.add(f"fault: a second process opened {node_id}'s store directory: refused "
                          f"(StoreLocked, err_code {refused.err_code}, naming the directory and the holder's pid)")
            return
        lock.release()
        raise Violation("store-lock", f"a second process took the store lock of {node_id} while it runs")

    # --- A power cut inside the witness fsync (called by the driver) ----------------------------------

    def on_power_cut(self, sim: Simulation, node_id: str) -> None:
        """`node_id` crashed (torn) inside its armed witness fsync; schedule its restart, and half the time
        cut the power of every other running node at the same instant."""
        self._armed.discard(node_id)
        self.counts["witness_cuts"] += 1
        self.fired["witness-cut"] += 1
        down = self.rng.randint(1, sim.knobs.restart_delay_max_ticks)
        coordinated = self.rng.random() < 0.5
        sim.trace.add(f"fault: power cut inside {node_id}'s hard-state witness fsync"
                      f"{' (coordinated: every running node)' if coordinated else ''}")
        self._power_off(sim, node_id, down, crashed=True)
        if coordinated:
            for other in sorted(sim.drivers):
                if sim.drivers[other].up:
                    self._power_off(sim, other, down + self.rng.randint(0, 3), crashed=False)

    def _power_off(self, sim: Simulation, node_id: str, down: int, *, crashed: bool) -> None:
        if not crashed:
            sim.drivers[node_id].crash(torn=self.rng.random() < 0.5)
        self._armed.discard(node_id)
        sim.clock.forfeit(node_id)
        sim.faults.restart_at[node_id] = sim.clock.now + down  # invariant 3
        sim.faults.counts["crashes"] += 1

    # --- At rest, before a restart (called by the driver) ---------------------------------------------

    def at_rest(self, sim: Simulation, node_id: str) -> None:
        """Maybe lose part of `node_id`'s storage before it starts again (module docstring)."""
        if not (self.loses(node_id) and sim.faults.enabled) or self.rng.random() >= self.loss:
            return
        kinds, weights = zip(*_LOSSES)
        kind = self.rng.choices(kinds, weights)[0]
        driver = sim.drivers[node_id]
        done = [what for what in kind.removeprefix("lose-").split("+")
                if _lose(what, driver.disk, driver.storage.root)]
        if done:
            self.counts["storage_losses"] += 1
            self.fired.update(f"lose-{what}" for what in done)
            sim.trace.add(f"fault: {node_id} lost its {' and its '.join(_NAMES[what] for what in done)} at rest")


_NAMES = {"group": "group directory", "raft": "Raft directory (the store kept)", "marker": "group marker",
          "record": "record of started groups"}


def _lose(what: str, disk: SimDisk, root: SimDisk) -> bool:
    """Remove one part of a stopped node's storage durably; False if there was nothing to remove."""
    if what == "record":
        return _remove(root, [GROUP_RECORD_FILE] if root.exists(GROUP_RECORD_FILE) else [])
    if what == "marker":
        return _remove(disk, [GROUP_MARKER] if disk.exists(GROUP_MARKER) else [])
    names = disk.listdir("")
    if what == "raft":
        if _STREAM_DIR not in names:
            return False  # no store beside the Raft files (register, meta): lose-group covers it
        names = [name for name in names if name != _STREAM_DIR]
    return _remove(disk, names)


def _remove(disk: SimDisk, names: list[str]) -> bool:
    for name in names:
        if disk.is_dir(name):
            disk.remove_tree(name)
        else:
            disk.remove(name)
    disk.sync_dir("")  # the removal is durable: the node is down, nothing else is unsynced
    return bool(names)
