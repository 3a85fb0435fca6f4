"""`FirstElection`: a new Raft group gets its leader at once, not after an election timeout (layer L5).

Owns: when a group's named first leader stands for election. A stream create is answered once its group
has a leader; waiting out a randomized election timeout (10–20 ticks: 1–2 s at the default tick) was
most of a create's time, against nats-server's ~60 ms. The named leader is the placement's first peer
(`meta.placement` invariant 3: the meta leader decides it, and every replica reads the same assignment),
the only peer of an R1 stream, this node for a standalone node's meta group.

Invariants:
  1. Only the named peer campaigns, and only while its group knows no leader: a group with a leader is
     never disrupted by it. A single-voter group's only member campaigns on every open: no one else
     could lead it, so there is nothing to wait for.
  2. A group with more voters campaigns early only when new (no election yet): after a restart the
     ordinary election timeout stands. It asks again each tick while no leader is known — the other
     replicas may open the group after its first votes went out — for at most an election timeout's
     ticks, after which the ordinary timeout takes over. Pre-vote keeps those retries from raising the
     term where they cannot win.

Imports: L4 (`runtime`). Reference: Raft thesis §3.10 (leadership transfer: TimeoutNow starts an election
at once); nats-server's `jetstream_cluster.go` (the meta leader picks a new group's preferred leader).
"""

from __future__ import annotations

from collections.abc import Sequence

from jsraft.runtime import NodeRuntime


class FirstElection:
    def __init__(self, runtime: NodeRuntime, group: str, node_id: str, peers: Sequence[str],
                 election_ticks: int) -> None:
        self.runtime, self.group = runtime, group
        named = bool(peers) and peers[0] == node_id
        # A new group's members start in term 1 (`RestoredState.bootstrap`); its first election makes it 2.
        fresh = runtime.status(group).raft.current_term <= 1
        # Invariants 1 and 2: how many more ticks this node may ask for an election.
        self.ticks_left = 0 if not named or not (len(peers) == 1 or fresh) else election_ticks
        self.tick()

    def tick(self) -> None:
        """Called at open and every tick of the group's owner: stand for election while no leader is known."""
        if self.ticks_left <= 0:
            return
        self.ticks_left -= 1
        if self.runtime.leader_id(self.group) is None:
            self.runtime.campaign(self.group)
        else:
            self.ticks_left = 0
