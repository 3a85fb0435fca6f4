"""Range catch-up, the leader's side: answer a follower's request from the leader's own store (layer L3).

Owns: `serve_catchup` — one chunk of messages (or, for a probe, of content CRCs) for the ranges a
`CatchupRequest` asks, up to its byte budget, or a `CatchupRefusal`.

Invariants:
  1. The leader never serves while not current, nor ranges overlapping its own faults (DESIGN §4: a
     leader never serves as the source of a resnapshot while it has unrepaired faults); a record found
     damaged while serving refuses the whole chunk.
  2. A chunk answers the requested ranges in order, each sequence exactly once (a message, a CRC, or
     inside a `deleted` range), up to `next_seq`; at least one sequence whatever the budget.
  3. Every CRC sent is the content CRC of the message as stored (catchup_wire invariant 3).

Imports: L0, L2 (`store` through the machine), `stream` below it. Reference: DESIGN.md §6, §8.
"""

from __future__ import annotations

from jsraft.errors import DamagedSequence, NoMessageFound
from jsraft.stream import apply_ops
from jsraft.stream.catchup_wire import (
    CHUNK_BYTES_MAX, CRC_BYTES, CatchupChunk, CatchupMsg, CatchupRefusal, CatchupRequest, RefusalCode,
)
from jsraft.stream.drift import merge_ranges
from jsraft.stream.machine import StreamStateMachine
from jsraft.stream.results import Health


def serve_catchup(machine: StreamStateMachine, request: CatchupRequest) -> CatchupChunk | CatchupRefusal:
    """Answer `request` from the leader's own store, up to `bytes_max` (at least one sequence)."""
    store = machine.store
    if machine.health is not Health.current:
        return CatchupRefusal(reason=f"the leader's replica is {machine.health}",
                              code=RefusalCode.source_not_current)
    for fault in store.faults():
        if any(fault.first <= last and first <= fault.last for first, last in request.ranges):
            return CatchupRefusal(reason=f"the leader's store has faults at {fault.first}..{fault.last}",
                                  code=RefusalCode.source_faulty)
    budget = min(max(request.bytes_max, 1), CHUNK_BYTES_MAX)
    msgs: list[CatchupMsg] = []
    crcs: list[tuple[int, int]] = []
    deleted: list[tuple[int, int]] = []
    size = 0
    for first, last in request.ranges:
        seq = first
        while seq <= last:
            if size >= budget:
                return CatchupChunk(msgs=tuple(msgs), crcs=tuple(crcs), deleted=merge_ranges(deleted), next_seq=seq)
            try:
                msg = store.load_next(None, seq)
            except NoMessageFound:
                msg = None
            except DamagedSequence as error:
                return CatchupRefusal(reason=f"the leader's store is damaged at {error.seq}",
                                      code=RefusalCode.source_faulty)
            if msg is None or msg.seq > last:
                deleted.append((seq, last))
                break
            if msg.seq > seq:
                deleted.append((seq, msg.seq - 1))
            crc = apply_ops.content_crc(msg.seq, msg.subject, msg.headers, msg.payload, msg.timestamp_ns)
            if request.crcs_only:
                crcs.append((msg.seq, crc))
                size += CRC_BYTES
            else:
                msgs.append((msg.seq, msg.subject, msg.headers, msg.payload, msg.timestamp_ns, crc))
                size += len(msg.subject) + len(msg.headers) + len(msg.payload) + 34
            seq = msg.seq + 1
    return CatchupChunk(msgs=tuple(msgs), crcs=tuple(crcs), deleted=merge_ranges(deleted), next_seq=0)
