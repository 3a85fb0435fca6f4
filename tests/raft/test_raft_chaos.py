"""Randomized safety and liveness of the Raft core on a hostile in-memory network and disk.

Method: for each seed, a 3- or 5-node `Cluster` runs 1,500 random steps — ticks, proposals, reordered /
dropped / duplicated deliveries, partitions, compactions, crashes that lose unsynced writes, and restarts
that find a corrupt record, a lost WAL tail or a rolled-back stretch of stale (CRC-valid) copies, on a
minority of nodes at a time. After every step we check election safety (one leader per term), state
machine safety (no two nodes ever apply different data at one index) and the `Ready` contract (inside
`Cluster.process_ready`). Then the network heals and
the cluster must converge, with writes still arriving: one leader, nobody repairing, every node applied
the same entries, and every entry any node applied is still there.
"""

from __future__ import annotations

import random

import pytest
from raft_network import Cluster

from jsraft.errors import JsraftError

SEEDS = range(24)
STEPS = 1500


class Checker:
    def __init__(self) -> None:
        self.leader_of_term: dict[int, str] = {}
        self.applied: dict[int, str] = {}  # index -> data, across all nodes and all time

    def check(self, cluster: Cluster) -> None:
        for node_id, node in cluster.nodes.items():
            if node_id not in cluster.down and node.role == "leader":
                other = self.leader_of_term.setdefault(node.current_term, node_id)
                assert other == node_id, f"two leaders in term {node.current_term}: {other}, {node_id}"
        for node_id, app in cluster.apps.items():
            for index, data in app.by_index.items():
                known = self.applied.setdefault(index, data)
                assert known == data, f"{node_id} applied {data!r} at {index}, another node {known!r}"


def _instrument(cluster: Cluster) -> None:
    """Record what each application applied at which index (App keeps only values)."""
    for app in cluster.apps.values():
        _wrap(app)


def _wrap(app) -> None:
    if hasattr(app, "by_index"):
        return
    app.by_index = {}
    original_apply, original_install = app.apply, app.install

    def apply(entries, _orig=original_apply, _app=app):
        entries = list(entries)
        _orig(entries)
        for entry in entries:
            _app.by_index[entry.index] = f"{entry.term}:{entry.type.name}:{entry.data!r}"

    def install(snapshot, _orig=original_install, _app=app):
        _orig(snapshot)

    app.apply, app.install = apply, install


def _deliver_random(cluster: Cluster, rng: random.Random) -> None:
    if not cluster.queue:
        return
    queue = list(cluster.queue)
    position = rng.randrange(len(queue)) if rng.random() < 0.3 else 0
    message = queue.pop(position)
    cluster.queue.clear()
    cluster.queue.extend(queue)
    roll = rng.random()
    if roll < 0.1:
        return  # dropped
    if roll < 0.15:
        cluster.queue.append(message)  # duplicated: delivered again later
    cluster.queue.appendleft(message)
    delivered = cluster.deliver_one()
    if delivered is not None:
        while cluster.process_ready(delivered.to_id):
            pass


def _restart_with_damage(cluster: Cluster, node_id: str, rng: random.Random) -> None:
    storage = cluster.storages[node_id]
    durable = storage.durable
    roll = rng.random()
    candidates = [e.index for e in durable.entries if e.index not in durable.faulty]
    if roll < 0.4 and _roll_back_somewhere(storage, rng):
        pass
    elif roll < 0.6 and candidates:
        storage.corrupt(rng.choice(candidates))
    elif roll < 0.8 and durable.entries:
        storage.truncate_log(rng.randrange(durable.snapshot_index, durable.last_index + 1))
    cluster.restart(node_id)
    _wrap(cluster.apps[node_id])


def _roll_back_somewhere(storage, rng: random.Random) -> bool:
    """Revert a short stretch to versions the node held before, if any (a rolled-back write)."""
    entries = storage.durable.entries
    candidates = [e.index for e in entries if len(storage.history.get(e.index, [])) > 1]
    if not candidates:
        return False
    first = rng.choice(candidates)
    return storage.roll_back(first, min(first + rng.randrange(3), entries[-1].index))


def _random_step(cluster: Cluster, rng: random.Random, ids: list[str]) -> None:
    roll = rng.random()
    live = [n for n in ids if n not in cluster.down]
    if roll < 0.10:
        for node_id in live:  # the clock advances everywhere
            cluster.tick(node_id)
    elif roll < 0.20:
        cluster.tick(rng.choice(live))  # one clock runs fast
    elif roll < 0.30:
        leader = cluster.leader()
        if leader is not None:
            try:
                cluster.nodes[leader].propose(f"v{rng.randrange(10**6)}".encode())
            except JsraftError:
                pass  # a leader may refuse (transfer in progress, bounds); that is fine here
    elif roll < 0.31:
        members = ids[:]
        rng.shuffle(members)
        cut = rng.randrange(1, len(members))
        cluster.partition = [set(members[:cut]), set(members[cut:])]
    elif roll < 0.33:
        cluster.partition = None
    elif roll < 0.345:
        damaged = [n for n in ids if cluster.nodes[n].repairing or n in cluster.down]
        if len(damaged) < (len(ids) - 1) // 2 and live:
            cluster.crash(rng.choice(live))
    elif roll < 0.375:
        if cluster.down:
            _restart_with_damage(cluster, rng.choice(sorted(cluster.down)), rng)
    elif roll < 0.385:
        _compact(cluster, rng.choice(live))
    else:
        for node_id in live:
            while cluster.process_ready(node_id):
                pass
        for _ in range(rng.randrange(1, 6)):
            _deliver_random(cluster, rng)


