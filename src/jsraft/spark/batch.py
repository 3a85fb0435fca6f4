"""Batch read and batch write of a stream (layer L6).

Owns: `BatchReader` (`spark.read.format("jsraft")`), its `SeqRange` partitions, the planning shared with
the streaming reader (`plan_start`), `BatchWriter` (`df.write.format("jsraft").mode("append")`) and the
row → message conversion with deterministic message ids shared with the streaming writer (`messages`).

Invariants:
  1. A read is a snapshot: the last sequence is pinned when the query is planned (`endSeq`, default the
     stream's last sequence then); publishes after that are never read by this query, and a retried task
     reads exactly the rows its first attempt did (sequences below the pin never change, except by
     deletion).
  2. Partitions are contiguous, ordered, non-overlapping sequence ranges; each task reads its own range
     in Arrow batches from the server its index picks in `servers` (partition i: the i-th, modulo, then the
     next that answers), so partitions spread over the replicas. That server reads the range from its own
     replica when it has applied all of it and is current, else at the stream leader (server
     `bulk_get` invariant 2): any replica, never a partial or stale range.
  3. A row's message id is the user's `msg_id` when given, else derived from the write's identity
     (a job id fixed when the write is planned; a streaming sink's id and batch id), the partition, the
     row's content and its occurrence among identical rows of that partition: a retried task, which sees
     the same rows of the same partition in any order, publishes exactly the same ids, and the stream
     drops them as duplicates within its duplicate window (`duplicate_window`, 2 minutes by default).
  4. A write task returns only after every row is acknowledged (`wire.publish`).

Imports: stdlib, pyarrow, pyspark, L0, L6 siblings.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceReader, InputPartition, WriterCommitMessage

from jsraft.spark import wire
from jsraft.spark.errors import BadOption
from jsraft.spark.options import ReadOptions, WriteOptions, split_range


class SeqRange(InputPartition):
    """Sequences `first..last` of `stream` (both included), the `index`-th range of the read (invariant 2)."""

    def __init__(self, first: int, last: int, index: int) -> None:
        super().__init__((first, last, index))
        self.first, self.last, self.index = first, last, index


def plan_start(options: ReadOptions, state: dict[str, Any]) -> int:
    """The first sequence a read starts at: `startSeq`, the first at or after `startTime`, else the
    stream's first."""
    first, last = int(state.get("first_seq", 0)), int(state.get("last_seq", 0))
    if options.start_seq is not None:
        return options.start_seq
    if options.start_time_ns is not None:
        return wire.seq_at_time(options.servers, options.stream, max(first, 1), last, options.start_time_ns)
    return max(first, 1)


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        state = wire.stream_state(options.servers, options.stream)
        end = int(state.get("last_seq", 0)) if options.end_seq is None else options.end_seq  # invariant 1
        ranges = split_range(plan_start(options, state), end, options.partitions)
        if not ranges:
            return [SeqRange(1, 0, 0)]  # Spark wants a partition; this one reads nothing
        return [SeqRange(first, last, index) for index, (first, last) in enumerate(ranges)]

    def read(self, partition: SeqRange) -> Iterator[pa.RecordBatch]:
        if partition.last < partition.first:
            return
        options = self.options
        yield from wire.read_range(options.servers, options.stream, partition.first, partition.last,
                                   options.subjects, rotate=partition.index)


# --- Writing --------------------------------------------------------------------------------------------


class WriteReceipt(WriterCommitMessage):
    def __init__(self, partition: int, stored: int, duplicates: int) -> None:
        self.partition, self.stored, self.duplicates = partition, stored, duplicates


def _header_fields(value: Any) -> list[tuple[str, str]]:
    """A `headers` cell (map<string, array<string>> or map<string, string>) as header fields."""
    fields: list[tuple[str, str]] = []
    for name, values in value or ():
        for item in values if isinstance(values, (list, tuple)) else [values]:
            if item is not None:
                fields.append((str(name), str(item)))
    return fields


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index).to_pylist()


def messages(batches: Iterator[pa.RecordBatch], identity: str, partition: int,
             expected_stream: str) -> Iterator[tuple[str, bytes, list[tuple[str, str]], str]]:
    """`(subject, data, header fields, msg_id)` per row (invariant 3)."""
    seen: dict[bytes, int] = {}
    prefix = f"jsraft-spark:{identity}:{partition}:"
    for batch in batches:
        subjects = _column(batch, "subject")
        if subjects is None:
            raise BadOption("a jsraft write needs a string column 'subject' (and 'data'; optional 'headers', "
                            "'msg_id')")
        datas = _column(batch, "data") or [None] * len(subjects)
        headers = _column(batch, "headers") or [None] * len(subjects)
        msg_ids = _column(batch, "msg_id") or [None] * len(subjects)
        for subject, data, header, msg_id in zip(subjects, datas, headers, msg_ids, strict=True):
            if not subject:
                raise BadOption("a row has a null or empty 'subject'")
            payload = data.encode() if isinstance(data, str) else bytes(data or b"")
            fields = _header_fields(header)
            if expected_stream:
                fields.append(("Nats-Expected-Stream", expected_stream))
            if not msg_id:
                digest = hashlib.blake2b(repr((subject, payload, fields)).encode(), digest_size=12).digest()
                occurrence = seen.get(digest, 0)
                seen[digest] = occurrence + 1
                msg_id = f"{prefix}{digest.hex()}:{occurrence}"
            yield subject, payload, fields, str(msg_id)


def task_partition() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class BatchWriter(DataSourceArrowWriter):
    """Append only (invariant 4); the job id is fixed here, on the driver, once per write."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.job_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReceipt:
        partition = task_partition()
        rows = messages(iterator, self.job_id, partition, self.options.stream)
        stored, duplicates = wire.publish(self.options.servers, rows)
        return WriteReceipt(partition, stored, duplicates)
