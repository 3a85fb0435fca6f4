"""A `jsraft` Spark sink whose micro-batch commit fails once: the fault the exactly-once tests inject.

`FailingCommitDataSource` (format `jsraft_failing_commit`) is `JsraftDataSource` whose streaming writer
raises in `commit` for the micro-batch `failCommitBatch` (default 1) the first time it is committed, and
records that it did by creating the file named by option `failCommitFlag`. Every row of that batch was
already published and acknowledged by then; Spark fails the query without recording the commit, and a
restart from the checkpoint replays the batch (same id, same offsets). Lives here, in the test kit,
because Spark's Python workers must import it by name (a class in a test module would not unpickle).
"""

from __future__ import annotations

import os
from typing import Any

from jsraft.spark import JsraftDataSource
from jsraft.spark.options import WriteOptions
from jsraft.spark.streaming import StreamWriter


class InjectedCommitFailure(RuntimeError):
    pass


class FailingCommitWriter(StreamWriter):
    def __init__(self, options: WriteOptions, flag: str, batch_id: int) -> None:
        super().__init__(options)
        self.flag, self.fail_batch_id = flag, batch_id

    def commit(self, messages: list[Any], batchId: int) -> None:
        if batchId == self.fail_batch_id and not os.path.exists(self.flag):
            with open(self.flag, "w") as marker:
                marker.write(f"{batchId}\n")
            raise InjectedCommitFailure(f"injected commit failure of micro-batch {batchId}")
        super().commit(messages, batchId)


class FailingCommitDataSource(JsraftDataSource):
    @classmethod
    def name(cls) -> str:
        return "jsraft_failing_commit"

    def streamWriter(self, schema: Any, overwrite: bool) -> StreamWriter:
        options = {str(k).lower(): v for k, v in self.options.items()}
        return FailingCommitWriter(WriteOptions.parse(self.options), options["failcommitflag"],
                                   int(options.get("failcommitbatch", 1)))
