"""`MetaStateMachine`: the meta group's deterministic state machine (DESIGN §5).

Owns: the public face of `meta` for the runtime and the server. Every node runs one; it is fed the
meta group's committed entries (`apply`), installs and produces snapshots (`restore`, `snapshot`), and
on the leader validates requests into entries (`propose_*`). It does no I/O and reads no clock: time
arrives as `now_ns`, which peers are online arrives as `online`.

How the runtime drives it:
  1. Every committed NORMAL entry of the meta group, in index order: `apply(index, data)`. The result
     says what changed; members of a new or changed assignment open or reconfigure its group, and a
     client waiting on that proposal is answered from it.
  2. On the leader, a request becomes `propose_*(...) -> Proposal`; `Proposal.data` goes to
     `RaftNode.propose`. If Raft refuses it, `cancel_proposal(data)`; on losing leadership,
     `abandon_proposals()`.
  3. When Raft compacts (every `META_SNAPSHOT_ENTRIES` applied entries): `snapshot()`; when it installs
     one (or at startup): `restore(data)`, after which the node reconciles its stream groups with the
     restored state (`reconcile.plan_restore`): a snapshot covers deletes this node never applied.

Invariants:
  1. Deterministic: replicas that applied the same entries have equal `snapshot()` bytes and equal
     `digest()`, whatever they proposed or in which order requests arrived.
  2. `apply` indexes strictly increase; a stream is removed only by an applied delete entry.
  3. A malformed entry raises `MalformedMetaEntry` and changes nothing; the runtime must stop applying
     (a replica that skips an entry diverges), never skip it.

Imports: L0, L1, `meta.*`. No trio, time, threading or module-level random (DESIGN §1).
Reference: DESIGN.md §5, §9; nats-server `server/jetstream_cluster.go`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from jsraft.errors import invariant
from jsraft.jsapi import API_LEVEL, stream_required_level
from jsraft.meta.apply import Applied, apply_entry
from jsraft.meta.assignment import ConsumerAssignment, StreamAssignment, parse_config
from jsraft.meta.entries import PeerSeen, ServerReadmit, decode_entry
from jsraft.meta.errors import RequiredApiLevel
from jsraft.meta.leader import Proposal, Proposer
from jsraft.meta.placement import PeerInfo
from jsraft.meta.rules import check_request_level
from jsraft.meta.snapshot import decode_state, encode_state, state_digest
from jsraft.meta.state import MetaState, StreamTable

# In-flight meta proposals are rare (stream and consumer admin); 256 bounds the leader's bookkeeping.
# Where a reader of the stream changes is (`stream_changes`): the table it read and its position in it.
StreamCursor = tuple[StreamTable, int]

PENDING_PROPOSALS_MAX = 256

# The meta group snapshots this machine and compacts its WAL every this many applied entries (the server's
# default; `NodeConfig.meta_snapshot_every_entries` overrides it). Meta entries are rare and small, but a
# snapshot holds every config, so it costs O(streams): 1024 entries keeps the log (and a restart's replay)
# short without snapshotting on every few admin requests.
META_SNAPSHOT_ENTRIES = 1024


class MetaStateMachine:
    def __init__(
        self, *, clustered: bool = True, max_streams: int = -1, api_level: int = API_LEVEL,
        pending_max: int = PENDING_PROPOSALS_MAX,
    ) -> None:
        """`clustered`: false for a standalone node (R>1 refused with 10074). `max_streams`: the
        JetStream `max_streams` limit, -1 or 0 for none as in nats-server; checked by the leader only,
        so nodes may be configured differently without their states diverging."""
        invariant(max_streams >= -1 and pending_max >= 1, "max_streams >= -1 and pending_max >= 1")
        self.api_level = api_level
        self._state = MetaState(api_level)
        self._proposer = Proposer(self._state, clustered=clustered, max_streams=max_streams,
                                  pending_max=pending_max)

    # --- Committed entries -----------------------------------------------------------------------

    @property
    def applied_index(self) -> int:
        return self._state.applied_index

    def apply(self, index: int, data: bytes) -> Applied:
        """Apply the committed entry at `index`; raise `MalformedMetaEntry` if it does not decode."""
        invariant(index > self._state.applied_index,
                  f"meta apply at {index} after {self._state.applied_index}: indexes must increase")
        entry = decode_entry(data)
        self._proposer.pending.discard(bytes(data))
        result = apply_entry(self._state, index, entry)
        self._state.applied_index = index
        return result

    def note_applied(self, index: int) -> None:
        """Record that the Raft entry at `index` (a no-op or membership change) carried nothing for meta,
        so a snapshot taken now covers it."""
        invariant(index > self._state.applied_index, "meta applied index must increase")
        self._state.applied_index = index

    # --- Leader side -----------------------------------------------------------------------------

    def propose_create_stream(self, name: str, config_raw: bytes, *, now_ns: int,
                              online: Collection[str]) -> Proposal:
        self._check_level(name, config_raw)
        return self._proposer.create_stream(name, config_raw, now_ns=now_ns, online=online)

    def propose_update_stream(self, name: str, config_raw: bytes, *, online: Collection[str]) -> Proposal:
        if name not in self.offline():  # an offline stream's update is refused as such (StreamOffline)
            self._check_level(name, config_raw)
        return self._proposer.update_stream(name, config_raw, online=online)

    def _check_level(self, name: str, config_raw: bytes) -> None:
        """A leader at a lower API level than a config needs does not make the asset: it could not run it
        (it would load it offline at once). `RequiredApiLevel` (10185) names both levels."""
        needed = stream_required_level(parse_config(name, config_raw))
        if needed > self.api_level:
            raise RequiredApiLevel(f"JetStream minimum api level required: stream {name!r} needs API level "
                                   f"{needed}, this server is at {self.api_level}")

    def propose_delete_stream(self, name: str) -> Proposal:
        return self._proposer.delete_stream(name)

    def propose_create_consumer(self, stream: str, name: str, config_raw: bytes, *, now_ns: int) -> Proposal:
        return self._proposer.create_consumer(stream, name, config_raw, now_ns=now_ns)

    def propose_delete_consumer(self, stream: str, name: str) -> Proposal:
        return self._proposer.delete_consumer(stream, name)

    def propose_peer_add(self, peer: str, *, cluster: str | None = None, tags: Iterable[str] = ()) -> Proposal:
        return self._proposer.peer_add(peer, cluster=cluster, tags=tags)

    def propose_peer_remove(self, peer: str, *, online: Collection[str]) -> Proposal:
        return self._proposer.peer_remove(peer, online=online)

    def propose_stream_peer_remove(self, name: str, peer: str, *, online: Collection[str]) -> Proposal:
        return self._proposer.stream_peer_remove(name, peer, online=online)

    def propose_peer_seen(self, peer: str, storage_uuid: str) -> Proposal:
        return self._proposer.server_record(PeerSeen(peer=peer, storage_uuid=storage_uuid))

    def propose_server_readmit(self, peer: str, storage_uuid: str) -> Proposal:
        return self._proposer.server_record(ServerReadmit(peer=peer, storage_uuid=storage_uuid))

    def cancel_proposal(self, data: bytes) -> bool:
        """Raft did not take `data` (NotLeader, ProposalDropped): stop counting it."""
        return self._proposer.pending.discard(bytes(data))

    def abandon_proposals(self) -> None:
        """Leadership lost: forget every in-flight proposal. Those that still commit are re-checked by
        apply, so nothing is lost by forgetting them, only their conservative claims."""
        self._proposer.pending.ops.clear()

    @property
    def pending_count(self) -> int:
        return len(self._proposer.pending.ops)

    def check_request_level(self, header_value: str | None) -> None:
        """`Nats-Required-Api-Level` above this node's level -> `RequiredApiLevel` (10185)."""
        check_request_level(header_value, self.api_level)

    # --- Snapshots -------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        return encode_state(self._state)

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot's; raise `MalformedMetaSnapshot` (state unchanged) if bad.
        In-flight proposals are forgotten: a node installing a snapshot is not leading."""
        state = decode_state(data, api_level=self.api_level)
        state.check()
        self._state = state
        self._proposer.state = state
        self._proposer.pending.ops.clear()

    def digest(self) -> int:
        """64-bit digest of the committed state (not the applied index), for the chaos checker."""
        return state_digest(self._state)

    # --- Queries ---------------------------------------------------------------------------------

    def stream(self, name: str) -> StreamAssignment:
        return self._state.stream(name)

    def streams(self) -> list[StreamAssignment]:
        return self._state.all_streams()

    def stream_changes(self, cursor: StreamCursor | None) -> tuple[set[str] | None, StreamCursor]:
        """The names of the streams assigned, replaced or deleted since `cursor` (what an earlier call
        returned; None the first time), and the cursor for the next call. None instead of names when every
        stream must be looked at: the first call, a state replaced since (a snapshot restored), or a journal
        that no longer reaches back (`meta.state` invariant 6)."""
        table = self._state.streams
        now = (table, table.position)
        if cursor is None or cursor[0] is not table:
            return None, now
        return table.changed_since(cursor[1]), now

    def names(self) -> list[str]:
        return self._state.names()

    def has_stream(self, name: str) -> bool:
        """`name in names()` in O(1): asked after every Ready cycle while a create or update waits."""
        return self._state.has_stream(name)

    def offline(self) -> dict[str, str]:
        return self._state.offline()

    def missing(self) -> list[str]:
        return self._state.missing()

    def assignments_for(self, node_id: str) -> list[StreamAssignment]:
        return self._state.assignments_for(node_id)

    def names_for(self, node_id: str) -> set[str]:
        """The stream names whose data `node_id` should hold: the input to quarantine."""
        return {a.name for a in self._state.assignments_for(node_id)}

    def consumer(self, stream: str, name: str) -> ConsumerAssignment:
        return self._state.consumer(stream, name)

    def consumers(self, stream: str) -> list[ConsumerAssignment]:
        return self._state.stream_consumers(stream)

    def peers(self) -> dict[str, PeerInfo]:
        return dict(sorted(self._state.peers.items()))

    def storage_uuids(self) -> dict[str, str]:
        """Member -> the storage UUID the meta leader last saw it with (`PEER_SEEN`)."""
        return dict(sorted(self._state.storage_uuids.items()))

    def removed_servers(self) -> dict[str, str]:
        """Removed server -> the storage UUID it had when removed ("" if never seen)."""
        return dict(sorted(self._state.removed_servers.items()))
