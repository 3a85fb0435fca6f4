"""`StreamClients`: the stream workload — publishes, deletes, purges, config updates, expiry and audits.

Owns: what clients and the stream leader propose, at whichever node leads with a `StreamLeader` built
under production's conditions (`StreamReplica.stream_leader`). Each step, at that leader:
  - `expire_due(now)` (max_age, by the simulated clock: 10 ms per tick) and `audit_due(now)` are proposed
    when due, as the leader's timers would — in the liveness phase too, where clients have stopped;
  - with the seed's rate, a batch of 1-6 publishes is decided (`replica.publish_pipeline.decide`, the
    production decision: `StreamLeader.decide` behind the pump's gate) and its MSGS entries proposed; payloads are unique (`p<n>:` plus filler), some carry a `Nats-Msg-Id`, a few repeat an
    earlier one (a duplicate: answered with the original's sequence while it is in the window);
  - at lower rates: a DELETE (or erase) of a sequence in the stream, a PURGE (all, a subject, up to a
    sequence, keep N, a subject keeping N), a CONFIG update (per-subject limit changed and back, with an
    increasing meta index; now and then a stale one, which replicas must ignore).
A publish is acknowledged when the MSGS entry carrying it is applied at the node that proposed it (with
the same index and term, as the register's values are); the acknowledged `(seq -> subject, payload)` are
what the end-of-run checks hold every member to (`StreamChecker.check_members`).

Invariants:
  1. Every payload is published once; a sequence is acknowledged for one payload only
     (`state-machine-safety` otherwise), and a duplicate answer names the sequence its msg-id was
     acknowledged with.
  2. A proposal Raft refuses drops the `StreamLeader` (stream_replica invariant 1: rebuilt only once every
     entry of the log applied).
  3. Like the register's clients, nothing is proposed at a leader with `UNCOMMITTED_MAX` entries not yet
     committed.

Imports: stdlib, `jsraft.replica`, `jsraft.stream`, siblings.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING

from jsraft.replica import publish_pipeline
from jsraft.stream import PubOutcome, StreamLeader
from jsraft.stream.entries import MsgsBatch, decode_entry
from jsraft.testing.sim.clients import UNCOMMITTED_MAX
from jsraft.testing.sim.violation import Violation

if TYPE_CHECKING:
    from jsraft.testing.sim.node import NodeDriver
    from jsraft.testing.sim.simulator import Simulation
    from jsraft.testing.sim.stream_app import StreamApp, StreamReplica

SUBJECTS = ("sim.a", "sim.b", "sim.c.x", "sim.c.y")
FILLER_MAX = 300
DELETE_RATE = 0.03
PURGE_RATE = 0.004
CONFIG_RATE = 0.002
MSG_ID_SHARE = 0.3
DUPLICATE_SHARE = 0.05


def msg_id_headers(msg_id: str) -> bytes:
    return f"NATS/1.0\r\nNats-Msg-Id: {msg_id}\r\n\r\n".encode()


class StreamClients:
    def __init__(self, app: StreamApp, rng: random.Random, rate: float) -> None:
        self.app, self.rng, self.rate = app, rng, rate
        self.published = 0
        self.proposed = 0
        self.acknowledged = 0
        self.in_entries: dict[bytes, list[tuple[int, str, bytes, str]]] = {}  # MSGS entry -> its publishes
        self.acked: dict[int, tuple[str, bytes]] = {}  # seq -> (subject, payload)
        self.acked_ids: dict[str, int] = {}  # msg-id -> seq it was acknowledged with
        self.carried_ids: dict[str, set[int]] = {}  # msg-id -> every seq a decided MSGS entry carried it at
        self.msg_ids: list[str] = []
        self.meta_index = 0  # of the last CONFIG proposed, as the meta layer would number it
        self.counts: Counter[str] = Counter()

    def stats(self) -> dict[str, int]:
        return {"publishes_acked": len(self.acked), **{f"stream_{k}": v for k, v in sorted(self.counts.items())}}

    # --- Acknowledgements ------------------------------------------------------------------------

    def on_ack(self, node_id: str, index: int, term: int, value: bytes) -> bool:
        """Publishes are client writes (their MSGS entries are unique); deletes, purges, timers are not."""
        publishes = self.in_entries.pop(value, None)
        if publishes is None:
            return value in self.app.probe_values  # the liveness phase's probes are unique writes too
        self.acknowledged += 1
        for seq, subject, payload, msg_id in publishes:
            known = self.acked.setdefault(seq, (subject, payload))
            if known != (subject, payload):
                raise Violation("state-machine-safety", f"seq {seq} acknowledged for {payload[:12]!r} at {index}, "
                                                        f"and earlier for {known[1][:12]!r}")
            if msg_id:
                self.acked_ids[msg_id] = seq
        return True

    # --- Proposing -------------------------------------------------------------------------------

    def step(self, sim: Simulation) -> None:
        """The leader's timers always run (also in the liveness phase: an unverified replica waits for an
        audit); clients only while `rate` is not 0."""
        found = self._leader(sim)
        if found is None:
            return
        driver, replica, leader = found
        now_ns = self.app.now_ns(sim.clock.now)
        for entry in (leader.expire_due(now_ns), leader.audit_due(now_ns)):
            if entry is not None and not self._propose(driver, replica, entry):
                return
        if not self.rate:
            return
        roll = self.rng.random()
        if roll < self.rate:
            self._publish(driver, replica, leader, now_ns)
        elif roll < self.rate + DELETE_RATE:
            self._delete(driver, replica, leader)
        elif roll < self.rate + DELETE_RATE + PURGE_RATE:
            self._purge(driver, replica, leader)
        elif roll < self.rate + DELETE_RATE + PURGE_RATE + CONFIG_RATE:
            self._config(driver, replica, leader)

    def _leader(self, sim: Simulation) -> tuple[NodeDriver, StreamReplica, StreamLeader] | None:
        for _, driver in sorted(sim.drivers.items()):
            node = driver.node
            if node is None or node.role != "leader" or driver.persisting:
                continue  # (a persisting leader would queue the proposal, not refuse it: wait a step)
            if node.log.last_index - node.log.commit_index >= UNCOMMITTED_MAX:
                continue
            leader = driver.replica.stream_leader()
            if leader is not None:
                return driver, driver.replica, leader
        return None

    def _propose(self, driver: NodeDriver, replica: StreamReplica, entry: bytes) -> bool:
        if driver.propose(entry) is None:
            replica.leader = None  # invariant 2
            self.counts["dropped"] += 1
            return False
        self.proposed += 1
        return True

    def _publish(self, driver: NodeDriver, replica: StreamReplica, leader: StreamLeader, now_ns: int) -> None:
        rng = self.rng
        publishes: list[tuple[str, bytes, bytes]] = []
        for _ in range(1 if rng.random() < 0.6 else rng.randint(2, 6)):
            self.published += 1
            payload = f"p{self.published}:".encode() + b"x" * rng.randrange(FILLER_MAX)
            headers = b""
            if self.msg_ids and rng.random() < DUPLICATE_SHARE:
                headers = msg_id_headers(rng.choice(self.msg_ids[-20:]))
            elif rng.random() < MSG_ID_SHARE:
                self.msg_ids.append(f"m{self.published}")
                headers = msg_id_headers(self.msg_ids[-1])
            publishes.append((rng.choice(SUBJECTS), headers, payload))
        # The production decision (`publish_pipeline.decide`, as `StreamReplica`'s pump makes it); this
        # stream has no consumer that could stop it, and `_leader` found a `StreamLeader`, so it decides.
        decision = publish_pipeline.decide(leader, publishes, now_ns, leader_id=driver.node_id, stopped_reason=None)
        if isinstance(decision, BaseException):
            raise Violation("crash", f"a built StreamLeader refused to decide: {decision!r}")
        carried = self._carried(decision.entries)
        for (subject, headers, payload), outcome in zip(publishes, decision.outcomes):
            self._outcome(subject, headers, payload, outcome, carried)
        for entry in decision.entries:
            if not self._propose(driver, replica, entry):
                return

    def _carried(self, entries: list[bytes]) -> dict[int, bytes]:
        """seq -> payload over the MSGS entries a decision made; each entry remembered for its ack."""
        carried: dict[int, bytes] = {}
        for entry in entries:
            batch = decode_entry(entry)
            assert isinstance(batch, MsgsBatch)
            publishes = []
            for offset, (subject, _, payload, _, msg_id, _) in enumerate(batch.msgs):
                carried[batch.first_seq + offset] = payload
                publishes.append((batch.first_seq + offset, subject, payload, msg_id))
                if msg_id:
                    self.carried_ids.setdefault(msg_id, set()).add(batch.first_seq + offset)
            self.in_entries[entry] = publishes
        return carried

    def _outcome(self, subject: str, headers: bytes, payload: bytes, outcome: PubOutcome,
                 carried: dict[int, bytes]) -> None:
        if outcome.error is not None:
            self.counts["rejected"] += 1
            return
        if outcome.duplicate:
            self.counts["duplicates"] += 1
            msg_id = headers.decode().split("Nats-Msg-Id: ")[1].split("\r\n")[0]
            acked = self.acked_ids.get(msg_id)
            # Once the window let the id go, a later publish may have stored it again: an entry that
            # committed without reaching its proposer (so never acknowledged) is then the one named.
            again = outcome.seq in self.carried_ids.get(msg_id, ()) and outcome.seq > (acked or 0)
            if acked is not None and not outcome.pending and acked != outcome.seq and not again:
                raise Violation("state-machine-safety", f"duplicate {msg_id} answered with seq {outcome.seq}, it "
                                                        f"was acknowledged with seq {acked}")
            return
        if carried.get(outcome.seq) != payload:
            raise Violation("state-machine-safety", f"the leader answered seq {outcome.seq} for {payload[:12]!r}, "
                                                    f"its entries carry {carried.get(outcome.seq, b'')[:12]!r} there")

    def _delete(self, driver: NodeDriver, replica: StreamReplica, leader: StreamLeader) -> None:
        state = replica.machine.store.state()
        if not state.msgs:
            return
        proposal = leader.propose_delete(self.rng.randint(state.first_seq, state.last_seq),
                                         erase=self.rng.random() < 0.2)
        if proposal.entry is not None:
            self.counts["deletes"] += 1
            self._propose(driver, replica, proposal.entry)

    def _purge(self, driver: NodeDriver, replica: StreamReplica, leader: StreamLeader) -> None:
        rng, state = self.rng, replica.machine.store.state()
        kind = rng.choice(("all", "subject", "seq", "keep", "subject-keep"))
        subject = rng.choice(SUBJECTS) if kind.startswith("subject") else None
        seq = rng.randint(state.first_seq, state.last_seq + 1) if kind == "seq" and state.msgs else None
        keep = rng.randint(0, 20) if kind.endswith("keep") else None
        proposal = leader.propose_purge(subject, seq, keep)
        if proposal.entry is not None:
            self.counts["purges"] += 1
            self._propose(driver, replica, proposal.entry)

    def _config(self, driver: NodeDriver, replica: StreamReplica, leader: StreamLeader) -> None:
        """A stream update the meta layer accepted at a newer index; now and then a stale one (ignored)."""
        raw = self.app.raw if replica.machine.raw_config != self.app.raw else self.app.alternate_raw
        self.meta_index += 1
        stale = self.meta_index > 2 and self.rng.random() < 0.2
        proposal = leader.propose_config(raw, self.meta_index - 2 if stale else self.meta_index)
        if proposal.entry is not None:
            self.counts["configs"] += 1
            self._propose(driver, replica, proposal.entry)
