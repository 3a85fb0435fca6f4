"""The rows a read yields, as Arrow record batches (layer L6).

Owns: the read schema (`SCHEMA_DDL`, its Arrow twin `ARROW_SCHEMA`), `decode_bulk` (one packed chunk of
`$JSRAFT.BULK.GET` as a `RecordBatch`, its columns taken from the payload's buffers without a Python loop
per message), and `RowBuffer` (columns appended one message at a time, for the offline reader).

Invariants:
  1. Every batch has exactly `ARROW_SCHEMA`: stream string, seq int64, subject string, data binary,
     headers map<string, list<string>>, timestamp timestamp[us, UTC], ts_ns int64, every field nullable
     (Spark's DDL default). `timestamp` is `ts_ns // 1000` (Spark keeps microseconds); `ts_ns` keeps the
     nanoseconds.
  2. `headers` is null for a message stored without headers, else every field of its stored header
     block (repeated names keep every value, in order).

Imports: stdlib, pyarrow, L6 siblings.
Reference: `jsraft.server.api.bulk_get` (the chunk layout), Spark's Python Data Source API (Arrow batches).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jsraft.spark.errors import ReadFailed

SCHEMA_DDL = ("stream STRING, seq BIGINT, subject STRING, data BINARY, headers MAP<STRING, ARRAY<STRING>>, "
              "timestamp TIMESTAMP, ts_ns BIGINT")
HEADERS_TYPE = pa.map_(pa.string(), pa.list_(pa.string()))
ARROW_SCHEMA = pa.schema([
    ("stream", pa.string()), ("seq", pa.int64()), ("subject", pa.string()), ("data", pa.binary()),
    ("headers", HEADERS_TYPE), ("timestamp", pa.timestamp("us", tz="UTC")), ("ts_ns", pa.int64()),
])
BATCH_ROWS_MAX = 16_384



def header_fields(lines: list[bytes]) -> list[tuple[str, list[str]]] | None:
    """A header block's fields grouped by name, in first-seen order (invariant 2); None for none."""
    if not lines:
        return None
    grouped: dict[str, list[str]] = {}
    for line in lines:
        name, _, value = line.decode("utf-8", "replace").partition(":")
        grouped.setdefault(name.strip(), []).append(value.strip())
    return list(grouped.items())


class RowBuffer:
    """Columns filled one message at a time; `take()` empties them into a `RecordBatch` (invariant 1)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self._clear()

    def _clear(self) -> None:
        self.seqs: list[int] = []
        self.subjects: list[str] = []
        self.datas: list[bytes] = []
        self.headers: list[Any] = []
        self.ts_ns: list[int] = []

    def __len__(self) -> int:
        return len(self.seqs)

    def add(self, seq: int, subject: str, data: bytes, headers: list[tuple[str, list[str]]] | None,
            ts_ns: int) -> None:
        self.seqs.append(seq)
        self.subjects.append(subject)
        self.datas.append(data)
        self.headers.append(headers)
        self.ts_ns.append(ts_ns)

    def take(self) -> pa.RecordBatch:
        count = len(self.seqs)
        ts_ns = pa.array(self.ts_ns, pa.int64())
        columns = [
            pa.array([self.stream] * count, pa.string()), pa.array(self.seqs, pa.int64()),
            pa.array(self.subjects, pa.string()), pa.array(self.datas, pa.binary()),
            pa.array(self.headers, HEADERS_TYPE),
            pa.array([ns // 1000 for ns in self.ts_ns], pa.int64()).cast(pa.timestamp("us", tz="UTC")), ts_ns,
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


BULK_MAGIC = b"JSB1"


def _offsets(lengths: pa.Array) -> pa.Buffer:
    """Arrow's int32 offsets (count + 1, from 0) for values of the given lengths (a chunk < 2 GiB)."""
    sums = pc.cumulative_sum(lengths.cast(pa.int64())).cast(pa.int32())
    return pa.concat_arrays([pa.array([0], pa.int32()), sums]).buffers()[1]


def _bulk_headers(blob: bytes, lengths: list[int]) -> pa.Array:
    """The `headers` column: null for a message without headers (invariant 2), else its fields."""
    cells: list[Any] = []
    at = 0
    for length in lengths:
        if length:
            block = blob[at:at + length]
            cells.append(header_fields(block[:-4].split(b"\r\n")[1:]))
            at += length
        else:
            cells.append(None)
    return pa.array(cells, HEADERS_TYPE)


def decode_bulk(stream: str, payload: bytes) -> pa.RecordBatch:
    """One bulk chunk (layout in `jsraft.server.api.bulk_get`) as a batch of `ARROW_SCHEMA` (invariant 1)."""
    view = memoryview(payload)
    if bytes(view[:4]) != BULK_MAGIC or len(view) < 8:
        raise ReadFailed(f"stream {stream}: not a bulk chunk ({bytes(view[:8])!r})")
    count = int.from_bytes(view[4:8], "little")
    at = 8

    def column(kind: pa.DataType, width: int) -> pa.Array:
        nonlocal at
        buffer = pa.py_buffer(view[at:at + width * count])
        at += width * count
        return pa.Array.from_buffers(kind, count, [None, buffer])

    seqs, ts_ns = column(pa.int64(), 8), column(pa.int64(), 8)
    lengths = [column(pa.uint32(), 4) for _ in range(3)]
    totals = [int(pc.sum(c).as_py() or 0) for c in lengths]
    if at + sum(totals) != len(view):
        raise ReadFailed(f"stream {stream}: bulk chunk of {len(view)} bytes does not add up")
    subjects = pa.Array.from_buffers(pa.string(), count, [None, _offsets(lengths[0]), pa.py_buffer(view[at:at + totals[0]])])
    at += totals[0]
    headers = (_bulk_headers(payload[at:at + totals[1]], lengths[1].to_pylist()) if totals[1]
               else pa.nulls(count, HEADERS_TYPE))
    at += totals[1]
    datas = pa.Array.from_buffers(pa.binary(), count, [None, _offsets(lengths[2]), pa.py_buffer(view[at:])])
    stamps = pc.divide(ts_ns, 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays([pa.repeat(stream, count).cast(pa.string()), seqs, subjects, datas, headers,
                                       stamps, ts_ns], schema=ARROW_SCHEMA)
