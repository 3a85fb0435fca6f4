"""`$JSRAFT.BULK.GET.<stream>`: jsraft's columnar bulk read, for analytics readers (layer L5).

Owns: the packed chunk format (`pack_chunk`), the choice of the replica a chunk is read from
(`readable_store`: this node's own when it may serve the range, else the leader's behind `jsapi.msg_bulk`)
and the requester-side loop (`BulkGets`) that answers one request with chunk messages and an end-of-batch,
counting where its chunks were read (`local_chunks`, `leader_chunks`, shown under `/jsz`'s `jsraft`).

Why next to the batched direct get (ADR-31, `direct_batch`): a direct get answers one NATS message per
stored message, so a reader pays the protocol's per-message parsing in Python (~10,000 messages/s for
the Spark reader). A bulk chunk carries up to `CHUNK_MSGS` messages as columns that Arrow takes without a
Python loop per message. The data and the order are the direct get's; only the framing differs.

Request (JSON): `seq` (first sequence, ≥ 1), `last_seq` (last sequence, inclusive; 0: the stream's end),
`batch` (messages at most), `next_by_subj` (a filter, wildcards allowed). Reply: chunk messages with
header `Jsraft-Bulk-Count: n` and a packed payload, then `NATS/1.0 204 EOB` with `Nats-Last-Sequence`
(the last sequence sent, 0 for none) and `Jsraft-Bulk-End` (1: no matching message after it up to
`last_seq`, 0: the batch count ran out first). Errors: `408 Bad Request`, `404 Stream Not Found`, `500`.

Payload (little-endian): magic `JSB1`, u32 count, then count × i64 seq, count × i64 timestamp ns,
count × u32 subject length, count × u32 headers length, count × u32 data length, then the subjects,
the header blocks and the data, each concatenated in sequence order.

Invariants:
  1. A chunk holds live messages only, in sequence order, within `seq..last_seq`, matching the filter:
     deletes and purges are stepped over (`load_run` / `load_next`), never taken for the end; the end is
     the store saying there is no further message.
  2. A chunk is read from this node's own replica (a follower's or the leader's) only when the request names
     its last sequence (`last_seq` > 0) and the replica may serve all of it: open, past its recovery
     replay, current (not repairing, not drifted, no Raft log repair, no repair plan held), with no store
     fault at all, and both its log position and its store at or past `last_seq` (it applied every
     entry up to the range's end; a follower applies only committed entries). Otherwise the chunk is read
     at the stream leader (`call_stream`), and a local read that fails midway is read there again: a
     range is never answered partly or from a replica that has not applied it. A follower may still show a
     delete or purge committed after it last applied (as the leader would have a moment before); what it
     serves is a state the stream was in, never a torn one.
  3. A chunk's payload stays under the client's `max_payload` (`CHUNK_BYTES` of message bytes plus
     28 bytes per message of columns, at most `CHUNK_MSGS` messages).

Imports: stdlib, trio, L0, L2 (`store` values), L3 (`stream.results.Health`), server siblings.
"""

from __future__ import annotations

import json
import logging
import struct
import sys
from array import array
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from jsraft.errors import InvalidSubject, JsraftError, NoMessageFound, StreamNotFound
from jsraft.server.nats.client_server import ClientServer, InternalMsg
from jsraft.server.api.jsapi_codec import status_headers
from jsraft.store.base import StoredMsg, StreamStore
from jsraft.stream.results import Health

if TYPE_CHECKING:
    from jsraft.server.groups.router import CallStream
    from jsraft.server.groups.stream_replica import StreamReplica

log = logging.getLogger("jsraft.server.jsapi")

PREFIX = "$JSRAFT.BULK.GET."
MAGIC = b"JSB1"
CHUNK_MSGS = 8192
CHUNK_BYTES = 512 << 10  # invariant 3: 512 KiB + 8192 × 28 B of columns < the 1 MiB default max_payload
RUN_MSGS = 4096


def _read(store: StreamStore, seq: int, last_seq: int, subject_filter: str | None, count_max: int) -> tuple[list[StoredMsg], bool]:
    """Invariant 1: up to `count_max` messages (and about `CHUNK_BYTES`), and whether the range ended."""
    msgs: list[StoredMsg] = []
    size = 0
    while len(msgs) < count_max and size < CHUNK_BYTES:
        run = store.load_run(seq, min(count_max - len(msgs), RUN_MSGS), subject_filter)
        if not run:
            try:
                run = [store.load_next(subject_filter, seq)]
            except NoMessageFound:
                return msgs, True
        for msg in run:
            if msg.seq > last_seq:
                return msgs, True
            msgs.append(msg)
            size += len(msg.subject) + len(msg.headers) + len(msg.payload)
            if size >= CHUNK_BYTES or len(msgs) >= count_max:
                break
        seq = msgs[-1].seq + 1
    return msgs, msgs[-1].seq >= last_seq if msgs else True


