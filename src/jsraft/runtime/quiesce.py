"""Quiescent groups and the coalesced node beat that keeps them safe (layer L4).

Owns: `Quiescence` — which groups on this node are quiesced (not ticked: no heartbeats, no election
timer), per-peer node liveness, and the beat: one small message per peer per tick that replaces the
per-group heartbeats of every quiesced group (CockroachDB's quiescence with node liveness) — and the
beat's wire format (`encode_beat`, `decode_beat`).

How a group goes quiet: a leader that `raft.quiesce.leader_may_quiesce` for `quiet_ticks` ticks in a row
(counting only members whose node is live, and only with a live majority) stops being ticked and tells
each member in its next beat ("quiesce G at term T, index I"). A follower that `follower_may_quiesce`
for that stops being ticked too; one that may not answers "wake G", and the leader goes back to ticking.

Invariants:
  1. Waking: a quiesced group is ticked again on any proposal, leadership transfer, campaign or
     snapshot request, and on any Raft message except a leader's own heartbeat answers that report
     nothing new (a successful `AppendEntriesResponse` in its term at its last index) — those only
     trail the last heartbeat and would otherwise wake it forever.
  2. Liveness is per peer and times out: a peer is live while a beat from it arrived in the last
     `timeout_ticks` ticks of this node from the same incarnation (`boot`). Counted in this node's
     ticks, not wall time, like Raft's own timeouts: a stalled event loop (its peers' beats unread in
     the sockets) then sees one tick pass, not every peer lapse at once and wake every quiesced group —
     which, with 1,000 streams on a loaded machine, made the stall worse each time. When a peer lapses
     or restarts, every group quiesced here that depends on it wakes — a follower on its leader's node,
     a leader on any other member's node — so a dead leader node is replaced by an election, and a
     partitioned leader ticks again and steps down by check-quorum. A leader quiesces only while a
     majority of its voters (itself included) is live and every live member has its whole log; a member
     that is not live is not waited for, and when it is heard again (a beat after a lapse, or a first
     one) every group quiesced here that depends on it wakes, so a returning node is caught up.
  3. Nothing here changes Raft state: the core is only not ticked; term, vote and log rules are the
     core's alone.
  4. A quiesced leader whose group closes here tells its members to wake (a closed replica never
     heartbeats again and must not keep them asleep while this node stays live).

Imports: L0, L1 (`raft`), stdlib, attrs. Never `transport`: beats leave through the `send_beat`
function the runtime was given. Reference: CockroachDB `replica_raft_quiesce.go`, "node liveness".
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import attrs

from jsraft.raft.core import RaftNode
from jsraft.raft.messages import AppendEntriesResponse, Message
from jsraft.raft.quiesce import follower_may_quiesce, leader_may_quiesce, members
from jsraft.raft.status import Role
from jsraft.runtime.errors import BadBeat

# The transport group name beats travel under (not a valid Raft group name: it cannot collide).
BEAT_GROUP = "$beat"
SendBeatFn = Callable[[str, bytes], bool]


@attrs.frozen(kw_only=True)
class Beat:
    """One node's beat to one peer: its incarnation and the quiesce/wake notices since the last beat."""

    boot: int
    quiesce: tuple[tuple[str, int, int], ...] = ()  # (group, term, index) this node quiesced as leader
    wake: tuple[str, ...] = ()  # groups the peer should tick again


def encode_beat(beat: Beat) -> bytes:
    return json.dumps({"b": beat.boot, "q": [list(q) for q in beat.quiesce], "w": list(beat.wake)},
                      separators=(",", ":")).encode()


def decode_beat(payload: bytes | memoryview) -> Beat:
    """Raises `BadBeat` for anything but a well-formed beat."""
    try:
        doc = json.loads(bytes(payload))
        boot, quiesce, wake = doc["b"], doc["q"], doc["w"]
        if type(boot) is not int or not isinstance(quiesce, list) or not isinstance(wake, list):
            raise TypeError("fields of the wrong type")
        notices = []
        for item in quiesce:
            group, term, index = item
            if type(group) is not str or type(term) is not int or type(index) is not int:
                raise TypeError("a quiesce notice of the wrong type")
            notices.append((group, term, index))
        if not all(type(group) is str for group in wake):
            raise TypeError("a wake notice of the wrong type")
        return Beat(boot=boot, quiesce=tuple(notices), wake=tuple(wake))
    except (ValueError, TypeError, KeyError) as error:
        raise BadBeat(f"malformed node beat: {error}") from None


def wakes(node: RaftNode, message: Message) -> bool:
    """Invariant 1: does `message` wake a quiesced replica?"""
    return not (isinstance(message, AppendEntriesResponse) and node.role is Role.LEADER and message.success
                and message.term == node.current_term and message.match_index == node.log.last_index)


@attrs.define
class _Quiet:
    leader: str  # the group's leader (this node's id when it leads)
    depends_on: tuple[str, ...]  # the peers whose lapse wakes it (invariant 2)


