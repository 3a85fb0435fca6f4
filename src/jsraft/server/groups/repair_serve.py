"""The stream leader's side of a repair, over `$rpc`: `stream.snapshot` and `stream.catchup` (layer L5).

Owns: answering a repairing replica (`stream_repair.RepairWorker`) from this node's replica of the stream
— its stream snapshot and the index it stands for (`leader_snapshot`), and one chunk of the ranges asked
for (`serve_catchup_request`, on top of `stream.catchup_serve`).

Invariants:
  1. Only the stream leader serves (a `StreamLeader` exists: current, fault-free, every entry applied),
     and catch-up only once it applied at least the snapshot index the request is for: a leader behind
     that index could not tell "deleted" from "not yet written".
  2. Anything else is answered with a refusal or an error the requester retries on; never a guess.
  3. Only a verified source serves (`replica.stream_repair.source_refusal`: current, fault-free, and its
     store not unjudged — replica/judgement.py); otherwise `stream.snapshot` raises
     `RepairSourceRefused` and `stream.catchup` answers a refusal, each with a stable `RefusalCode`.

Imports: L1 (`raft` errors), L3 (`stream`), L3½ (`replica.stream_repair`: `answer_catchup`, `source_refusal`),
server siblings.
Reference: DESIGN.md §6 (range catch-up), §8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jsraft.raft.errors import NotLeader
from jsraft.replica.stream_repair import answer_catchup, source_refusal
from jsraft.stream import (
    CatchupChunk, CatchupRefusal, CatchupRequest, MalformedCatchup, RefusalCode, RepairSourceRefused, decode_catchup,
    encode_chunk, encode_refusal,
)

if TYPE_CHECKING:
    from jsraft.server.groups.stream_replica import StreamReplica


async def leader_snapshot(replica: "StreamReplica") -> tuple[int, bytes]:
    """`stream.snapshot`: the leader's stream snapshot and the index it stands for (invariant 1)."""
    await replica.wait_leader(1.0)
    machine = replica.machine
    if machine is None or replica.leader is None:
        raise NotLeader(replica.leader_id())
    refusal = _source_refusal(replica)
    if refusal is not None:  # invariant 3
        raise RepairSourceRefused(f"{refusal.code}: {replica.node_id}: {refusal.reason}")
    # The consumers travel with it (stream_adapter invariant 7): a resynced replica takes both.
    return machine.applied_index, machine.snapshot(extra=replica.adapter.consumers.snapshot_extra())


async def serve_catchup_request(replica: "StreamReplica", blob: bytes) -> bytes:
    """`stream.catchup`: one chunk of the ranges asked for, from the leader's store (invariant 1)."""
    request = decode_catchup(blob)
    if not isinstance(request, CatchupRequest):
        raise MalformedCatchup("stream.catchup takes a catch-up request")
    try:
        await replica.wait_leader(1.0)
    except NotLeader:
        return encode_refusal(CatchupRefusal(reason=f"{replica.node_id} does not lead stream {replica.name}",
                                             code=RefusalCode.not_leader))
    machine = replica.machine
    if machine is None or request.stream != replica.name:
        return encode_refusal(CatchupRefusal(reason=f"{replica.node_id} has no stream {request.stream}",
                                             code=RefusalCode.no_stream))
    refusal = _source_refusal(replica)
    if refusal is not None:  # invariant 3
        return encode_refusal(refusal)
    answer = answer_catchup(machine, replica.name, request)
    return encode_chunk(answer) if isinstance(answer, CatchupChunk) else encode_refusal(answer)


def _source_refusal(replica: "StreamReplica") -> CatchupRefusal | None:
    """Invariant 3, with what this replica knows of its store (the adapter's `Judgement`)."""
    if replica.machine is None or replica.adapter is None:
        return CatchupRefusal(reason="the stream is not open here", code=RefusalCode.source_not_current)
    return source_refusal(replica.machine, replica.adapter.judgement)
