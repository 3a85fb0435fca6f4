"""The batched direct get of ADR-31: `$JS.API.DIRECT.GET.<stream>` with `batch` (layer L5).

Owns: the leader-side read of one chunk of a batch (`read_chunk`, behind the request method
`jsapi.msg_batch`) and the requester-side loop that turns chunks into the reply stream (`serve_batch`):
one message per stored message, with `Nats-Stream`, `Nats-Subject`, `Nats-Sequence`, `Nats-Time-Stamp`,
`Nats-Num-Pending` and `Nats-Last-Sequence` after its own headers, then an end-of-batch status message
`NATS/1.0 204 EOB` with `Nats-Num-Pending` and `Nats-Last-Sequence`; and the `multi_last` get
(`read_multi_last` behind `jsapi.msg_multi_last`, `serve_multi_last`).

Behaviour, as nats-server 2.15.1 answers (tests/server/test_direct_batch.py runs both and compares):
  1. The batch starts at the first live message at or after `seq` (matching `next_by_subj` when given):
     interior deletes and a purged head are stepped over, never taken for the end. Nothing there at all is
     `404 Message Not Found` and no EOB.
  2. `Nats-Num-Pending` on a message is how many matching messages follow it (counted when the batch
     starts); with `no_hdr` the messages carry no headers and the count is not decremented, so the EOB
     carries the count at the start, as nats-server's does. `Nats-Last-Sequence` is the previous message's
     sequence (0 for the first); on the EOB it is the last sequence sent.
  3. The batch stops after `batch` messages, at the end of the stream, or after the message that brings
     the bytes sent (subject + headers + payload) to `max_bytes` (default: the client's pending-bytes
     bound, nats-server's `max_pending`).
  4. `up_to_seq` is accepted and, as in nats-server 2.15.1, does not bound a `seq` / `next_by_subj`
     batch: a reader that wants a range stops at its end itself (the Spark reader does).
  5. `multi_last`: the last message of each subject matching any of the filters, as of `up_to_seq`
     (default: the stream's last sequence), in sequence order, at most `batch` of them; `Nats-Num-Pending`
     counts the messages found after each (sent or not), and the EOB adds `Nats-UpTo-Sequence`. None: `404 No Results`. More subjects than
     `MULTI_LAST_MAX`: `413 Too Many Results`, never a partial answer.
  6. The read is at the stream leader (like every direct get here), in chunks of at most `CHUNK_BYTES`
     per request so that a large batch never becomes one huge internal reply; the reply messages are
     published in sequence order.

Imports: stdlib, L0, L2 (`store` values), L3 (`consumer.position.num_pending`), server siblings.
Reference: ADR-31 (batched direct get), nats-server `server/stream.go` (`getDirectRequest`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from jsraft import subjects as subjectlib
from jsraft.consumer.position import num_pending
from jsraft.errors import JsraftError, NoMessageFound
from jsraft.server.api.jsapi_codec import direct_headers, status_headers
from jsraft.store.base import StoredMsg, StreamStore

CHUNK_BYTES = 1 << 20  # one internal request's reply budget (invariant 6)
CHUNK_MSGS = 8192  # and its message count bound, so a chunk of empty messages is bounded too
MULTI_LAST_MAX = 1024  # subjects one multi_last answer may carry (invariant 5)

CallStream = Callable[[str, str, dict[str, Any]], Awaitable[tuple[Any, list[bytes]]]]
Respond = Callable[[bytes, bytes | None], Any]


def read_chunk(store: StreamStore, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """Up to `count_max` live messages from `seq` matching `filter`, stopping after the one that brings
    the bytes read to `bytes_max`; with `pending`, also the matching count from `seq` on (invariant 2)."""
    seq = max(int(args["seq"]), 1)
    subject_filter = str(args.get("filter") or "") or None
    count_max, bytes_max = int(args["count_max"]), int(args["bytes_max"])
    result: dict[str, Any] = {"stream_last_seq": store.state().last_seq}
    if args.get("pending"):
        result["num_pending"] = num_pending(store, [subject_filter] if subject_filter else [], seq - 1)
    msgs: list[StoredMsg] = []
    size = 0
    end = False
    while len(msgs) < count_max and size < bytes_max:
        run = store.load_run(seq, min(count_max - len(msgs), CHUNK_MSGS), subject_filter)
        if not run:
            try:
                run = [store.load_next(subject_filter, seq)]
            except NoMessageFound:
                end = True
                break
        for msg in run:
            msgs.append(msg)
            size += len(msg.subject) + len(msg.headers) + len(msg.payload)
            if size >= bytes_max or len(msgs) >= count_max:
                break
        seq = msgs[-1].seq + 1
    # Two blobs, not two per message: an internal reply carries a bounded number of blobs (`rpc`).
    result["msgs"] = [[m.subject, m.seq, m.timestamp_ns, len(m.headers), len(m.payload)] for m in msgs]
    result["end"] = end
    return result, [b"".join(m.headers for m in msgs), b"".join(m.payload for m in msgs)]


def batch_headers(stream: str, subject: str, seq: int, timestamp_ns: int, headers: bytes, pending: int,
                  last_seq: int) -> bytes:
    """A batched message's header block (invariant 2)."""
    extra = f"Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last_seq}\r\n".encode()
    return direct_headers(stream, subject, seq, timestamp_ns, headers)[:-2] + extra + b"\r\n"


def eob_headers(pending: int, last_seq: int) -> bytes:
    return f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last_seq}\r\n\r\n".encode()


