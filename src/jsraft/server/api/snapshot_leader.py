"""The stream leader's side of a snapshot and a restore: reading messages out of its store, and writing
restored messages in through the stream's Raft log (layer L5).

Owns: the request methods `snapshot.read` (records of the live messages from a sequence, up to a byte
budget), `restore.append` (restored messages, proposed as MSGS entries with their own sequences and
timestamps; gaps between them become deleted sequences) and `restore.finish` (the tail of deleted
sequences up to the backup's last sequence, then the leader's store state tuple), `snapshot.consumer` (a
consumer's replicated state, `consumer.snapshot`'s encoding) and `restore.consumer` (a restored consumer's
state), added to the node's
request table so they travel by `$rpc` to the leader like every other stream method.

Invariants:
  1. Every method needs the stream's leader and raises `NotLeader` elsewhere (handlers invariant 1).
  2. A restored message keeps its sequence, subject, headers, payload and timestamp, so its record — and
     so the stream's digest — is the original's. A restored run is proposed only while the stream's last
     sequence (counting in-flight proposals) is the one before it (`StreamRestoreRace` otherwise).
  3. A gap becomes: on an empty store, a purge up to the next sequence (the stream's first sequence moves,
     as after the original's purge); anywhere else, placeholder messages deleted at once, so sequences,
     counts, bytes and digest equal the original's.
  4. Bounded: a read returns at most `READ_MSGS_MAX` messages and about `bytes_max` bytes; an entry holds
     at most `MSGS_PER_ENTRY_MAX` messages.
  5. A restored consumer's replicated state is its original's — delivered and ack floor (both sequences),
     pending messages with their consumer sequences and delivery counts — set by one STATE op through the
     stream's log, so every replica applies the same state; its config is the original's. From a backup
     that carries only the ack floor (written before the state was), it resumes after that floor (a SKIP
     to it): what the original had delivered but not seen acknowledged is delivered again
     (at-least-once), nothing acknowledged is, and its consumer sequence numbers start again.

Imports: stdlib, L0, L1 (`codec`, `jsapi`), L3 (`stream` entries, `consumer` ops and snapshots), server siblings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jsraft.codec.records import encode_message
from jsraft.consumer import SkipOp, StateOp, decode_consumer, encode_consumer, encode_ops
from jsraft.errors import JsraftError, NoMessageFound
from jsraft.jsapi import validate_stream_name
from jsraft.server.api.consumer_admin import leading_service
from jsraft.server.groups.consumer_errors import ConsumerNotFound
from jsraft.server.errors import RestoreFailed
from jsraft.server.api.snapshot_format import iter_records
from jsraft.stream import entries
from jsraft.stream.headers import parse_headers

if TYPE_CHECKING:
    from jsraft.server.groups.stream_lookup import LocalStreams
    from jsraft.server.groups.stream_replica import StreamReplica

Result = tuple[Any, Sequence[bytes]]
READ_MSGS_MAX = 8192
READ_BYTES_DEFAULT = 1 << 20
GAP_SUBJECT = b"_jsraft.restore.gap"  # placeholder subject for a deleted sequence (invariant 3)
Restored = tuple[int, int, bytes, bytes, bytes]  # seq, timestamp_ns, subject, headers, payload


class SnapshotLeaderSide:
    def __init__(self, local: "LocalStreams") -> None:
        self.local = local

    def register(self, table: dict[str, Any]) -> None:
        table.update({"snapshot.read": self.read, "restore.append": self.append, "restore.finish": self.finish,
                      "snapshot.consumer": self.consumer_state, "restore.consumer": self.consumer_position})

    async def _leading(self, args: dict[str, Any]) -> "StreamReplica":
        name = validate_stream_name(str(args["stream"]))
        replica = self.local.replica(name, args)  # NotLeader when not open here (invariant 1)
        await replica.wait_leader(1.0)
        return replica

    async def read(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """Records of the live messages in `[from_seq, last_seq]` from the start, within the budget."""
        store = (await self._leading(args)).store
        seq, last_seq = int(args["from_seq"]), int(args["last_seq"])
        bytes_max = int(args.get("bytes_max") or READ_BYTES_DEFAULT)
        records: list[bytes] = []
        size = 0
        done = False
        while size < bytes_max and len(records) < READ_MSGS_MAX:  # invariant 4
            if seq > last_seq:
                done = True
                break
            try:
                msg = store.load_next(None, seq)
            except NoMessageFound:
                done = True
                break
            if msg.seq > last_seq:
                done = True
                break
            record, _ = encode_message(msg.seq, msg.timestamp_ns, msg.subject.encode(), msg.headers, msg.payload)
            records.append(record)
            size += len(record)
            seq = msg.seq + 1
        return {"next_seq": seq, "done": done}, (b"".join(records),)

    async def append(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        replica = await self._leading(args)
        msgs = [(seq, ts, subject, headers, payload) for seq, ts, subject, headers, payload, _ in iter_records(blobs[0])]
        run: list[Restored] = []
        for msg in msgs:
            if run and msg[0] != run[-1][0] + 1:
                await self._propose_run(replica, run)
                run = []
            run.append(msg)
        if run:
            await self._propose_run(replica, run)
        return {"last_seq": replica.leader.last_seq if replica.leader else None}, ()

    async def finish(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """Deleted sequences up to the backup's `last_seq`, then the leader's store state."""
        replica = await self._leading(args)
        await self._fill_gap(replica, int(args["last_seq"]) + 1)
        state = replica.store.state()
        return {"first_seq": state.first_seq, "last_seq": state.last_seq, "messages": state.msgs,
                "bytes": state.bytes, "digest": f"{state.digest:016x}"}, ()

    async def consumer_state(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """Consumer `name`'s replicated state as the leader holds it, in `encode_consumer`'s format."""
        service = await leading_service(self.local, args)
        entry = service.replica.adapter.consumers.entries.get(str(args["name"]))  # type: ignore[union-attr]
        if entry is None:
            raise ConsumerNotFound()
        return {}, (encode_consumer(entry),)

    async def consumer_position(self, args: dict[str, Any], blobs: list[bytes]) -> Result:
        """Give restored consumer `name` its original's state (`blobs[0]`, `encode_consumer`'s), or without
        one move it past its original's ack floor (invariant 5)."""
        service = await leading_service(self.local, args)
        name, floor = str(args["name"]), int(args["ack_floor_stream_seq"])
        entry = service.replica.adapter.consumers.entries.get(name)  # type: ignore[union-attr]
        if entry is None:
            raise ConsumerNotFound()
        op: StateOp | SkipOp | None = None
        if blobs and blobs[0]:
            op = self._state_op(name, blobs[0])
        elif floor > 0:
            op = SkipOp(name=name, stream_seq=floor)
        if op is not None:
            proposal = await service.propose([op])
            await service.replica.runtime.outcome(service.replica.group, proposal)
            service.restart_from_state(name)
        state = entry.state
        return {"delivered": [state.delivered_consumer_seq, state.delivered_stream_seq],
                "ack_floor": [state.ack_floor_consumer_seq, state.ack_floor_stream_seq],
                "ack_floor_stream_seq": state.ack_floor_stream_seq, "num_ack_pending": state.num_ack_pending,
                "num_redelivered": state.num_redelivered}, ()

    def _state_op(self, name: str, blob: bytes) -> StateOp:
        try:
            saved = decode_consumer(blob)
            op = StateOp.of(name, saved.state)
            encode_ops([op])  # its bounds, before anything is proposed
        except (JsraftError, ValueError) as error:
            description = getattr(error, "description", None) or str(error)
            raise RestoreFailed(f"restore failed: consumer {name!r} state: {description}") from None
        if saved.name != name:
            raise RestoreFailed(f"restore failed: the state of consumer {saved.name!r} was given for {name!r}")
        return op

    async def _fill_gap(self, replica: "StreamReplica", next_seq: int) -> None:
        """Make `next_seq - 1` the stream's last sequence, every sequence added deleted (invariant 3)."""
        leader = await replica.wait_leader(1.0)
        last = leader.last_seq
        if next_seq <= last + 1:
            if next_seq <= last:
                raise RestoreFailed(f"restore failed: sequence {next_seq} is already in the stream")
            return
        if replica.store.state().msgs == 0:
            await replica.propose_op("propose_purge", None, next_seq, None)
            return
        for first in range(last + 1, next_seq, entries.MSGS_PER_ENTRY_MAX):
            count = min(entries.MSGS_PER_ENTRY_MAX, next_seq - first)
            placeholders = [(GAP_SUBJECT, b"", b"", 0, b"", 0)] * count
            await self._submit(replica, first, entries.encode_msgs(first, placeholders))
            for seq in range(first, first + count):
                await replica.propose_op("propose_delete", seq)

    async def _propose_run(self, replica: "StreamReplica", run: list[Restored]) -> None:
        """Contiguous messages, as MSGS entries with their own sequences and timestamps (invariant 2)."""
        await self._fill_gap(replica, run[0][0])
        batch: list[tuple[bytes, bytes, bytes, int, bytes, int]] = []
        first = run[0][0]
        size = 0
        for seq, timestamp_ns, subject, headers, payload in run:
            if batch and (len(batch) >= entries.MSGS_PER_ENTRY_MAX or size >= entries.MSGS_ENTRY_BYTES_SOFT_MAX):
                await self._submit(replica, first, entries.encode_msgs(first, batch))
                batch, first, size = [], seq, 0
            msg_id = parse_headers(headers).get("Nats-Msg-Id", "") if headers else ""
            batch.append((subject, headers, payload, timestamp_ns, msg_id.encode(), 0))
            size += len(subject) + len(headers) + len(payload)
        await self._submit(replica, first, entries.encode_msgs(first, batch))

    async def _submit(self, replica: "StreamReplica", first: int, entry: bytes) -> None:
        result = await replica.propose_entry(entry, expect_last_seq=first - 1)
        refused = getattr(result, "refused", None)
        if refused:
            seq, error = next(iter(refused.items()))
            raise RestoreFailed(f"restore failed: the stream refused message {seq}: {error.description}")
        if getattr(result, "finding", None) is not None:
            raise RestoreFailed(f"restore failed: the stream did not apply messages from {first} in order")
