"""A PySpark data source for jsraft streams (layer L6; the `spark` extra: pyspark >= 4.2, pyarrow).

    from jsraft.spark import JsraftDataSource
    spark.dataSource.register(JsraftDataSource)
    df = spark.read.format("jsraft").option("servers", "nats://127.0.0.1:4222").option("stream", "ORDERS").load()

Modules: `source` (`JsraftDataSource`, format `jsraft`), `batch` (batch read by sequence ranges, batch
write with deterministic message ids), `streaming` (offsets `{"seq": N}`, exactly-once sink), `offline`
(`load(path)` of a stopped node's directory, CRC-checked), `wire` (the cluster conversations, over
`jsraft.client`: batched direct gets, pipelined publishes), `bulk` (the columnar bulk reader),
`arrow` (schema and record batches),
`options`, `errors` (codes 21000–21099).

Invariants: everything handed to Spark is plain and picklable; connections are opened inside
`read()` / `write()` / planning calls and closed before they return.

Imports: L6 siblings. Never `jsraft.server` (a data source is a client of the cluster, or a reader of
a stopped node's files through the store code).
"""

from jsraft.spark.source import JsraftDataSource

__all__ = ["JsraftDataSource"]
