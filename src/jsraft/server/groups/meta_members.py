"""`MetaMembers`: who may be in the meta group — a removed server that comes back (layer L5).

Owns: the meta leader's membership duty (record each member's storage UUID; readmit a removed server
that returns wiped; tell one that returns with its old disk that it stays out) and, on every node, the
"you were removed" notice it may receive, which `/healthz` reports.

The rule (issue #7, CHAOS.md S11; nats-server's `peer-remove` semantics, where a removed server must come
back with a new identity). A server is identified by its name *and* its storage UUID (made once, when its
store directory is formatted: `identity`); peers learn it in the transport HELLO.
  1. While a member is online the meta leader records its storage UUID in the meta log (`PEER_SEEN`).
     `SERVER.REMOVE` (a `REMOVE_NODE` conf change, then `PEER_REMOVE`) keeps, in the meta state, the UUID
     the removed server had (`MetaState.removed_servers`; "" if it was never seen).
  2. A removed server that connects with that same UUID stays out: its disk may hold a log from before
     its removal, and letting it vote on it is what removing it was for. The leader sends it a notice
     (`meta.removed`, at most every `NOTICE_INTERVAL_S`); it logs it, and its `/healthz` answers 503 with
     the reason until its directory is wiped. It cannot disturb the group: it is in no configuration the
     others use, so nobody replicates to it, and its pre-votes are refused by members that hear from a
     live leader (pre-vote + check-quorum stickiness, raft/election.py invariant 3) and by any member whose
     log is ahead of its own — pre-vote changes no term, so the others' terms do not move.
  3. A removed server that connects with another UUID (wiped, or never seen) is readmitted, one step per
     tick, each recorded in the meta log, so a new meta leader continues where the last one stopped:
     `SERVER_READMIT` (forget the removal, record the new UUID) → `ADD_LEARNER` (it catches up from the
     leader's log or snapshot, voting on nothing) → `PROMOTE_LEARNER` (the core refuses it until the
     learner is caught up and not repairing: membership invariant 2) → `PEER_ADD` (`MetaService`
     registers every voter; streams may be placed on it again).
  4. A server the configuration lacks but the meta state still lists as a peer is in the middle of a
     `SERVER.REMOVE`: nothing is done for it (asking for the removal again completes it).

Invariants:
  1. Only the meta leader proposes, one proposal or conf change at a time, and only after its term's
     NOOP applied (`MetaService.ready`); every decision comes from the committed meta state, the Raft
     configuration and the UUIDs in the links' HELLOs (`plan` is pure).
  2. A notice is acted on only when it names this node's own storage UUID, so a wiped node never takes
     a notice meant for the disk it replaced.

Imports: stdlib, attrs, L0, L1 (`raft`), L3 (`meta`), L4 (`runtime`), trio.
Reference: DESIGN.md §4 (learners, pre-vote, check-quorum), §5; Raft thesis §4.2.1 (removed servers);
nats-server `server/jetstream_cluster.go` processRemovePeer / processAddPeer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from jsraft.errors import JsraftError
from jsraft.meta import MetaStateMachine, Proposal
from jsraft.raft.membership import ConfChange, ConfChangeType
from jsraft.runtime import NodeRuntime

log = logging.getLogger("jsraft.server.meta")

NOTICE_INTERVAL_S = 2.0  # how often the leader tells a removed server, still connected, that it is out
NOTICE_TIMEOUT_S = 2.0


@attrs.frozen
class Seen:
    peer: str
    storage_uuid: str


@attrs.frozen
class Readmit:
    peer: str
    storage_uuid: str


@attrs.frozen
class Notify:
    peer: str
    storage_uuid: str


Step = Seen | Readmit | ConfChange


@attrs.frozen(kw_only=True)
class RemovedNotice:
    """What this node was told: it was removed from the meta group and its storage may not rejoin."""

    leader: str
    term: int
    storage_uuid: str

    def describe(self) -> str:
        return (f"this server was removed from the cluster (meta leader {self.leader}, term {self.term}); "
                f"its storage {self.storage_uuid} may not rejoin: wipe its store directory to be readmitted")


def plan(*, online: Mapping[str, str], voters: tuple[str, ...], learners: tuple[str, ...],
         peers: Mapping[str, Any], storage_uuids: Mapping[str, str],
         removed: Mapping[str, str]) -> tuple[Step | None, tuple[Notify, ...]]:
    """The leader's next proposal (rules 1, 3; None: nothing to do) and the notices to send (rule 2).

    `online`: name -> storage UUID of every connected server, this one included."""
    members = set(voters) | set(learners)
    notices: list[Notify] = []
    steps: list[Step] = []
    for peer, uuid in sorted(online.items()):
        if peer in removed:
            if removed[peer] == uuid:
                notices.append(Notify(peer, uuid))
            elif peer not in members:
                steps.append(Readmit(peer, uuid))
        elif peer in members:
            if storage_uuids.get(peer) != uuid:
                steps.append(Seen(peer, uuid))
            elif peer in learners:
                steps.append(ConfChange(type=ConfChangeType.PROMOTE_LEARNER, node_id=peer))
        elif peer in peers:
            continue  # a SERVER.REMOVE half done (rule 4)
        elif storage_uuids.get(peer) == uuid:
            steps.append(ConfChange(type=ConfChangeType.ADD_LEARNER, node_id=peer))
        else:
            steps.append(Readmit(peer, uuid))
    return (steps[0] if steps else None), tuple(notices)


class MetaMembers:
    def __init__(self, *, node_id: str, storage_uuid: str, group: str, runtime: NodeRuntime,
                 meta: MetaStateMachine, online_uuids: Callable[[], dict[str, str]],
                 propose: Callable[[Proposal], Awaitable[Any]],
                 call_peer: Callable[..., Awaitable[Any]]) -> None:
        self.node_id = node_id
        self.storage_uuid = storage_uuid
        self.group = group
        self.runtime = runtime
        self.meta = meta
        self.online_uuids = online_uuids
        self.propose = propose
        self.call_peer = call_peer
        # Kept for the life of the process: the disk it names may never rejoin, and a wiped store
        # directory means a new process with a new UUID.
        self.notice: RemovedNotice | None = None
        self._noticed_at_s: dict[str, float] = {}

    async def lead(self, nursery: trio.Nursery) -> str | None:
        """One pass of the leader's duty (the caller checked `MetaService.ready`); what it did, for logs."""
        status = self.runtime.status(self.group).raft
        step, notices = plan(online=self.online_uuids(), voters=status.voters, learners=status.learners,
                             peers=self.meta.peers(), storage_uuids=self.meta.storage_uuids(),
                             removed=self.meta.removed_servers())
        now_s = time.monotonic()
        for notice in notices:
            if now_s - self._noticed_at_s.get(notice.peer, -NOTICE_INTERVAL_S) >= NOTICE_INTERVAL_S:
                self._noticed_at_s[notice.peer] = now_s
                nursery.start_soon(self._notify, notice, status.current_term)
        if step is None:
            return None
        try:
            if isinstance(step, ConfChange):
                await self.runtime.propose_conf_change(self.group, step)
            elif isinstance(step, Seen):
                await self.propose(self.meta.propose_peer_seen(step.peer, step.storage_uuid))
            else:
                log.warning("meta: server %s returned with new storage %s: readmitting it",
                            step.peer, step.storage_uuid)
                await self.propose(self.meta.propose_server_readmit(step.peer, step.storage_uuid))
        except JsraftError as error:  # a change in flight, a learner not caught up, leadership lost: later
            log.debug("meta: membership step %s not taken yet: %s", step, error)
            return None
        return repr(step)

    async def _notify(self, notice: Notify, term: int) -> None:
        args = {"leader": self.node_id, "term": term, "storage_uuid": notice.storage_uuid}
        try:
            await self.call_peer(notice.peer, "meta.removed", args, timeout_s=NOTICE_TIMEOUT_S)
        except JsraftError as error:
            log.debug("meta: telling removed server %s failed: %s", notice.peer, error)

    def on_notice(self, args: dict[str, Any]) -> dict[str, Any]:
        """`meta.removed` from the meta leader (invariant 2)."""
        notice = RemovedNotice(leader=str(args["leader"]), term=int(args["term"]),
                               storage_uuid=str(args["storage_uuid"]))
        if notice.storage_uuid != self.storage_uuid:
            return {"accepted": False}
        if self.notice is None:
            log.error("node %s: %s", self.node_id, notice.describe())
        self.notice = notice
        return {"accepted": True}
