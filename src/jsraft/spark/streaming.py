"""Structured Streaming: reading a stream by sequence offsets, writing exactly once (layer L6).

Owns: `StreamReader` (`spark.readStream.format("jsraft")`) and `StreamWriter`
(`df.writeStream.format("jsraft")`).

Invariants (reader):
  1. An offset is `{"seq": N}`: every sequence up to N was handed to Spark. A micro-batch is the range
     `(start, end]`, split into `SeqRange` partitions; the same range always yields the same rows, so
     Spark's replay of a planned batch after a failure is exact.
  2. `latestOffset` is one `STREAM.INFO` request (never a scan): the end is the stream's last sequence,
     at most `start + maxRecordsPerTrigger` (sequences, so never more rows than that), and with
     `Trigger.AvailableNow` at most the last sequence when the query started.
  3. Data loss: when sequences after `start` are below the stream's first sequence (purged or expired),
     `failOnDataLoss=true` (the default) fails the query naming the range; `false` logs a warning and
     the read goes on from the first sequence there is.

Invariants (writer):
  4. Exactly once, within the duplicate window: each row's message id is derived from the sink's identity
     (`sinkId`, else `checkpointLocation`), the micro-batch id, the partition and the row's content and
     occurrence (`batch.messages`), and every row is acknowledged before the task succeeds. Spark
     replays a micro-batch that was not committed with the same id and the same input, so the replay
     publishes the same ids and the stream stores nothing twice — provided the replay comes within the
     stream's `duplicate_window` (2 minutes by default; raise it for slow restarts) and the rows of the
     batch are deterministic.

Imports: stdlib, pyarrow, pyspark, L6 siblings.
Reference: Spark's Python Data Source API (`DataSourceStreamReader`, `DataSourceStreamArrowWriter`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow,
)

from jsraft.spark import wire
from jsraft.spark.batch import SeqRange, WriteReceipt, messages, task_partition
from jsraft.spark.errors import BadOption, DataLoss
from jsraft.spark.options import ReadOptions, WriteOptions, parse_time_ns, split_range

log = logging.getLogger("jsraft.spark")
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's MicroBatchExecution.BATCH_ID_KEY


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.target: int | None = None

    def _state(self) -> dict[str, Any]:
        state = wire.stream_state(self.options.servers, self.options.stream)
        return state

    def initialOffset(self) -> dict:
        state = self._state()
        first, last = int(state.get("first_seq", 0)), int(state.get("last_seq", 0))
        start = self.options.starting_offsets.strip()
        if start.lower() == "earliest":
            return {"seq": max(first, 1) - 1}
        if start.lower() == "latest":
            return {"seq": last}
        if start.isdigit():
            return {"seq": max(int(start), 1) - 1}
        ts_ns = parse_time_ns(start, "startingOffsets")
        return {"seq": wire.seq_at_time(self.options.servers, self.options.stream, max(first, 1), last, ts_ns) - 1}

    def _check_loss(self, after: int, state: dict[str, Any]) -> None:
        """Invariant 3."""
        first = int(state.get("first_seq", 0))
        if first > after + 1:
            text = (f"stream {self.options.stream}: sequences {after + 1}..{first - 1} are gone (purged or "
                    f"expired) before this query read them")
            if self.options.fail_on_data_loss:
                raise DataLoss(text + "; set failOnDataLoss=false to skip them")
            log.warning("%s; skipped (failOnDataLoss=false)", text)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        state = self._state()  # invariant 2: the one request
        after = int(start["seq"])
        self._check_loss(after, state)
        end = int(state.get("last_seq", 0))
        if self.target is not None:
            end = min(end, self.target)
        if isinstance(limit, ReadMaxRows):
            end = min(end, after + int(limit.max_rows))
        return {"seq": max(end, after)}

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = self.options.max_records_per_trigger
        return ReadMaxRows(rows) if rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = int(self._state().get("last_seq", 0))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        after, last = int(start["seq"]), int(end["seq"])
        if last <= after:
            return []
        state = self._state()
        self._check_loss(after, state)
        return [SeqRange(first, stop, index)
                for index, (first, stop) in enumerate(split_range(after + 1, last, self.options.partitions))]

    def read(self, partition: SeqRange) -> Iterator[pa.RecordBatch]:
        options = self.options
        yield from wire.read_range(options.servers, options.stream, partition.first, partition.last,
                                   options.subjects, rotate=partition.index)

    def commit(self, end: dict) -> None:
        """Nothing to release: the position lives in Spark's checkpoint, not in a consumer."""


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        if not options.sink_id:
            raise BadOption("a jsraft streaming write needs checkpointLocation (or option sinkId): its message "
                            "ids are derived from the sink's identity")
        self.options = options
        self.sink = hashlib.blake2b(options.sink_id.encode(), digest_size=8).hexdigest()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReceipt:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if batch_id is None:
            raise BadOption(f"no micro-batch id ({BATCH_ID_PROPERTY}) in the task: not a micro-batch query?")
        partition = task_partition()
        rows = messages(iterator, f"{self.sink}:{batch_id}", partition, self.options.stream)
        stored, duplicates = wire.publish(self.options.servers, rows)
        return WriteReceipt(partition, stored, duplicates)

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Every row was acknowledged in `write` (invariant 4): nothing is left to make durable."""

    def abort(self, messages: list[Any], batchId: int) -> None:
        """Rows already stored stay; the replay of this batch publishes the same ids (invariant 4)."""
