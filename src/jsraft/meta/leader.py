"""The meta leader's side: validate a request and turn it into an entry to propose (DESIGN §5).

Owns: `Proposer` — placement of new replicas, the limits, and the in-flight proposals (`Pending`) that
every check counts, so two requests that would conflict are refused even when neither has committed.

Counting in-flight proposals is conservative on purpose: a pending create claims its name, subjects,
a stream slot and its peers' assets; a pending update claims its new subjects in addition to the old
ones and its peers in addition to the current ones, and the next update of that stream is judged
against it; a pending peer remove takes that peer out of placement; a pending delete frees nothing
until it commits (and blocks a create of the same name meanwhile).

Invariants:
  1. A proposal is made only after every check passed against committed state plus `Pending`, and it
     is added to `Pending` in the same call, so the next request sees it.
  2. `Pending` is bounded (`pending_max`); an op leaves it when its entry is applied, when the runtime
     cancels it (the Raft proposal was dropped), or all at once when leadership is lost.
  3. Nothing here changes committed state.

Precondition (the runtime's): propose only after this leader has applied every entry committed before
its term (its no-op entry). After that no older leader's entry can still commit, so committed state
plus `Pending` is exactly what the entries will apply to, and the checks here are exact. (Apply
re-checks existence and overlap anyway, so the state stays valid even if the precondition is broken.)

Imports: L0, L1 (`jsapi`), attrs, `meta.*`. Reference: nats-server `server/jetstream_cluster.go`
(jsClusteredStreamRequest, jsClusteredStreamUpdateRequest, processRemovePeer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator

import attrs

from jsraft.errors import BadRequest
from jsraft.jsapi import StreamConfig, stream_required_level, without_dynamic_metadata
from jsraft.meta.assignment import (
    ConsumerAssignment,
    StreamAssignment,
    decode_consumer_config,
    parse_config,
    same_consumer_config,
    same_stream_config,
)
from jsraft.meta.entries import (
    CreateConsumer,
    CreateStream,
    DeleteConsumer,
    DeleteStream,
    MetaEntry,
    PeerAdd,
    PeerRemove,
    PeerSeen,
    Replacement,
    ServerReadmit,
    UpdateStream,
    encode_entry,
    entry_problem,
)
from jsraft.meta.errors import (
    ClusterNoPeers,
    ClusterPeerNotMember,
    ConsumerAlreadyExists,
    ConsumerOffline,
    MaximumConsumersLimit,
    MaximumStreamsLimit,
    MetaProposalsFull,
    StreamNameExist,
    StreamOffline,
)
from jsraft.meta.placement import LazyAssets, PeerInfo, place, replace_peer
from jsraft.meta.rules import check_no_overlap, check_update
from jsraft.meta.state import MetaState

# The meta consumer entries are not proposed by the running node: consumers are replicated through their
# stream's group (DESIGN §7), whose replicas compute a consumer's level from its config and pause state
# (`jsapi.consumer_required_level`). An entry proposed here checks only that the config is a JSON object.
CONSUMER_REQUIRED_LEVEL = 0


@attrs.frozen(kw_only=True)
class Proposal:
    """The leader's decision for one request.

    - `data` set, `in_flight` false: pass `data` to `RaftNode.propose` and answer the client from the
      `Applied` that `MetaStateMachine.apply` returns for it.
    - `in_flight` true: the same request is already proposed (`data` is that entry); wait for it.
    - `data` None: nothing to propose; answer now with `existing` (an idempotent create or update; None
      for a peer add that changes nothing).
    """

    data: bytes | None = None
    entry: MetaEntry | None = None
    existing: StreamAssignment | ConsumerAssignment | None = None
    in_flight: bool = False


@attrs.frozen
class PendingOp:
    data: bytes
    entry: MetaEntry
    config: StreamConfig | None = None  # the parsed config of a create/update stream


class Pending:
    """The leader's proposals not yet applied (invariant 2)."""

    def __init__(self, pending_max: int) -> None:
        self.pending_max = pending_max
        self.ops: list[PendingOp] = []

    def add(self, op: PendingOp) -> None:
        if len(self.ops) >= self.pending_max:
            raise MetaProposalsFull(f"too many meta proposals in flight ({self.pending_max}); retry later")
        self.ops.append(op)

    def discard(self, data: bytes) -> bool:
        """Drop the first op proposed with exactly `data` (its entry was applied or cancelled)."""
        for position, op in enumerate(self.ops):
            if op.data == data:
                del self.ops[position]
                return True
        return False

    def of(self, kind: type | tuple[type, ...]) -> Iterator[PendingOp]:
        return (op for op in self.ops if isinstance(op.entry, kind))


def _same_config(a: StreamConfig, b: StreamConfig) -> bool:
    return without_dynamic_metadata(a) == without_dynamic_metadata(b)


