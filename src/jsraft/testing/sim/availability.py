"""The availability checker: a replica cut off from a quorum never raises its term on its own.

Owns: `TermInflationChecker`. Why it matters: without pre-vote (thesis §9.6), a replica that cannot reach a
quorum keeps timing out and starting elections, each in a higher term; when the partition heals, its high
term reaches the healthy leader (in a response to the leader's AppendEntries) and deposes it, though the
replica — whose log is behind — could never have won. With pre-vote a replica raises its term only after a
quorum granted its pre-vote, which needs two-way links to a quorum.

The check, from outside the core: a replica is *isolated* while the live voters it has two-way links with,
itself included, are fewer than a quorum of its configuration. If its term rises while it has been isolated
for at least `isolation_ticks_min` ticks, and above every term carried by a message delivered to it since the
isolation began (a TimeoutNow counts as its term + 1: a leader may ask for an election over a one-way link),
it raised the term by itself. `isolation_ticks_min` exceeds the longest message delay, so no answer to a
request sent before the isolation can still be on its way.

Invariants:
  1. Only terms a replica reached while running count; a restart re-reads its term (recovery may raise it
     from the log) without that being a rise.
  2. The checker reads statuses and the network's cut links; it changes nothing.

Imports: stdlib, `jsraft.raft`, siblings. Reference: Raft thesis §9.6; Jepsen NATS 2.12.1 (split-brain after
pauses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.raft import Message, TimeoutNow
from jsraft.testing.sim.violation import Violation

if TYPE_CHECKING:
    from jsraft.testing.sim.network import SimNetwork
    from jsraft.testing.sim.node import NodeDriver


class _Watch:
    __slots__ = ("incarnation", "term", "isolated_since", "heard_term")

    def __init__(self, incarnation: int, term: int) -> None:
        self.incarnation = incarnation
        self.term = term
        self.isolated_since: int | None = None
        self.heard_term = 0


class TermInflationChecker:
    def __init__(self, isolation_ticks_min: int) -> None:
        self.isolation_ticks_min = isolation_ticks_min
        self._watch: dict[str, _Watch] = {}

    def on_deliver(self, node_id: str, message: Message) -> None:
        watch = self._watch.get(node_id)
        if watch is not None:
            term = message.term + 1 if isinstance(message, TimeoutNow) else message.term
            watch.heard_term = max(watch.heard_term, term)

    def after_step(self, now: int, drivers: dict[str, NodeDriver], network: SimNetwork) -> None:
        for node_id, driver in drivers.items():
            node = driver.node
            if node is None:
                continue
            watch = self._watch.get(node_id)
            if watch is None or watch.incarnation != driver.incarnation:
                watch = self._watch[node_id] = _Watch(driver.incarnation, node.current_term)
            voters = node.conf.voters
            live_voters = [v for v in voters if v in drivers and drivers[v].up]
            linked = len(network.linked_both_ways(node_id, live_voters)) + (node_id in voters)
            if node_id not in voters or linked >= len(voters) // 2 + 1:
                watch.isolated_since = None
            elif watch.isolated_since is None:
                watch.isolated_since, watch.heard_term = now, 0
            term = node.current_term
            if (term > watch.term and watch.isolated_since is not None
                    and now - watch.isolated_since >= self.isolation_ticks_min and term > watch.heard_term):
                raise Violation("term-inflation", f"{node_id} raised its term {watch.term} -> {term} while cut "
                                                  f"off from a quorum since t={watch.isolated_since}")
            watch.term = term