def _compact(cluster: Cluster, node_id: str) -> None:
    app = cluster.apps[node_id]
    node = cluster.nodes[node_id]
    if node.log.snapshot_index < app.applied_index <= node.log.stable_index:
        node.compact(app.applied_index, app.snapshot_data())
        _persist_compaction(cluster, node_id)


def _persist_compaction(cluster: Cluster, node_id: str) -> None:
    from jsraft.raft import Snapshot

    node = cluster.nodes[node_id]
    for state in (cluster.storages[node_id].written, cluster.storages[node_id].durable):
        state.snapshot = Snapshot(meta=node.snapshot_meta, data=node.snapshot_data)
        state.entries = [e for e in state.entries if e.index > node.snapshot_meta.index]
        state.faulty = {f for f in state.faulty if f > node.snapshot_meta.index}


@pytest.mark.parametrize("seed", SEEDS)
def test_random_faults_keep_safety_and_converge(seed: int) -> None:
    rng = random.Random(seed)
    size = 3 if seed % 2 == 0 else 5
    ids = [f"n{i}" for i in range(1, size + 1)]
    cluster = Cluster(ids, seed=seed, config={"election_ticks": 6, "max_entries_per_msg": 3,
                                              "max_inflight_msgs": 4, "snapshot_chunk_bytes": 16})
    _instrument(cluster)
    checker = Checker()
    for _ in range(STEPS):
        _random_step(cluster, rng, ids)
        checker.check(cluster)
    # Liveness: heal everything and let time pass.
    cluster.partition = None
    for node_id in sorted(cluster.down):
        cluster.restart(node_id)
        _wrap(cluster.apps[node_id])
    for _ in range(300):
        leader = cluster.leader()
        if leader is not None and any(node.repairing for node in cluster.nodes.values()):
            # A replica whose watermark covers superseded entries above the leader's log leaves repairing
            # only once the log grows past it (rule 3 as specified), so keep writing.
            cluster.nodes[leader].propose(b"heal")
        cluster.run(1)
        checker.check(cluster)
        if _converged(cluster):
            break
    assert _converged(cluster), "\n".join(str(n.status()) for n in cluster.nodes.values())
    _check_nothing_applied_was_lost(cluster, checker)


def _check_nothing_applied_was_lost(cluster: Cluster, checker: Checker) -> None:
    leader = cluster.nodes[cluster.leader()]
    for index, data in checker.applied.items():
        if index > leader.log.snapshot_index:
            entry = leader.log.entry_at(index)
            assert f"{entry.term}:{entry.type.name}:{entry.data!r}" == data, f"applied entry {index} lost"


def _converged(cluster: Cluster) -> bool:
    leader = cluster.leader()
    if leader is None:
        return False
    target = cluster.nodes[leader].log.commit_index
    return all(not node.repairing and cluster.apps[n].applied_index == target
               for n, node in cluster.nodes.items())


@pytest.mark.parametrize("seed", range(8))
def test_rolled_back_writes_are_never_applied_nor_trusted(seed: int) -> None:
    """Deposed leaders leave superseded versions in their WALs; rolling a stretch back to them must never
    let a stale entry be applied, served, or counted, anywhere."""
    rng = random.Random(seed)
    ids = ["n1", "n2", "n3"]
    cluster = Cluster(ids, seed=seed, config={"election_ticks": 5, "max_entries_per_msg": 2})
    _instrument(cluster)
    checker = Checker()
    cluster.elect("n1")
    rolled_back = 0
    for _ in range(12):
        old_leader = cluster.leader()
        if old_leader is None:
            cluster.run(20)
            continue
        cluster.partition = [{old_leader}, set(ids) - {old_leader}]
        for i in range(rng.randrange(1, 4)):
            cluster.nodes[old_leader].propose(f"lost{i}".encode())
        for _ in range(40):
            cluster.run(1)
            checker.check(cluster)
            if cluster.leader() not in (None, old_leader):
                break
        new_leader = cluster.leader()
        if new_leader not in (None, old_leader):
            for i in range(rng.randrange(1, 4)):
                cluster.nodes[new_leader].propose(f"kept{rng.randrange(10**6)}".encode())
        cluster.partition = None
        cluster.run(10)
        checker.check(cluster)
        with_history = [n for n in ids if any(len(v) > 1 for v in cluster.storages[n].history.values())]
        victim = rng.choice(with_history or ids)
        cluster.crash(victim)
        rolled_back += _roll_back_somewhere(cluster.storages[victim], rng)
        cluster.restart(victim)
        _wrap(cluster.apps[victim])
        cluster.run(10)
        checker.check(cluster)
    assert rolled_back > 0
    for _ in range(100):
        cluster.run(1)
        checker.check(cluster)
        if _converged(cluster):
            break
    assert _converged(cluster)
    _check_nothing_applied_was_lost(cluster, checker)
