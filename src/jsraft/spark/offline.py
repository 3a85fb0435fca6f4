"""The offline read: `spark.read.format("jsraft").load("/path/to/node-data")` (layer L6).

Owns: `OfflineReader`, which reads a stopped node's stream stores (or one store directory, such as a
backup's) with the store code itself, and its `OfflineRange` partitions.

Invariants:
  1. Read-only: the store is opened with `FileStore.open(OsDisk(d, read_only=True), read_only=True,
     use_index=False)`, exactly as `jsraft check` opens it: every record of every block is read and its
     CRC checked, nothing on disk changes (no torn tail cut, no file made or removed).
  2. A directory a running node holds is refused (`StoreLocked`, naming the directory and the pid), checked
     before and after the read, so a node that started meanwhile is noticed rather than read through.
  3. A store with a damaged or missing record is refused (`OfflineStoreDamaged`, naming the ranges): an
     analytics read never silently drops a message the node would repair.
  4. The rows are the online read's rows: the same schema, the same `stream` name, `headers` the stored
     header block's fields.

Imports: stdlib, pyarrow, pyspark, L0, L1 `disk`, L2 `store`, L6 siblings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from jsraft.disk import OsDisk
from jsraft.disk.lock import ensure_not_locked
from jsraft.errors import NoMessageFound
from jsraft.spark.arrow import RowBuffer, header_fields
from jsraft.spark.errors import BadOption, OfflineStoreDamaged
from jsraft.spark.options import ReadOptions, split_range
from jsraft.store import StoreConfig
from jsraft.store.filestore import FileStore

RUN_MAX = 4096


def locate(path: str, stream: str) -> tuple[str, str, str]:
    """`(node directory or '', stream name, store directory)` for a node data dir or a store dir."""
    if not os.path.isdir(path):
        raise BadOption(f"load path {path!r}: no such directory")
    streams = os.path.join(path, "streams")
    if os.path.isdir(streams):
        names = sorted(n for n in os.listdir(streams) if os.path.isdir(os.path.join(streams, n, "msgs")))
        if not stream and len(names) == 1:
            stream = names[0]
        if stream not in names:
            raise BadOption(f"load path {path!r}: option stream must name one of its streams {names}")
        return path, stream, os.path.join(streams, stream, "msgs")
    parts = os.path.abspath(path).split(os.sep)
    if len(parts) >= 4 and parts[-1] == "msgs" and parts[-3] == "streams":
        return os.sep.join(parts[:-3]), stream or parts[-2], path
    return "", stream or os.path.basename(os.path.abspath(path)), path


def open_store(node_dir: str, store_dir: str) -> FileStore:
    """Invariants 1–3."""
    for directory in (node_dir, store_dir):
        if directory:
            ensure_not_locked(directory)
    store = FileStore.open(OsDisk(store_dir, read_only=True), StoreConfig(), read_only=True, use_index=False)
    faults = store.faults()
    if faults:
        store.close()
        ranges = ", ".join(f"{f.first}..{f.last} ({f.kind})" for f in faults[:20])
        raise OfflineStoreDamaged(f"store {store_dir} has damaged or missing records: {ranges}; run "
                                  f"`jsraft check {store_dir}`, or read it online where it is repaired")
    return store


class OfflineRange(InputPartition):
    def __init__(self, first: int, last: int) -> None:
        super().__init__((first, last))
        self.first, self.last = first, last


class OfflineReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.node_dir, self.stream, self.store_dir = locate(options.path, options.stream)

    def partitions(self) -> Sequence[InputPartition]:
        store = open_store(self.node_dir, self.store_dir)
        try:
            state = store.state()
        finally:
            store.close()
        first = self.options.start_seq or max(state.first_seq, 1)
        last = state.last_seq if self.options.end_seq is None else min(self.options.end_seq, state.last_seq)
        ranges = split_range(first, last, self.options.partitions or 1)
        return [OfflineRange(a, b) for a, b in ranges] or [OfflineRange(1, 0)]

    def read(self, partition: OfflineRange) -> Iterator[pa.RecordBatch]:
        if partition.last < partition.first:
            return
        store = open_store(self.node_dir, self.store_dir)
        rows = RowBuffer(self.stream)
        filters = list(self.options.subjects) or None
        batches: list[pa.RecordBatch] = []
        try:
            seq = partition.first
            while seq <= partition.last:
                run = store.load_run(seq, RUN_MAX, filters)
                if not run:
                    try:
                        run = [store.load_next(filters, seq)]
                    except NoMessageFound:  # nothing more at or after seq
                        break
                for msg in run:
                    if msg.seq > partition.last:
                        break
                    lines = msg.headers[:-4].split(b"\r\n")[1:] if msg.headers else []
                    rows.add(msg.seq, msg.subject, msg.payload, header_fields(lines), msg.timestamp_ns)
                seq = run[-1].seq + 1
                if len(rows) >= RUN_MAX * 4:
                    batches.append(rows.take())
        finally:
            store.close()
        if self.node_dir:
            ensure_not_locked(self.node_dir)  # invariant 2: nobody started on it while we read
        if len(rows):
            batches.append(rows.take())
        yield from batches
