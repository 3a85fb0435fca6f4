"""Snapshots: compaction, chunked InstallSnapshot, and installing a leader's snapshot (layer L1).

Owns: `compact` (the application took a snapshot; drop the log it covers), the leader's chunked sending
(`send_snapshot`, `handle_install_snapshot_response`, `tick_transfers`) and the follower's reassembly and
install (`handle_install_snapshot`).

Invariants:
  1. A replica with unrepaired faults never sends a snapshot (rule 6, `rule_may_send_snapshot`); a leader
     cannot have faults anyway (election invariant 2) — both checks are kept.
  2. Installing a snapshot never removes a committed entry (rule 5): the log suffix after the snapshot is
     kept when it matches, and is discarded only if nothing in it is committed.
  3. A snapshot at or below our commit index is not installed — unless it covers a faulty index, which
     only a snapshot can repair once the leader has compacted past it.
  4. One chunk is in flight per follower; a chunk unanswered for an election timeout is sent again. The
     follower buffers at most `snapshot_bytes_max` bytes (checked at the message gateway).

Imports: L0, attrs. Reference: Raft paper §7; etcd-io/raft (snapshot state); hashicorp/raft
(chunked install).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from jsraft.errors import invariant
from jsraft.raft import append, membership, repair, replication
from jsraft.raft.errors import PeerProtocolError
from jsraft.raft.messages import InstallSnapshot, InstallSnapshotResponse
from jsraft.raft.progress import ProgressState
from jsraft.raft.ready import Snapshot
from jsraft.raft.types import SnapshotMeta

if TYPE_CHECKING:
    from jsraft.raft.core import RaftNode


@attrs.define
class ReceiveBuffer:
    """A snapshot being reassembled on a follower."""

    leader_id: str
    term: int
    meta: SnapshotMeta
    data: bytearray


def compact(node: RaftNode, index: int, data: bytes) -> None:
    """The application durably snapshotted its state at applied `index`; keep `data` to send followers."""
    log = node.log
    if index <= log.snapshot_index:
        return
    invariant(index <= node.conf_applied_index, "membership changes through the snapshot are applied")
    meta_conf = membership.conf_at(node, index)
    term = log.compact(index)
    node.snapshot_meta = SnapshotMeta(index=index, term=term, conf=meta_conf)
    node.snapshot_data = data
    membership.trim_history(node, index)


# --- Leader side ---------------------------------------------------------------------------------


def send_snapshot(node: RaftNode, peer: str) -> bool:
    if not node.rule_may_send_snapshot() or node.snapshot_meta is None or node.snapshot_data is None:
        return False
    progress = node.progress[peer]
    progress.become_snapshot(node.snapshot_meta.index)
    _send_chunk(node, peer)
    return True


def _send_chunk(node: RaftNode, peer: str) -> None:
    invariant(node.snapshot_meta is not None and node.snapshot_data is not None, "a snapshot to send")
    progress = node.progress[peer]
    data = node.snapshot_data
    offset = progress.snapshot_offset
    chunk = data[offset:offset + node.config.snapshot_chunk_bytes]
    progress.snapshot_idle_ticks = 0
    node.send(InstallSnapshot(
        from_id=node.id, to_id=peer, term=node.current_term, leader_id=node.id, meta=node.snapshot_meta,
        offset=offset, data=chunk, total_bytes=len(data), done=offset + len(chunk) >= len(data)))


def handle_install_snapshot_response(node: RaftNode, message: InstallSnapshotResponse) -> None:
    progress = node.progress.get(message.from_id)
    if progress is None or progress.state is not ProgressState.SNAPSHOT:
        return
    progress.recent_active = True
    if message.snapshot_index != progress.pending_snapshot_index or message.chunk_offset != progress.snapshot_offset:
        return  # an answer to an older chunk or snapshot
    if message.done:
        if message.match_index > node.log.last_index:
            raise PeerProtocolError(f"{message.from_id} acknowledged {message.match_index}, beyond our log")
        progress.maybe_update(message.match_index)
        progress.become_probe()
        replication.send_append(node, message.from_id, allow_empty=True)
        return
    if node.snapshot_meta is None or node.snapshot_meta.index != progress.pending_snapshot_index:
        send_snapshot(node, message.from_id)  # we compacted again meanwhile: send the newer snapshot
        return
    progress.snapshot_offset = message.next_offset
    _send_chunk(node, message.from_id)


def tick_transfers(node: RaftNode) -> None:
    """Resend a chunk that has gone unanswered for an election timeout (invariant 4)."""
    for peer, progress in node.progress.items():
        if peer == node.id or progress.state is not ProgressState.SNAPSHOT:
            continue
        progress.snapshot_idle_ticks += 1
        if progress.snapshot_idle_ticks >= node.config.election_ticks:
            if node.snapshot_meta is not None and node.snapshot_meta.index != progress.pending_snapshot_index:
                send_snapshot(node, peer)
            elif node.rule_may_send_snapshot():
                _send_chunk(node, peer)


# --- Follower side -------------------------------------------------------------------------------


def handle_install_snapshot(node: RaftNode, message: InstallSnapshot) -> None:
    append.on_leader_contact(node, message.from_id)
    log = node.log
    meta = message.meta
    trusted = repair.trusted_index(node)
    if meta.index <= min(log.commit_index, trusted):
        # Invariant 3: we already hold (and can vouch for) everything it covers.
        _respond(node, message, next_offset=message.total_bytes, done=True,
                 match_index=min(log.commit_index, trusted))
        return
    buffer = node.snapshot_receive
    if message.offset == 0:
        buffer = ReceiveBuffer(leader_id=message.from_id, term=message.term, meta=meta, data=bytearray())
        node.snapshot_receive = buffer
    same = (buffer is not None and buffer.meta == meta and buffer.leader_id == message.from_id
            and buffer.term == message.term)
    if buffer is None or not same or message.offset != len(buffer.data):
        _respond(node, message, next_offset=len(buffer.data) if buffer is not None and same else 0)
        return
    buffer.data.extend(message.data)
    if not message.done:
        _respond(node, message, next_offset=len(buffer.data))
        return
    node.snapshot_receive = None
    install(node, Snapshot(meta=meta, data=bytes(buffer.data)))
    _respond(node, message, next_offset=message.total_bytes, done=True, match_index=meta.index)


def install(node: RaftNode, snapshot: Snapshot) -> None:
    """Replace our log up to the snapshot (invariant 2) and hand it to the application via `Ready`."""
    log = node.log
    meta = snapshot.meta
    keep_suffix = _keeps_suffix(node, meta)
    if not keep_suffix:
        node.rule_check_truncation(meta.index + 1)
        if node.repairing and log.commit_index > meta.index:
            log.lower_commit(meta.index)  # the hint covered stale copies (see append, invariant 5)
    discarded_suffix = not keep_suffix and log.last_index > meta.index
    log.install_snapshot(meta.index, meta.term, keep_suffix)
    if discarded_suffix and not node.repairing:
        # What we acknowledged above the snapshot was superseded, never committed (rule 5 holds above).
        node.acked_watermark = min(node.acked_watermark, meta.index)
    node.acked_watermark = node.rule_acked_watermark(node.acked_watermark, meta.index)
    node.leader_match_index = max(node.leader_match_index, meta.index)
    if node.repairing:
        node.repair_verified_index = max(node.repair_verified_index, meta.index)
    _install_membership(node, meta, keep_suffix)
    node.snapshot_meta = meta
    node.snapshot_data = snapshot.data
    node.pending_snapshot = snapshot
    node.on_commit_advanced()


def _install_membership(node: RaftNode, meta: SnapshotMeta, keep_suffix: bool) -> None:
    """The snapshot's membership, plus changes we applied from a kept suffix after it."""
    later = [(i, c) for i, c in node.conf_history if i > meta.index] if keep_suffix else []
    node.conf_history = [(meta.index, meta.conf)] + later
    node.conf = node.conf_history[-1][1]
    node.conf_applied_index = max(node.conf_applied_index, meta.index) if keep_suffix else meta.index


