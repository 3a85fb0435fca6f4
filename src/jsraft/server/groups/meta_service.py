"""`MetaService`: the meta group on this node — its adapter, and the meta leader's duties (layer L5).

Owns: opening `$meta` (voters: every configured node, less those `SERVER.REMOVE` took out, plus those
readmitted after it — `meta_members`) with its snapshot interval — the runtime snapshots
the meta state machine and compacts the meta WAL every `snapshot_every_entries` applied entries, and a
follower behind the compacted log gets the leader's snapshot (InstallSnapshot) —, knowing when this node
may propose (leader, its term's NOOP applied), registering the meta voters as peers (`PEER_ADD`)
in each term and whenever a voter is not one (a readmitted server), running the membership duty
(`meta_members.MetaMembers`) every `MEMBERS_INTERVAL_TICKS`, and turning admin requests into meta
proposals answered from their applied results.

Invariants:
  1. `propose_*` is called only when `ready()`: this node leads and has applied its term's NOOP
     (meta/leader.py precondition).
  2. A proposal Raft refused is cancelled (`cancel_proposal`); on losing leadership every in-flight
     proposal is abandoned (`abandon_proposals`) — the meta leader's bookkeeping never outlives its term.
  3. A request is answered from the `Applied` of its own entry, so "created" means committed.
  4. A create whose only peer is this node starts building the stream's directory (`prepare_stream`)
     as soon as its entry is handed to the meta group — with the group's name when the entry is in the
     log already, so the tree's `group` file is synced with it (`stream_format` invariant 7) — so that
     the directory's fsyncs overlap the entry's; nothing is named or opened
     before the entry applied (`streams` invariant 7), and a create that fails leaves only a temporary
     directory. Not for a replicated stream: its answer waits for a quorum of replicas to open and elect,
     and a named first leader that opened ahead of its peers campaigns before they have the group, so
     its first votes may be lost and the election then waits a tick (one run each, load 10–16: R3
     creates 112 ms median with R3 preparation against `main`'s 74; limited to R1, 111 against 114).
  5. A node in lame duck mode (`lame_ducks`: `ClusterUrls.lame_ducks`) gets no new replica: placement — a
     create, a scale-up, the spare for a peer removed — and the meta leadership handed on at a server
     remove see the online nodes without it, as nats-server leaves a server in lame duck mode out (its
     shutdown event marks it offline). The replicas it has stay: a node on its way out is not drained.
  6. A create that places a replica on this node is refused with 10023 (`InsufficientResources`, nats-server's
     answer) before it is proposed when this node lacks the file descriptors for one more replica
     (`replica_descriptors.Headroom.check_room`), so running out never takes the node's clients with it; its
     proposal is cancelled, so the meta log never hears of it. Replicas placed on other nodes are theirs
     to survive (`streams` invariant 11).

Imports: stdlib, L0, L1 (`raft`), L3 (`meta`), L4 (`runtime`), trio, server siblings.
Reference: meta/machine.py "How the runtime drives it"; DESIGN.md §5.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import trio

from jsraft.errors import JsraftError, invariant
from jsraft.meta.errors import InsufficientResources
from jsraft.meta import (
    META_SNAPSHOT_ENTRIES, Applied, ClusterNoPeers, ClusterServerNotMember, CreateStream, MetaStateMachine,
    Proposal, StreamAssignment, group_name,
)
from jsraft.raft.config import RaftConfig
from jsraft.raft.errors import NotLeader
from jsraft.raft.membership import ConfChange, ConfChangeType
from jsraft.raft.status import Role
from jsraft.runtime import NodeRuntime
from jsraft.server.errors import NoLeader
from jsraft.server.groups.first_election import FirstElection
from jsraft.replica.meta_adapter import MetaAdapter
from jsraft.server.groups.meta_members import MetaMembers
from jsraft.server.groups.replica_descriptors import Headroom

log = logging.getLogger("jsraft.server.meta")

META_GROUP = "$meta"
MEMBERS_INTERVAL_TICKS = 5


class MetaService:
    def __init__(self, *, node_id: str, voters: tuple[str, ...], runtime: NodeRuntime, meta: MetaStateMachine,
                 adapter: MetaAdapter, online: Callable[[], Collection[str]], tick_s: float,
                 snapshot_every_entries: int | None = META_SNAPSHOT_ENTRIES, storage_uuid: str = "",
                 online_uuids: Callable[[], dict[str, str]] = dict,
                 call_peer: Callable[..., Awaitable[Any]] | None = None) -> None:
        """`snapshot_every_entries`: None snapshots only when asked (`NodeRuntime.request_snapshot`).
        `online_uuids`: name -> storage UUID of each connected server, this one included; `call_peer`:
        `Rpc.call` (both for `MetaMembers`)."""
        self.node_id = node_id
        self.voters = voters
        self.runtime = runtime
        self.meta = meta
        self.adapter = adapter
        self.online = online
        self.tick_s = tick_s
        self.snapshot_every_entries = snapshot_every_entries
        # `StreamManager.prepare`: build a stream's directory ahead while its create entry is made durable
        # (name, config bytes, the group's name when known).
        self.prepare_stream: Callable[[str, bytes, str | None], None] | None = None
        self.lame_ducks: Callable[[], Collection[str]] = tuple  # the nodes in lame duck mode (invariant 5)
        self.headroom = Headroom()  # whether this node has the descriptors for one more replica (invariant 6)
        self._led_term = 0  # the term this node last led in (to abandon proposals when it ends)
        self._peers_term = 0  # the term in which the configured peers were last registered
        self.members = MetaMembers(node_id=node_id, storage_uuid=storage_uuid, group=META_GROUP, runtime=runtime,
                                   meta=meta, online_uuids=online_uuids, propose=self._propose,
                                   call_peer=call_peer or _no_call)

    async def open(self, raft_config: RaftConfig, disk) -> None:
        await self.runtime.open_group(META_GROUP, voters=self.voters, state_machine=self.adapter,
                                      raft_config=raft_config, disk=disk,
                                      snapshot_every_entries=self.snapshot_every_entries)
        self.first_election = FirstElection(self.runtime, META_GROUP, self.node_id, self.voters,
                                            raft_config.election_ticks)

    def leader_id(self) -> str | None:
        return self.runtime.status(META_GROUP).raft.leader_id

    def ready(self) -> bool:
        status = self.runtime.status(META_GROUP).raft
        return status.role is Role.LEADER and self.adapter.noop_term == status.current_term

    async def run(self) -> None:
        """Follow leadership every tick: abandon proposals of a lost term, register peers in a new one
        (and whenever a voter is not a peer yet); run the membership duty alongside."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run_members, nursery)
            while True:
                self.first_election.tick()
                status = self.runtime.status(META_GROUP).raft
                if status.role is Role.LEADER:
                    self._led_term = status.current_term
                    unregistered = not set(self.meta_voters()) <= set(self.meta.peers())
                    if self.ready() and (self._peers_term != status.current_term or unregistered):
                        if await self._register_peers():
                            self._peers_term = status.current_term
                elif self._led_term:
                    self._led_term = 0
                    self.meta.abandon_proposals()
                await trio.sleep(self.tick_s)

    async def _run_members(self, nursery: trio.Nursery) -> None:
        while True:
            if self.ready():
                done = await self.members.lead(nursery)
                if done is not None:
                    log.info("meta: membership step %s", done)
            await trio.sleep(self.tick_s * MEMBERS_INTERVAL_TICKS)

    async def _register_peers(self) -> bool:
        known = self.meta.peers()
        for peer in self.meta_voters():
            if peer in known:
                continue
            try:
                await self._propose(self.meta.propose_peer_add(peer))
            except JsraftError as error:
                log.info("meta: registering peer %s failed: %s", peer, error)
                return False
        return True

    def meta_voters(self) -> tuple[str, ...]:
        """The meta group's voters now: the configured nodes less those `server_remove` took out (the Raft
        configuration, not the config file, so a removed server is not registered again by a new leader)."""
        return tuple(self.runtime.status(META_GROUP).raft.voters)

    async def wait_ready(self, timeout_s: float = 2.0) -> None:
        """Wait until this leader may propose (invariant 1); `NotLeader` if it does not lead."""
        with trio.move_on_after(timeout_s):
            while True:
                status = self.runtime.status(META_GROUP).raft
                if status.role is not Role.LEADER:
                    raise NotLeader(status.leader_id)
                if self.ready() and set(self.meta_voters()) <= set(self.meta.peers()):
                    return
                await trio.sleep(self.tick_s / 4)
        raise NoLeader("the meta leader is not ready yet")

    async def _propose(self, proposal: Proposal, on_log: Callable[[int], None] | None = None) -> Applied | None:
        """Propose, wait for the entry's `Applied`. `on_log(index)`: called once the entry was handed to
        the meta group, with its log index (0 while it waits for the core to be free)."""
        if proposal.data is None:
            return None
        if proposal.in_flight:
            raise NoLeader("the same request is in flight; retry")
        try:
            submitted = await self.runtime.submit(META_GROUP, proposal.data)
            if on_log is not None:
                on_log(submitted.index)
            result = await self.runtime.outcome(META_GROUP, submitted)
        except JsraftError:
            self.meta.cancel_proposal(proposal.data)
            raise
        if isinstance(result, Applied) and result.error is not None:
            raise result.error
        return result if isinstance(result, Applied) else None

    # --- Requests (on the meta leader) -----------------------------------------------------------------

    async def create_stream(self, name: str, raw: bytes) -> StreamAssignment:
        await self.wait_ready()
        proposal = self.meta.propose_create_stream(name, raw, now_ns=time.time_ns(), online=self.placeable())
        if proposal.in_flight:
            return await self._wait_stream(name)
        entry, prepare = proposal.entry, self.prepare_stream
        if isinstance(entry, CreateStream) and self.node_id in entry.peers:
            try:
                self.headroom.check_room()  # invariant 6
            except InsufficientResources:
                self.meta.cancel_proposal(proposal.data or b"")
                raise
        on_log: Callable[[int], None] | None = None
        if isinstance(entry, CreateStream) and list(entry.peers) == [self.node_id] and prepare is not None:
            def on_log(index: int) -> None:
                # Invariant 4: the stream's only replica's directory is built while the entry is made
                # durable, named when the entry's index (the group's name) is known already.
                prepare(name, entry.config, group_name(name, index) if index else None)
        applied = await self._propose(proposal, on_log)
        if applied is None:
            invariant(isinstance(proposal.existing, StreamAssignment), "an idempotent create names the stream")
            return proposal.existing
        invariant(applied.stream is not None, "an applied create carries its assignment")
        return applied.stream

    async def update_stream(self, name: str, raw: bytes) -> StreamAssignment:
        await self.wait_ready()
        proposal = self.meta.propose_update_stream(name, raw, online=self.placeable())
        if proposal.in_flight:
            return await self._wait_stream(name)
        applied = await self._propose(proposal)
        if applied is None:
            return self.meta.stream(name)
        invariant(applied.stream is not None, "an applied update carries its assignment")
        return applied.stream

    async def stream_peer_remove(self, name: str, peer: str) -> StreamAssignment:
        """Move stream `name` off `peer` (a spare takes its place, else the set shrinks); the stream's
        leader then changes the group's membership to the new set (`stream_members`)."""
        await self.wait_ready()
        proposal = self.meta.propose_stream_peer_remove(name, peer, online=self.placeable())
        applied = await self._propose(proposal)
        invariant(applied is not None and applied.stream is not None, "an applied update carries its assignment")
        return applied.stream

    async def server_remove(self, peer: str) -> None:
        """`$JS.API.SERVER.REMOVE`: take server `peer` out of the meta group's voters, then out of the
        meta state's peers, re-placing every stream that had it (a spare, else a smaller set). Each step
        is skipped once done, so a request that failed half-way is completed by asking again. The meta
        leader does not remove itself: it hands leadership to another voter and answers `NotLeader`,
        which the caller's router retries at the new leader."""
        await self.wait_ready()
        voters = self.meta_voters()
        if peer not in voters and peer not in self.meta.peers():
            raise ClusterServerNotMember()
        if peer == self.node_id:
            others = sorted(voter for voter in voters if voter != peer and voter in self.placeable())
            if not others:
                raise ClusterNoPeers("no other voter is online to take over the meta group")
            self.runtime.transfer_leadership(META_GROUP, others[0])
            raise NotLeader(None)
        if peer in voters:
            await self.runtime.propose_conf_change(META_GROUP, ConfChange(type=ConfChangeType.REMOVE_NODE,
                                                                          node_id=peer))
        if peer in self.meta.peers():
            await self._propose(self.meta.propose_peer_remove(peer, online=self.placeable()))

    def placeable(self) -> set[str]:
        """The online nodes that may take a new replica or the meta leadership (invariant 5)."""
        return set(self.online()) - set(self.lame_ducks())

    async def delete_stream(self, name: str) -> None:
        await self.wait_ready()
        self.meta.stream(name)  # StreamNotFound (10059) before anything is proposed
        await self._propose(self.meta.propose_delete_stream(name))

    async def _wait_stream(self, name: str, timeout_s: float = 5.0) -> StreamAssignment:
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    return self.meta.stream(name)
                except JsraftError:
                    await trio.sleep(self.tick_s / 4)
        raise NoLeader(f"stream {name!r} was proposed but has not applied yet")


async def _no_call(*args: Any, **kwargs: Any) -> Any:
    raise NoLeader("this meta service has no peer calls")
