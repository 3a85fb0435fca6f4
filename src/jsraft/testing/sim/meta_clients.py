"""`MetaClients`: the meta workload — stream and consumer assignments and peer changes, at the meta leader.

Owns: what administrators ask the meta leader, each step with the seed's rate, at a node that leads and
has applied its term's NOOP (`MetaReplica.ready_to_propose`): create a stream (names `S0`..`S7`, subjects
`s<k>.>`, sometimes also `shared.x` so that two streams overlap, R1 or R3, sometimes placed on peers
tagged `ssd`), update one (limits, replicas, description), delete one, create or delete a consumer, add a
peer (the cluster's nodes, and `x7` which never runs) or remove one. While fewer than three peers are
known, it adds peers. The leader's machine decides (`MetaStateMachine.propose_*`): a refusal
(`JsraftError`) or an answer without an entry is counted; an entry is proposed to Raft, and cancelled in
the machine when Raft refuses it.

An acknowledgement (the entry applied where it was proposed) is a client write the checker holds the
cluster to — the first time those entry bytes are acknowledged (a peer added again, or a second delete of
the same name, repeats earlier bytes).

Invariants:
  1. Every choice comes from the clients' generator (simulator invariant 1); `online` is the set of
     running nodes, in sorted order.
  2. Nothing is proposed at a leader with `UNCOMMITTED_MAX` entries not yet committed.

Imports: stdlib, `jsraft.errors`, `jsraft.meta`, siblings.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import TYPE_CHECKING

from jsraft.errors import JsraftError
from jsraft.meta import MetaStateMachine, Proposal
from jsraft.testing.sim.clients import UNCOMMITTED_MAX

if TYPE_CHECKING:
    from jsraft.testing.sim.meta_app import MetaApp, MetaReplica
    from jsraft.testing.sim.simulator import Simulation

PROBE_PREFIX = "probe-"  # `MetaApp.probe`: peers nothing else adds
STREAMS = 8
CONSUMERS = ("c0", "c1", "c2")
EXTRA_PEER = "x7"
TICK_NS = 10_000_000
EPOCH_NS = 1_700_000_000_000_000_000
OPS = (("create", 30), ("update", 20), ("delete", 10), ("consumer", 12), ("unconsume", 6), ("peer_add", 12),
       ("peer_remove", 6))


class MetaClients:
    def __init__(self, app: MetaApp, rng: random.Random, rate: float) -> None:
        self.app, self.rng, self.rate = app, rng, rate
        self.proposed = 0
        self.acknowledged = 0
        self.acked_values: set[bytes] = set()
        self.fields: dict[str, dict[str, object]] = {}  # stream -> the config last asked for
        self.counts: Counter[str] = Counter()

    def stats(self) -> dict[str, int]:
        return {f"meta_{key}": value for key, value in sorted(self.counts.items())}

    def on_ack(self, node_id: str, index: int, term: int, value: bytes) -> bool:
        self.acknowledged += 1
        if value in self.acked_values:
            return False
        self.acked_values.add(value)
        return True

    def step(self, sim: Simulation) -> None:
        if not self.rate or self.rng.random() >= self.rate:
            return
        replica = self._leader(sim)
        if replica is None:
            return
        machine = replica.machine
        names, weights = zip(*OPS)
        op = "peer_add" if len(machine.peers()) < 3 else self.rng.choices(names, weights)[0]
        online = sorted(n for n, d in sim.drivers.items() if d.up)
        now_ns = EPOCH_NS + sim.clock.now * TICK_NS
        try:
            proposal = getattr(self, f"_{op}")(machine, set(online), now_ns)
        except JsraftError as error:
            self.counts[f"refused_{type(error).__name__}"] += 1
            return
        if proposal is None or proposal.data is None or proposal.in_flight:
            self.counts["answered_without_entry"] += 1
            return
        if replica.propose(proposal.data):
            self.proposed += 1
            self.counts[op] += 1
        else:
            self.counts["dropped"] += 1

    def _leader(self, sim: Simulation) -> MetaReplica | None:
        for _, driver in sorted(sim.drivers.items()):
            node = driver.node
            if node is None or node.role != "leader":
                continue
            if node.log.last_index - node.log.commit_index < UNCOMMITTED_MAX and driver.replica.ready_to_propose():
                return driver.replica
        return None

    # --- Requests ---------------------------------------------------------------------------------

    def _stream_name(self, machine: MetaStateMachine) -> str | None:
        names = [a.name for a in machine.streams()]
        return self.rng.choice(names) if names else None

    def _create(self, machine: MetaStateMachine, online: set[str], now_ns: int) -> Proposal:
        rng = self.rng
        number = rng.randrange(STREAMS)
        name = f"S{number}"
        subjects = [f"s{number}.>"] + (["shared.x"] if rng.random() < 0.15 else [])
        fields: dict[str, object] = {"name": name, "subjects": subjects, "num_replicas": rng.choice((1, 3, 3)),
                                     "max_msgs": rng.choice((-1, 100, 1000))}
        if rng.random() < 0.15:
            fields["placement"] = {"tags": ["ssd"]}
        self.fields[name] = fields
        return machine.propose_create_stream(name, json.dumps(fields).encode(), now_ns=now_ns, online=online)

    def _update(self, machine: MetaStateMachine, online: set[str], now_ns: int) -> Proposal | None:
        name = self._stream_name(machine)
        if name is None or name not in self.fields:
            return None
        fields = dict(self.fields[name])
        change = self.rng.choice(("max_msgs", "num_replicas", "description"))
        if change == "max_msgs":
            fields["max_msgs"] = self.rng.choice((-1, 50, 500))
        elif change == "num_replicas":
            fields["num_replicas"] = self.rng.choice((1, 3))
        else:
            fields["description"] = f"d{now_ns % 1000}"
        self.fields[name] = fields
        return machine.propose_update_stream(name, json.dumps(fields).encode(), online=online)

    def _delete(self, machine: MetaStateMachine, online: set[str], now_ns: int) -> Proposal | None:
        name = self._stream_name(machine)
        return machine.propose_delete_stream(name) if name is not None else None

    def _consumer(self, machine: MetaStateMachine, online: set[str], now_ns: int) -> Proposal | None:
        stream = self._stream_name(machine)
        if stream is None:
            return None
        name = self.rng.choice(CONSUMERS)
        config = json.dumps({"durable_name": name, "ack_policy": self.rng.choice(("explicit", "none"))})
        return machine.propose_create_consumer(stream, name, config.encode(), now_ns=now_ns)

    def _unconsume(self, machine: MetaStateMachine, online: set[str], now_ns: int) -> Proposal | None:
        stream = self._stream_name(machine)
        if stream is None:
            return None
        consumers = [c.name for c in machine.consumers(stream)]
        return machine.propose_delete_consumer(stream, self.rng.choice(consumers)) if consumers else None

    def _peer_add(self, machine: MetaStateMachine, online: set[str], now_ns: int) -> Proposal:
        peer = self.rng.choice(self.app.peers + (EXTRA_PEER,))
        return machine.propose_peer_add(peer, tags=("ssd",) if peer in self.app.tagged else ())

    def _peer_remove(self, machine: MetaStateMachine, online: set[str], now_ns: int) -> Proposal | None:
        peers = sorted(machine.peers())
        return machine.propose_peer_remove(self.rng.choice(peers), online=online) if peers else None