def pack_chunk(store: StreamStore, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """One packed chunk of `store` (invariants 1, 3): at the leader behind `jsapi.msg_bulk`, or on this
    node's own replica (invariant 2)."""
    last_seq = int(args["last_seq"]) or store.state().last_seq
    msgs, end = _read(store, max(int(args["seq"]), 1), last_seq, str(args.get("filter") or "") or None,
                      min(int(args["count_max"]), CHUNK_MSGS))
    subjects = [m.subject.encode() for m in msgs]
    columns = [array("q", [m.seq for m in msgs]), array("q", [m.timestamp_ns for m in msgs]),
               array("I", [len(s) for s in subjects]), array("I", [len(m.headers) for m in msgs]),
               array("I", [len(m.payload) for m in msgs])]
    if sys.byteorder != "little":
        for column in columns:
            column.byteswap()
    packed = b"".join([MAGIC, struct.pack("<I", len(msgs)), *(c.tobytes() for c in columns), *subjects,
                       *(m.headers for m in msgs), *(m.payload for m in msgs)])
    return {"count": len(msgs), "last": msgs[-1].seq if msgs else 0, "end": end}, [packed]


def readable_store(replicas: Mapping[str, "StreamReplica"], stream: str, last_seq: int) -> StreamStore | None:
    """This node's store of `stream` (`replicas`: the node's stream replicas) when it may serve sequences up
    to `last_seq`, else None (invariant 2)."""
    replica = replicas.get(stream)
    if last_seq <= 0 or replica is None or replica.closed or replica.store is None:
        return None
    machine, adapter = replica.machine, replica.adapter
    if machine is None or adapter is None or machine.replaying or not machine.can_lead:
        return None  # `can_lead`: health current and no store fault
    if adapter.plan is not None or adapter.hold_after is not None or replica.repair.health() is not Health.current:
        return None
    if machine.last_seq < last_seq or replica.store.state().last_seq < last_seq:
        return None
    return replica.store


def _request(payload: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(payload or b"{}")
    except ValueError:
        return None
    if not isinstance(body, dict) or set(body) - {"seq", "last_seq", "batch", "next_by_subj"}:
        return None
    numbers = [body.get(k, 0) for k in ("seq", "last_seq", "batch")]
    if not all(type(n) is int and n >= 0 for n in numbers) or not body.get("seq") or not body.get("batch"):
        return None
    if not isinstance(body.get("next_by_subj", ""), str):
        return None
    return body


class BulkGets:
    """One internal subscription, `$JSRAFT.BULK.GET.*`, answered on the node that received it. Given the
    node's stream replicas (`StreamManager.replicas`, read at each request) and `call_stream`."""

    def __init__(self, replicas: Mapping[str, "StreamReplica"], call_stream: "CallStream",
                 clients: ClientServer) -> None:
        self._replicas = replicas
        self._call_stream = call_stream
        self.local_chunks = 0  # read from this node's own replica (invariant 2)
        self.leader_chunks = 0  # read at the stream leader, through `call_stream`
        self._sub = clients.subscribe_internal(PREFIX + "*", self._get)

    async def _get(self, msg: InternalMsg) -> None:
        if not msg.reply:
            return
        stream = msg.subject[len(PREFIX):]
        body = _request(msg.payload)
        if body is None:
            msg.respond(b"", headers=status_headers(408, "Bad Request"))
            return
        seq, remaining, last_sent, end = int(body["seq"]), int(body["batch"]), 0, False
        while remaining > 0 and not end:
            args = {"seq": seq, "last_seq": int(body.get("last_seq", 0)), "count_max": remaining,
                    "filter": body.get("next_by_subj", "")}
            try:
                result, blobs = await self._chunk(stream, args)
            except (StreamNotFound, InvalidSubject) as error:
                msg.respond(b"", headers=status_headers(404, f"Stream Not Found: {error.description}"))
                return
            except JsraftError as error:
                msg.respond(b"", headers=status_headers(500, error.description))
                return
            count, end = int(result["count"]), bool(result["end"])
            if count:
                msg.respond(blobs[0], headers=f"NATS/1.0\r\nJsraft-Bulk-Count: {count}\r\n\r\n".encode())
                last_sent, remaining, seq = int(result["last"]), remaining - count, int(result["last"]) + 1
            elif not end:
                end = True  # nothing read and not the end cannot happen; never loop on it
        msg.respond(b"", headers=(f"NATS/1.0 204 EOB\r\nNats-Last-Sequence: {last_sent}\r\n"
                                  f"Jsraft-Bulk-End: {int(end)}\r\n\r\n").encode())

    async def _chunk(self, stream: str, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        """One chunk, from this node's replica when it may serve the range, else at the leader (invariant 2)."""
        store = readable_store(self._replicas, stream, int(args["last_seq"]))
        if store is not None:
            try:
                chunk = pack_chunk(store, args)
            except JsraftError as error:  # found damaged while reading: now a fault; the leader reads it
                log.info("bulk get %s: local read failed (%s); reading at the leader", stream, error.description)
            else:
                self.local_chunks += 1
                await trio.lowlevel.checkpoint()  # a long local read still lets the node's other tasks run
                return chunk
        chunk = await self._call_stream(stream, "jsapi.msg_bulk", args)
        self.leader_chunks += 1
        return chunk
