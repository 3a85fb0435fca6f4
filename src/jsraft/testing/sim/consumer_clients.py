"""`ConsumerClients`: the stream workload plus consumers — create, deliver, ack / nak / term / `+WPI`, delete.

Owns: what consumer clients and the stream leader (every consumer's leader, DESIGN §7) propose, on top
of `StreamClients` (publishes, deletes, purges, config updates, expiry, audits), at the node that leads
with a `StreamLeader` built under production's conditions. Each step with clients running, at that leader:
  - now and then a consumer is created (a fresh name each time: durable, pull or push, ack policy
    explicit / all / none, deliver policy all / new / last / last_per_subject, a filter or not, several
    ack waits, max_ack_pending and max_deliver values); the config is parsed against the stream and
    `ConsumerSet.check_create` applied (work-queue rules), as the leader's API handler does, then a
    CREATE op is proposed; rarer: a DELETE, a PAUSE for a while;
  - per consumer, a `ConsumerLeader` (rebuilt when the stream leader or the consumer's entry changes:
    an election, a restore) plans deliveries with the simulated clock's `now_ns` (redeliveries after
    `ack_wait`, rule 1 of consumer/delivery.py), and its ops (DELIVERED, TERM, SKIP) are proposed;
  - each delivered message reaches a client, which after a few ticks acks, naks (now or with a delay),
    terminates, sends `+WPI` then acks, or ignores it (it is redelivered): the ack goes to the node that
    leads then, as an ACK / TERM op (`ConsumerLeader.on_ack` / `forget`) or the DELIVERED record `nak` / `progress`
    return.
Checked here (`acked-redelivered`): a leader never hands out a message its own applied consumer state
counts as delivered and no longer pending (acknowledged, terminated, or skipped).

Invariants:
  1. Consumer proposals are not client writes: `on_ack` counts only publishes and probes.
  2. Every choice comes from the clients' generator; nothing is proposed while clients are stopped.

Imports: stdlib, `jsraft.consumer`, `jsraft.jsapi`, `jsraft.stream`, siblings.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING

from jsraft.consumer import AckOp, ConsumerLeader, DeleteOp, PauseOp, TermOp, encode_ops
from jsraft.consumer.machine import ConsumerEntry, ConsumerSet
from jsraft.errors import JsraftError
from jsraft.jsapi.consumer_config import AckPolicy, parse_consumer_config
from jsraft.stream import StreamLeader
from jsraft.stream.entries import encode_consumer
from jsraft.testing.sim.stream_clients import SUBJECTS, StreamClients
from jsraft.testing.sim.violation import Violation

if TYPE_CHECKING:
    from jsraft.testing.sim.consumer_app import ConsumerApp
    from jsraft.testing.sim.node import NodeDriver
    from jsraft.testing.sim.simulator import Simulation
    from jsraft.testing.sim.stream_app import StreamReplica

CREATE_RATE = 0.02
DELETE_RATE = 0.002
PAUSE_RATE = 0.002
DELIVER_RATE = 0.5
CONSUMERS_MAX = 4
INBOX_PER_STEP_MAX = 8
INBOX_MAX = 200  # answers in flight; no new deliveries beyond (clients are bounded too)
ACTIONS = ("ack",) * 12 + ("nak", "nak-delay", "term", "wpi", "ignore", "ignore")
TICK_NS = 10_000_000  # stream_app's: 10 ms of the leader's clock per tick


class ConsumerClients(StreamClients):
    app: ConsumerApp

    def __init__(self, app: ConsumerApp, rng: random.Random, rate: float) -> None:
        super().__init__(app, rng, rate)
        self.created = 0
        self.leaders: dict[str, tuple[StreamLeader, dict[str, tuple[ConsumerEntry, ConsumerLeader]]]] = {}
        self.inbox: list[tuple[int, str, int, str]] = []  # (due tick, consumer, stream seq, action)

    def on_ack(self, node_id: str, index: int, term: int, value: bytes) -> bool:
        if value in self.in_entries:
            return super().on_ack(node_id, index, term, value)
        return value in self.app.probe_values  # invariant 1

    def step(self, sim: Simulation) -> None:
        super().step(sim)
        if not self.rate:
            return  # invariant 2
        found = self._leader(sim)
        if found is None:
            return
        driver, replica, stream_leader = found
        now_ns = self.app.now_ns(sim.clock.now)
        consumers = replica.adapter.consumers.consumers
        node = driver.node
        settled = node is not None and node.log.applied_index >= node.log.last_index
        leaders = self._consumer_leaders(driver.node_id, stream_leader, consumers, now_ns, settled)
        roll = self.rng.random()
        if roll < CREATE_RATE:
            self._create(driver, replica, consumers, now_ns)
        elif roll < CREATE_RATE + DELETE_RATE + PAUSE_RATE and consumers.consumers:
            name = self.rng.choice(sorted(consumers.consumers))
            pause = roll >= CREATE_RATE + DELETE_RATE
            op = PauseOp(name=name, until_ns=now_ns + 100 * TICK_NS) if pause else DeleteOp(name=name)
            self.counts["consumer_pauses" if pause else "consumer_deletes"] += 1
            self._propose_ops(driver, replica, [op])
        for name, (entry, leader) in sorted(leaders.items()):
            if len(self.inbox) >= INBOX_MAX:
                break
            if self.rng.random() < DELIVER_RATE and not self._deliver(sim, driver, replica, entry, leader, now_ns):
                return
        self._answer(sim, driver, replica, leaders, now_ns)

    def _propose_ops(self, driver: NodeDriver, replica: StreamReplica, ops: list) -> bool:  # type: ignore[type-arg]
        return self._propose(driver, replica, encode_consumer(encode_ops(ops)))

    def _consumer_leaders(self, node_id: str, stream_leader: StreamLeader, consumers: ConsumerSet,
                          now_ns: int, settled: bool) -> dict[str, tuple[ConsumerEntry, ConsumerLeader]]:
        """This node's consumer leaders: rebuilt on a new stream leader (an election) or a new entry (a
        create, a restore). Built only from a state that applied every entry of the node's log (`settled`),
        as the `StreamLeader` is: a leader resynced while its own DELIVERED / ACK ops are in flight would
        otherwise start from a state that has not seen them and hand out acknowledged messages again."""
        known = self.leaders.get(node_id)
        old = known[1] if known is not None and known[0] is stream_leader else {}
        leaders = {}
        for name, entry in consumers.consumers.items():
            if entry.config is None:
                continue
            kept = old.get(name)
            if kept is not None and kept[0] is entry:
                leaders[name] = kept
            elif settled:
                leaders[name] = (entry, ConsumerLeader(self.app.config.name, entry, now_ns))
        self.leaders[node_id] = (stream_leader, leaders)
        return leaders

    def _create(self, driver: NodeDriver, replica: StreamReplica, consumers: ConsumerSet, now_ns: int) -> None:
        if len(consumers.consumers) >= CONSUMERS_MAX:
            return
        rng = self.rng
        self.created += 1
        name = f"c{self.created}"
        ack = rng.choice(("explicit", "explicit", "all", "none"))
        fields: dict[str, object] = {
            "durable_name": name, "ack_policy": ack,
            "deliver_policy": rng.choice(("all", "all", "new", "last", "last_per_subject")),
            "ack_wait": rng.choice((20, 60, 150)) * TICK_NS, "max_ack_pending": rng.choice((5, 20, 100)),
            "max_deliver": rng.choice((-1, 3, 5)),
        }
        if rng.random() < 0.5:
            fields["filter_subject"] = rng.choice(SUBJECTS + ("sim.c.>",))
        if ack != "explicit" or rng.random() < 0.3:
            fields["deliver_subject"] = f"deliver.{name}"
        raw = json.dumps(fields, sort_keys=True).encode()
        try:
            config, raw = parse_consumer_config(raw, stream=replica.machine.config)
            consumers.check_create(name, config)
        except JsraftError as error:
            self.counts[f"consumer_refused_{type(error).__name__}"] += 1
            return
        self.counts["consumer_creates"] += 1
        self._propose_ops(driver, replica, [consumers.create_op(name, config, raw, now_ns)])

    def _deliver(self, sim: Simulation, driver: NodeDriver, replica: StreamReplica, entry: ConsumerEntry,
                 leader: ConsumerLeader, now_ns: int) -> bool:
        try:
            plan = leader.next_deliveries(replica.machine.store, now_ns, self.rng.randint(1, 4))
        except JsraftError:
            # A damaged record met on the way (as server/consumer_service: the store lists the fault now,
            # the leader steps aside for the repair): nothing is delivered this pass.
            self.counts["consumer_delivery_errors"] += 1
            return True
        state = entry.state
        for delivery in plan.deliveries:
            seq = delivery.stream_seq
            if seq <= state.delivered_stream_seq and seq not in state.pending:
                raise Violation("acked-redelivered", f"{driver.node_id} delivers seq {seq} to {entry.name} again, "
                                                     f"its applied state no longer holds it pending "
                                                     f"(delivered {state.delivered_stream_seq}, ack floor "
                                                     f"{state.ack_floor_stream_seq})")
            self.counts["consumer_redeliveries" if delivery.delivery_count > 1 else "consumer_deliveries"] += 1
            if entry.config is not None and entry.config.ack_policy is not AckPolicy.none:
                due = sim.clock.now + self.rng.randint(1, 30)
                self.inbox.append((due, entry.name, seq, self.rng.choice(ACTIONS)))
        self.counts["consumer_gave_up"] += len(plan.gave_up)
        return not plan.ops or self._propose_ops(driver, replica, plan.ops)

    def _answer(self, sim: Simulation, driver: NodeDriver, replica: StreamReplica,
                leaders: dict[str, tuple[ConsumerEntry, ConsumerLeader]], now_ns: int) -> None:
        """Clients' answers that are due reach the leader now (ACK / NAK / TERM / +WPI)."""
        due = [item for item in self.inbox if item[0] <= sim.clock.now][:INBOX_PER_STEP_MAX]
        for item in due:
            self.inbox.remove(item)
            _, name, seq, action = item
            if name not in leaders:
                continue  # deleted, or offline: the answer is dropped, as a client's to a gone consumer
            _, leader = leaders[name]
            ops: list = []  # type: ignore[type-arg]
            if action == "ack":
                ops.append(AckOp(name=name, seqs=(seq,)))
                leader.on_ack(seq)
            elif action == "term":
                ops.append(TermOp(name=name, seqs=(seq,)))
                leader.forget([seq])
            elif action in ("nak", "nak-delay"):
                delay_ns = self.rng.randint(1, 50) * TICK_NS if action == "nak-delay" else None
                ops.append(leader.nak(seq, delay_ns, now_ns))
            elif action == "wpi":
                ops.append(leader.progress(seq, now_ns))
                self.inbox.append((sim.clock.now + self.rng.randint(1, 20), name, seq, "ack"))
            ops = [op for op in ops if op is not None]
            self.counts[f"consumer_{action}"] += 1
            if ops and not self._propose_ops(driver, replica, ops):
                return
