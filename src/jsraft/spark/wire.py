"""The data source's conversations with a cluster (layer L6).

Owns: the stream's state (one `STREAM.INFO`, over `jsraft.client`), reading a sequence range as Arrow
batches (`$JSRAFT.BULK.GET`, jsraft's columnar read, over a blocking `bulk.BulkConnection`), the sequence
at a time (a binary search of one-message bulk reads), and publishing rows with every acknowledgement
awaited (over `jsraft.client`). No stream needs `allow_direct`: the bulk read is jsraft's own. Each public function is synchronous, because Spark calls
the data source from plain Python worker processes; a connection lives for one call and is never pickled.

Invariants:
  1. A range read returns exactly the live messages with `first <= seq <= last` matching the filters,
     in sequence order, each once: the server bounds a bulk read by `last_seq` and steps over deleted and
     purged sequences; each request resumes after the previous one's last sequence; overlapping filters
     are read separately and merged by sequence.
  2. The read ends only on a definite answer: an end-of-batch saying the range is done. Anything else — an
     error status, a malformed chunk, silence past `REPLY_TIMEOUT_S`, a closed connection — raises
     `ReadFailed`; never a short read.
  3. `publish` returns only when every row has its acknowledgement (stored or duplicate); the first
     error answer, a missing stream or a timeout raises `WriteFailed` (the Spark task fails and its retry
     publishes the same message ids, which the stream drops as duplicates).

Imports: stdlib, trio, pyarrow, L4 `client`, L0, L6 siblings. Never `jsraft.server`.
Reference: `jsraft.server.api.bulk_get` (the bulk chunk's layout).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import trio

from jsraft.client import Client, ClientError, connect
from jsraft.spark.arrow import ARROW_SCHEMA, decode_bulk
from jsraft.spark.bulk import BulkConnection
from jsraft.spark.errors import ReadFailed, WriteFailed

BULK_MSGS_MAX = 65_536  # one bulk request: about 10 MB of 128-byte messages in chunks of 8,192
REPLY_TIMEOUT_S = 30.0
PUBLISH_WINDOW = 2048  # publishes awaiting their acknowledgement at once
T = TypeVar("T")


def run(servers: Sequence[str], body: Callable[[Client], Awaitable[T]], *, rotate: int = 0) -> T:
    """`body(client)` on a fresh connection to the first server that answers (starting at `rotate`)."""
    async def main() -> T:
        errors = []
        order = [servers[(rotate + i) % len(servers)] for i in range(len(servers))]
        for url in order:
            try:
                client = await connect(url, name="jsraft-spark", pending_msgs_max=PUBLISH_WINDOW + 64)
            except ClientError as error:
                errors.append(str(error))
                continue
            try:
                return await body(client)
            finally:
                await client.close()
        raise ReadFailed(f"no server of {', '.join(servers)} answered: {'; '.join(errors)}")

    return trio.run(main)


def stream_state(servers: Sequence[str], stream: str) -> dict[str, Any]:
    """The stream's `state` (`first_seq`, `last_seq`, `messages`, ...) and the leader's name: one request."""
    async def body(client: Client) -> dict[str, Any]:
        info = await client.jetstream(timeout=10).stream_info(stream)
        return {**info.state, "leader": str((info.cluster or {}).get("leader") or "")}

    return run(servers, body)


def _bulk(servers: Sequence[str], rotate: int) -> BulkConnection:
    """A blocking connection to the first server that answers, from `rotate` on: partitions rotate over
    `servers`, and each server reads a range from its own replica when it may (server `bulk_get` invariant 2)."""
    errors: list[str] = []
    for i in range(len(servers)):
        try:
            return BulkConnection(servers[(rotate + i) % len(servers)], timeout_s=REPLY_TIMEOUT_S)
        except ReadFailed as error:
            errors.append(error.description)
    raise ReadFailed(f"no server of {', '.join(servers)} answered: {'; '.join(errors)}")


def _read_filter(conn: BulkConnection, stream: str, first: int, last: int, subject_filter: str | None,
                 batches: list[pa.RecordBatch]) -> None:
    """`first..last` through `$JSRAFT.BULK.GET` (jsraft's columnar read; same messages, same order as
    batched direct gets): chunk messages, then the EOB saying where it stopped and whether that is the end."""
    seq = first
    while seq <= last:
        request: dict[str, Any] = {"seq": seq, "last_seq": last, "batch": BULK_MSGS_MAX}
        if subject_filter:
            request["next_by_subj"] = subject_filter
        conn.request(f"$JSRAFT.BULK.GET.{stream}", request)
        for msg in conn.replies():
            raw = msg.headers or b""
            if raw.startswith(b"NATS/1.0\r\nJsraft-Bulk-Count: "):
                batches.append(decode_bulk(stream, msg.payload))
                continue
            if not raw.startswith(b"NATS/1.0 204"):
                raise ReadFailed(f"stream {stream}: bulk get answered {raw.splitlines()[0].decode()!r}")
            fields = dict(line.split(b": ", 1) for line in raw[:-4].split(b"\r\n")[1:])
            if fields.get(b"Jsraft-Bulk-End") != b"0":
                return
            seq = int(fields[b"Nats-Last-Sequence"]) + 1
            break


def read_range(servers: Sequence[str], stream: str, first: int, last: int, filters: Sequence[str],
               *, rotate: int = 0) -> list[pa.RecordBatch]:
    """The live messages `first..last` matching any of `filters` (all when empty) as Arrow batches
    (invariants 1 and 2)."""
    batches: list[pa.RecordBatch] = []
    with _bulk(servers, rotate) as conn:
        for subject_filter in filters or [None]:
            _read_filter(conn, stream, first, last, subject_filter, batches)
    if len(filters) > 1:  # invariant 1: overlapping filters, read one after the other, merged by seq
        table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
        if table.num_rows:
            table = table.sort_by("seq")
            seqs = table.column("seq").to_pylist()
            keep = [i for i, s in enumerate(seqs) if i == 0 or seqs[i - 1] != s]
            batches = table.take(pa.array(keep)).combine_chunks().to_batches()
    return batches


def _first_from(conn: BulkConnection, stream: str, seq: int) -> tuple[int, int] | None:
    """`(seq, ts_ns)` of the first live message at or after `seq`, or None: a one-message bulk get."""
    conn.request(f"$JSRAFT.BULK.GET.{stream}", {"seq": seq, "batch": 1})
    found = None
    for msg in conn.replies():
        raw = msg.headers or b""
        if raw.startswith(b"NATS/1.0\r\nJsraft-Bulk-Count: "):
            batch = decode_bulk(stream, msg.payload)
            found = (batch.column("seq")[0].as_py(), batch.column("ts_ns")[0].as_py())
        elif raw.startswith(b"NATS/1.0 204"):
            return found
        else:
            raise ReadFailed(f"stream {stream}: bulk get answered {raw.splitlines()[0].decode()!r}")
    return found  # pragma: no cover (replies() only ends by raising)


def seq_at_time(servers: Sequence[str], stream: str, first: int, last: int, ts_ns: int) -> int:
    """The first live sequence stored at or after `ts_ns` (`last + 1` when none): a binary search of
    one-message reads (stream timestamps rise with the sequence: the leader stamps them in order)."""
    with _bulk(servers, 0) as conn:
        low, high = first, last + 1
        while low < high:
            mid = (low + high) // 2
            found = _first_from(conn, stream, mid)
            if found is None or found[1] >= ts_ns:
                high = mid if found is None else min(mid, found[0])
            else:
                low = found[0] + 1
        return low


def publish(servers: Sequence[str], rows: Iterable[tuple[str, bytes, list[tuple[str, str]], str]]) -> tuple[int, int]:
    """Publish `(subject, data, header fields, msg_id)` rows, `PUBLISH_WINDOW` at a time; return
    `(stored, duplicates)` once every row is acknowledged (invariant 3)."""
    async def body(client: Client) -> tuple[int, int]:
        prefix = f"_INBOX.jsraft_spark_w.{secrets.token_hex(8)}"
        sub = await client.subscribe(prefix + ".*", pending_msgs_max=PUBLISH_WINDOW + 64)
        counts = [0, 0]
        in_flight: dict[str, str] = {}

        async def settle_one() -> None:
            try:
                msg = await sub.next_msg(timeout=REPLY_TIMEOUT_S)
            except ClientError as error:
                raise WriteFailed(f"{len(in_flight)} publishes not acknowledged: {error}") from None
            subject = in_flight.pop(msg.subject, None)
            if subject is None:
                return
            if msg.headers_raw and msg.headers_raw.startswith(b"NATS/1.0 503"):
                raise WriteFailed(f"no stream stores subject {subject!r} (no responders)")
            try:
                ack = json.loads(msg.data)
            except ValueError:
                raise WriteFailed(f"publish to {subject!r}: unreadable acknowledgement {msg.data[:200]!r}") from None
            if "error" in ack:
                raise WriteFailed(f"publish to {subject!r} refused: {ack['error'].get('description')} "
                                  f"(err_code {ack['error'].get('err_code')})")
            counts[1 if ack.get("duplicate") else 0] += 1

        for index, (subject, data, fields, msg_id) in enumerate(rows):
            while len(in_flight) >= PUBLISH_WINDOW:
                await settle_one()
            reply = f"{prefix}.{index}"
            in_flight[reply] = subject
            await client.publish(subject, data, reply=reply, headers=[*fields, ("Nats-Msg-Id", msg_id)])
        while in_flight:
            await settle_one()
        return counts[0], counts[1]

    return run(servers, body)