async def serve_batch(call_stream: CallStream, respond: Respond, stream: str, *, seq: int, subject_filter: str,
                      batch: int, max_bytes: int, no_hdr: bool) -> None:
    """Answer one batch request: the messages, then the EOB (invariants 1–4, 6)."""
    count_left, bytes_left = batch, max_bytes
    pending: int | None = None
    last_seq = 0
    while count_left > 0 and bytes_left > 0:
        args = {"seq": seq, "filter": subject_filter, "count_max": count_left,
                "bytes_max": min(bytes_left, CHUNK_BYTES), "pending": pending is None}
        try:
            result, blobs = await call_stream(stream, "jsapi.msg_batch", args)
        except JsraftError as error:
            if last_seq:
                break  # a batch that stops early still ends with its EOB
            code, text = (404, "Message Not Found") if isinstance(error, NoMessageFound) else (500, error.description)
            respond(b"", status_headers(code, text))
            return
        if pending is None:
            pending = int(result["num_pending"])
        rows: Sequence[list[Any]] = result["msgs"]
        if not rows and not last_seq:
            respond(b"", status_headers(404, "Message Not Found"))
            return
        headers_at = payload_at = 0
        for subject, msg_seq, timestamp_ns, headers_len, payload_len in rows:
            headers = blobs[0][headers_at:headers_at + headers_len]
            payload = blobs[1][payload_at:payload_at + payload_len]
            headers_at += headers_len
            payload_at += payload_len
            block = None
            if not no_hdr:
                pending = max(pending - 1, 0)
                block = batch_headers(stream, subject, msg_seq, timestamp_ns, headers, pending, last_seq)
            respond(payload, block)
            last_seq = int(msg_seq)
            bytes_left -= len(subject) + len(headers) + len(payload)
        count_left -= len(rows)
        seq = last_seq + 1
        if result["end"]:
            break
    respond(b"", eob_headers(pending or 0, last_seq))


def _lasts_as_of(store: StreamStore, filters: list[str], up_to_seq: int) -> list[StoredMsg]:
    """The last message per subject among those at or below `up_to_seq` (a forward walk)."""
    lasts: dict[str, StoredMsg] = {}
    seq = 1
    while seq <= up_to_seq:
        run = store.load_run(seq, CHUNK_MSGS, filters)
        if not run:
            try:
                run = [store.load_next(filters, seq)]
            except NoMessageFound:
                break
        for msg in run:
            if msg.seq > up_to_seq:
                break
            lasts[msg.subject] = msg
        seq = run[-1].seq + 1
    return list(lasts.values())


def read_multi_last(store: StreamStore, args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """The leader side of a `multi_last` get (invariant 5)."""
    filters = [str(f) for f in args["filters"]]
    for subject_filter in filters:
        subjectlib.validate(subject_filter, wildcards=True)
    last_seq = store.state().last_seq
    up_to = min(int(args.get("up_to_seq") or 0) or last_seq, last_seq)
    if up_to >= last_seq:
        names: set[str] = set()
        for subject_filter in filters:
            names.update(store.subject_counts(subject_filter))
        if len(names) > MULTI_LAST_MAX:
            return {"too_many": True}, []
        msgs = [store.load_last(name) for name in names]
    else:
        msgs = _lasts_as_of(store, filters, up_to)
    if len(msgs) > MULTI_LAST_MAX:
        return {"too_many": True}, []
    msgs.sort(key=lambda m: m.seq)
    rows = [[m.subject, m.seq, m.timestamp_ns, len(m.headers), len(m.payload)] for m in msgs]
    return {"msgs": rows, "up_to": up_to}, [b"".join(m.headers for m in msgs), b"".join(m.payload for m in msgs)]


async def serve_multi_last(call_stream: CallStream, respond: Respond, stream: str, *, filters: Sequence[str],
                           up_to_seq: int, batch: int) -> None:
    """Answer one `multi_last` request: the messages, then the EOB (invariant 5)."""
    args = {"filters": list(filters), "up_to_seq": up_to_seq}
    try:
        result, blobs = await call_stream(stream, "jsapi.msg_multi_last", args)
    except JsraftError as error:
        code, text = (404, "Message Not Found") if isinstance(error, NoMessageFound) else (500, error.description)
        respond(b"", status_headers(code, text))
        return
    if result.get("too_many"):
        respond(b"", status_headers(413, "Too Many Results"))
        return
    total = len(result["msgs"])  # pending counts every subject found, sent in this batch or not
    rows = result["msgs"][:batch] if batch > 0 else result["msgs"]
    if not rows:
        respond(b"", status_headers(404, "No Results"))  # nats-server's words for an empty multi_last
        return
    headers_at = payload_at = last_seq = 0
    for index, (subject, msg_seq, timestamp_ns, headers_len, payload_len) in enumerate(rows):
        headers = blobs[0][headers_at:headers_at + headers_len]
        payload = blobs[1][payload_at:payload_at + payload_len]
        headers_at, payload_at = headers_at + headers_len, payload_at + payload_len
        # `no_hdr` is not applied: nats-server 2.15.1 sends a multi_last answer's headers regardless.
        block = batch_headers(stream, subject, msg_seq, timestamp_ns, headers, total - index - 1, last_seq)
        respond(payload, block)
        last_seq = int(msg_seq)
    pending = total - len(rows)
    respond(b"", f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last_seq}\r\n"
                 f"Nats-UpTo-Sequence: {result['up_to']}\r\n\r\n".encode())