class Quiescence:
    """The quiesced groups of one node, its peers' liveness and the beats to them. Trio thread only."""

    def __init__(self, node_id: str, send_beat: SendBeatFn, *, timeout_ticks: int, quiet_ticks: int,
                 rng: random.Random) -> None:
        self.node_id = node_id
        self.timeout_ticks = timeout_ticks
        self.ticks = 0  # this node's ticks so far (`tick`): the clock of invariant 2
        self.quiet_ticks = quiet_ticks
        self.boot = rng.getrandbits(62)
        self._send_beat = send_beat
        self._quiet: dict[str, _Quiet] = {}
        self._dependents: dict[str, set[str]] = {}  # peer -> quiesced groups that depend on it
        self._streak: dict[str, int] = {}  # group -> ticks in a row its leader could have quiesced
        self._heard: dict[str, tuple[int, int]] = {}  # peer -> (the tick its last beat arrived in, its boot)
        self._lapsed: set[str] = set()  # peers already reported lapsed (until they are heard again)
        self._peers: set[str] = set()  # every peer of every group seen here: they get beats
        self._out_quiesce: dict[str, list[tuple[str, int, int]]] = {}
        self._out_wake: dict[str, list[str]] = {}

    # --- Queries ------------------------------------------------------------------------------------

    def is_quiet(self, group: str) -> bool:
        return group in self._quiet

    def quiet_groups(self) -> list[str]:
        return sorted(self._quiet)

    def live(self, peer: str) -> bool:
        heard = self._heard.get(peer)
        return heard is not None and self.ticks - heard[0] < self.timeout_ticks and peer not in self._lapsed

    # --- Leader side --------------------------------------------------------------------------------

    def leader_tick(self, name: str, node: RaftNode, idle: bool) -> bool:
        """Called for an awake group at each tick, before it is ticked. True: it is now quiesced (do not
        tick it). `idle`: the runtime has nothing queued, in flight or unsettled for it."""
        peers = members(node)
        self._peers.update(peers)
        # A member whose node is not live is not waited for (raft.quiesce invariant 1): after a node dies its
        # groups quiesce again on the survivors, and wake when it is heard again (invariant 2).
        if not (idle and leader_may_quiesce(node, self.live)):
            self._streak.pop(name, None)
            return False
        streak = self._streak.get(name, 0) + 1
        if streak < self.quiet_ticks:
            self._streak[name] = streak
            return False
        self._streak.pop(name, None)
        self._set_quiet(name, _Quiet(leader=self.node_id, depends_on=peers))
        notice = (name, node.current_term, node.log.last_index)
        for peer in peers:
            self._out_quiesce.setdefault(peer, []).append(notice)
        return True

    # --- Waking -------------------------------------------------------------------------------------

    def wake(self, name: str) -> bool:
        """Take `name` out of quiescence; True if it was quiesced (the runtime ticks it again)."""
        quiet = self._quiet.pop(name, None)
        if quiet is None:
            return False
        for peer in quiet.depends_on:
            dependents = self._dependents.get(peer)
            if dependents is not None:
                dependents.discard(name)
        return True

    def closed(self, name: str) -> None:
        """Group `name` closed here (invariant 4)."""
        quiet = self._quiet.get(name)
        if quiet is not None and quiet.leader == self.node_id:
            for peer in quiet.depends_on:
                self._out_wake.setdefault(peer, []).append(name)
        self.wake(name)

    def _set_quiet(self, name: str, quiet: _Quiet) -> None:
        self._quiet[name] = quiet
        for peer in quiet.depends_on:
            self._dependents.setdefault(peer, set()).add(name)

    # --- Beats --------------------------------------------------------------------------------------

    def on_beat(self, peer: str, payload: bytes | memoryview, lookup: Callable[[str], RaftNode | None]) -> list[str]:
        """A beat from `peer`. `lookup(group)`: its core, or None (not open here, or closed).
        Returns the groups to wake (a restarted peer's dependents, wake notices). Raises `BadBeat`."""
        beat = decode_beat(payload)
        to_wake: list[str] = []
        previous = self._heard.get(peer)
        if previous is not None and previous[1] != beat.boot:
            to_wake.extend(self._dependents.get(peer, ()))  # the peer restarted: what it knew is gone
        elif not self.live(peer):
            # Back after a lapse (or heard for the first time): the leaders that quiesced without it tick
            # again and bring it up to date now, not at its first election timeout (invariant 2).
            to_wake.extend(self._dependents.get(peer, ()))
        self._heard[peer] = (self.ticks, beat.boot)
        self._lapsed.discard(peer)
        self._peers.add(peer)
        for name in beat.wake:
            quiet = self._quiet.get(name)
            if quiet is not None and peer in quiet.depends_on:
                to_wake.append(name)
        for name, term, index in beat.quiesce:
            node = lookup(name)
            quiet = self._quiet.get(name)
            if quiet is not None and quiet.leader == peer:
                continue  # already quiet under this leader (a repeated notice)
            if node is not None and name not in to_wake and quiet is None:
                if follower_may_quiesce(node, term, peer, index):
                    self._set_quiet(name, _Quiet(leader=peer, depends_on=(peer,)))
                    continue
            self._out_wake.setdefault(peer, []).append(name)  # not here, or not yet caught up: keep going
        return to_wake

    def tick(self) -> list[str]:
        """One tick of this node passed. Invariant 2: the groups to wake because a peer they depend on
        went unheard for `timeout_ticks` ticks."""
        self.ticks += 1
        to_wake: list[str] = []
        for peer, (heard_at, _) in self._heard.items():
            if peer not in self._lapsed and self.ticks - heard_at >= self.timeout_ticks:
                self._lapsed.add(peer)
                to_wake.extend(self._dependents.get(peer, ()))
        return to_wake

    def send_beats(self) -> None:
        """One beat to every known peer, carrying the notices queued for it."""
        for peer in sorted(self._peers):
            beat = Beat(boot=self.boot, quiesce=tuple(self._out_quiesce.pop(peer, ())),
                        wake=tuple(self._out_wake.pop(peer, ())))
            self._send_beat(peer, encode_beat(beat))
