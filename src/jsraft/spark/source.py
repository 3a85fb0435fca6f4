"""`JsraftDataSource`: the `jsraft` format of Spark's Python Data Source API (layer L6).

Owns: the format name, the schema, and the choice of reader or writer from the options: an online read
(`servers` + `stream`), an offline read (`load(path)`), a batch write (append only) and a streaming write.

Invariants:
  1. The schema is `arrow.SCHEMA_DDL`, whatever the read; a user-given schema other than it is refused.
  2. Save modes: Spark hands Python data sources append or overwrite; overwrite is refused with
     `BadOption` (a stream is an append-only log: nothing in it is overwritten).

Imports: pyspark, L6 siblings.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.datasource import DataSourceWriter
from pyspark.sql.types import StructType

from jsraft.spark.arrow import SCHEMA_DDL
from jsraft.spark.batch import BatchReader, BatchWriter
from jsraft.spark.errors import BadOption
from jsraft.spark.offline import OfflineReader
from jsraft.spark.options import ReadOptions, WriteOptions
from jsraft.spark.streaming import StreamReader, StreamWriter


class JsraftDataSource(DataSource):
    """`spark.dataSource.register(JsraftDataSource)`, then `format("jsraft")`."""

    @classmethod
    def name(cls) -> str:
        return "jsraft"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options)
        if options.path:
            return OfflineReader(options)
        return BatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = ReadOptions.parse(self.options)
        if options.path:
            raise BadOption("a streaming read needs servers and stream; load(path) is a batch read of a stopped "
                            "node's directory")
        return StreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise BadOption("save mode overwrite is not supported: a jsraft stream is an append-only log; use "
                            "mode('append') (purge the stream first to replace its contents)")
        return BatchWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            raise BadOption("output mode complete (overwrite) is not supported by the jsraft sink: use append "
                            "or update")
        return StreamWriter(WriteOptions.parse(self.options))