def _keeps_suffix(node: RaftNode, meta: SnapshotMeta) -> bool:
    """Does our log after the snapshot continue the leader's history (so it is kept, invariant 2)?

    Yes if our entry at the snapshot's index has the snapshot's term, or is faulty (its recorded term
    proves nothing; as in `append`, the entries after it are checked against the leader's later) —
    unless the next non-faulty entry's term is lower than the snapshot's, which no single log allows.
    """
    log = node.log
    if meta.index > log.last_index:
        return False
    recorded = log.term_at(meta.index)
    invariant(recorded is None or recorded == meta.term or meta.index > repair.trusted_index(node)
              or meta.index > log.commit_index, f"committed entry {meta.index} differs from the leader's snapshot")
    if recorded != meta.term and meta.index not in log.faulty:
        return False
    following = log.next_known_term(meta.index)  # faulty placeholders in between prove nothing
    return following is None or following >= meta.term


def _respond(node: RaftNode, message: InstallSnapshot, *, next_offset: int, done: bool = False,
             match_index: int = 0) -> None:
    node.send(InstallSnapshotResponse(
        from_id=node.id, to_id=message.from_id, term=node.current_term, snapshot_index=message.meta.index,
        chunk_offset=message.offset, next_offset=next_offset, done=done, match_index=match_index))