class Proposer:
    def __init__(self, state: MetaState, *, clustered: bool, max_streams: int, pending_max: int) -> None:
        self.state = state  # replaced by `MetaStateMachine.restore`
        self.clustered = clustered
        self.max_streams = max_streams  # -1 or 0: unlimited (nats-server counts only a positive limit)
        self.pending = Pending(pending_max)

    # --- Views: committed state plus in-flight proposals ----------------------------------------

    def claims(self, subjects: tuple[str, ...]) -> Iterator[tuple[str, tuple[str, ...]]]:
        """Every claim that may overlap `subjects` (`MetaState.claims_meeting`), in-flight ones last."""
        yield from self.state.claims_meeting(subjects)
        for op in self.pending.of((CreateStream, UpdateStream)):
            if op.config is not None:
                yield op.entry.name, op.config.subjects

    def assets(self) -> Counter[str]:
        assets = self.state.assets()
        for op in self.pending.of((CreateStream, UpdateStream)):
            assets.update(op.entry.peers)
        return assets

    def peers(self) -> dict[str, PeerInfo]:
        leaving = {op.entry.peer for op in self.pending.of(PeerRemove)}
        return {peer: info for peer, info in self.state.peers.items() if peer not in leaving}

    def stream_count(self) -> int:
        return len(set(self.state.streams) | {op.entry.name for op in self.pending.of(CreateStream)})

    def _propose(self, entry: MetaEntry, config: StreamConfig | None = None) -> Proposal:
        data = encode_entry(entry)
        self.pending.add(PendingOp(data, entry, config))
        return Proposal(data=data, entry=entry)

    # --- Streams ---------------------------------------------------------------------------------

    def create_stream(self, name: str, config_raw: bytes, *, now_ns: int, online: Collection[str]) -> Proposal:
        """`$JS.API.STREAM.CREATE.<name>`: checks in nats-server's order, then placement."""
        config, raw = parse_config(name, config_raw), bytes(config_raw)
        if any(op.entry.name == name for op in self.pending.of(DeleteStream)):
            raise StreamNameExist(f"stream {name!r} is being deleted; retry once the delete has committed")
        existing = self.state.streams.get(name)
        if existing is not None:
            if same_stream_config(existing, config, raw):
                return Proposal(existing=existing)
            raise StreamNameExist()
        for op in self.pending.of(CreateStream):
            if op.entry.name == name:
                if op.config is not None and _same_config(op.config, config):
                    return Proposal(data=op.data, entry=op.entry, in_flight=True)
                raise StreamNameExist()
        check_no_overlap(config.subjects, self.claims(config.subjects))
        if 0 < self.max_streams <= self.stream_count():
            raise MaximumStreamsLimit()
        peers = place(replicas=config.num_replicas, peers=self.peers(), online=online,
                      assets=LazyAssets(self.assets), placement=config.placement, clustered=self.clustered)
        entry = CreateStream(name=name, peers=peers, created_ns=now_ns,
                             required_level=stream_required_level(config), config=raw)
        return self._propose(entry, config)

    def update_stream(self, name: str, config_raw: bytes, *, online: Collection[str]) -> Proposal:
        """`$JS.API.STREAM.UPDATE.<name>`: update rules, overlap, and a new peer set on a replicas change.

        Checked against the stream as it will be once this leader's in-flight updates of it commit, so
        two quick updates are judged in the order they will apply (one cannot undo the other's seal).
        """
        committed = self.state.stream(name)
        if committed.config is None:
            raise StreamOffline(committed.offline_reason or "")
        latest = self._latest_update(name)
        old_config = latest.config if latest is not None and latest.config is not None else committed.config
        old_peers = latest.entry.peers if latest is not None else committed.peers
        config, raw = parse_config(name, config_raw), bytes(config_raw)
        check_update(old_config, config)
        if _same_config(old_config, config) and len(old_peers) == config.num_replicas:
            if latest is None:
                return Proposal(existing=committed)
            return Proposal(data=latest.data, entry=latest.entry, in_flight=True)
        check_no_overlap(config.subjects, self.claims(config.subjects), exclude=name)
        peers = old_peers[: config.num_replicas]
        if config.num_replicas > len(old_peers):
            # Scale up (or re-fill a set a peer remove left short): keep the current peers in place.
            peers = place(replicas=config.num_replicas, keep=old_peers, peers=self.peers(), online=online,
                          assets=LazyAssets(self.assets), placement=config.placement, clustered=self.clustered)
        entry = UpdateStream(name=name, peers=peers, required_level=stream_required_level(config), config=raw)
        return self._propose(entry, config)

    def stream_peer_remove(self, name: str, peer: str, *, online: Collection[str]) -> Proposal:
        """`$JS.API.STREAM.PEER.REMOVE.<name>`: take `peer` out of the stream's peer set, put in its place
        the best spare (online, not in the set), else shrink the set (as nats-server does when it cannot
        remap; a later update or peer add re-fills it to `num_replicas`). A stream's only peer is never
        removed without a spare: its data would have nowhere to be. Proposed as an UpdateStream carrying
        the stream's committed config unchanged, so the stream's leader moves the group's membership."""
        committed = self.state.stream(name)
        latest = self._latest_update(name)
        peers = latest.entry.peers if latest is not None else committed.peers
        if peer not in peers:
            raise ClusterPeerNotMember()
        placement = committed.config.placement if committed.config is not None else None
        others = {p: info for p, info in self.peers().items() if p != peer}
        new = replace_peer(peers, peer, peers=others, online=online, assets=self.assets(), placement=placement)
        if new is None:
            if len(peers) == 1:
                raise ClusterNoPeers(f"no spare peer to move stream {name!r} off {peer!r}, its only peer")
            new = tuple(p for p in peers if p != peer)
        raw = latest.entry.config if latest is not None else committed.config_raw
        entry = UpdateStream(name=name, peers=new, required_level=committed.required_level, config=raw)
        return self._propose(entry, committed.config)

    def _latest_update(self, name: str) -> PendingOp | None:
        """This leader's last in-flight update of `name`: the config and peers the stream will have."""
        latest = None
        for op in self.pending.of(UpdateStream):
            if op.entry.name == name:
                latest = op
        return latest

    def delete_stream(self, name: str) -> Proposal:
        """Offline streams are deletable too (DESIGN §9)."""
        self.state.stream(name)
        return self._propose(DeleteStream(name=name))

    # --- Consumers -------------------------------------------------------------------------------

    def create_consumer(self, stream: str, name: str, config_raw: bytes, *, now_ns: int) -> Proposal:
        assignment = self.state.stream(stream)
        if assignment.offline_reason is not None:
            raise StreamOffline(assignment.offline_reason)
        entry = CreateConsumer(stream=stream, name=name, created_ns=now_ns,
                               required_level=CONSUMER_REQUIRED_LEVEL, config=bytes(config_raw))
        if (problem := entry_problem(entry)) is not None:
            raise BadRequest(problem)
        decode_consumer_config(entry.config)
        existing = self.state.consumers[stream].get(name)
        if existing is not None:
            if existing.offline_reason is not None:
                raise ConsumerOffline(existing.offline_reason)
            if same_consumer_config(existing, entry.config):
                return Proposal(existing=existing)
            raise ConsumerAlreadyExists()
        in_flight = {op.entry.name: op for op in self.pending.of(CreateConsumer) if op.entry.stream == stream}
        if name in in_flight:
            op = in_flight[name]
            if op.entry.config == entry.config:
                return Proposal(data=op.data, entry=op.entry, in_flight=True)
            raise ConsumerAlreadyExists()
        limit = assignment.config.max_consumers if assignment.config is not None else -1
        if 0 < limit <= len(self.state.consumers[stream]) + len(in_flight):
            raise MaximumConsumersLimit()
        return self._propose(entry)

    def delete_consumer(self, stream: str, name: str) -> Proposal:
        self.state.consumer(stream, name)
        return self._propose(DeleteConsumer(stream=stream, name=name))

    # --- Peers -----------------------------------------------------------------------------------

    def peer_add(self, peer: str, *, cluster: str | None = None, tags: Iterable[str] = ()) -> Proposal:
        entry = PeerAdd(peer=peer, cluster=cluster, tags=tuple(tags))
        if (problem := entry_problem(entry)) is not None:
            raise BadRequest(problem)
        if self.state.peers.get(peer) == PeerInfo(cluster=cluster, tags=entry.tags):
            return Proposal()
        return self._propose(entry)

    def peer_remove(self, peer: str, *, online: Collection[str]) -> Proposal:
        """Remove `peer` and re-place, in every stream that had it, onto the best spare (if any)."""
        if peer not in self.state.peers:
            raise ClusterPeerNotMember()
        peers = {p: info for p, info in self.peers().items() if p != peer}
        assets = self.assets()
        replacements: list[Replacement] = []
        for assignment in self.state.assignments_for(peer):
            placement = assignment.config.placement if assignment.config is not None else None
            new = replace_peer(assignment.peers, peer, peers=peers, online=online, assets=assets,
                               placement=placement)
            if new is not None:
                # Count the spare's new asset now, so the next stream prefers another spare.
                assets.update(set(new) - set(assignment.peers))
                replacements.append(Replacement(stream=assignment.name, old_peers=assignment.peers,
                                                new_peers=new))
        return self._propose(PeerRemove(peer=peer, replacements=tuple(replacements)))

    def server_record(self, entry: PeerSeen | ServerReadmit) -> Proposal:
        """Record a member's storage UUID (`PeerSeen`) or readmit a removed server (`ServerReadmit`);
        nothing if it is already recorded, `in_flight` if the same entry is proposed (the meta leader's
        membership duty, `server/groups/meta_members.py`, calls this every tick)."""
        if (problem := entry_problem(entry)) is not None:
            raise BadRequest(problem)
        if self.state.storage_uuids.get(entry.peer) == entry.storage_uuid:
            return Proposal()
        for op in self.pending.of(type(entry)):
            if op.entry == entry:
                return Proposal(data=op.data, entry=op.entry, in_flight=True)
        return self._propose(entry)
