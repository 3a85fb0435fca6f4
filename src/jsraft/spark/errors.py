"""The Spark data source's errors (layer L6): codes 21000–21099.

Invariants:
  1. An `err_code` here is never reused or renumbered (jsraft.errors invariant 1).
  2. A message names what to change: the option and the value it refused, the missing sequence range, the
     stream, or the directory and the pid that holds it.

Imports: L0 only.
"""

from __future__ import annotations

from jsraft.errors import JsraftError


class SparkSourceError(JsraftError):
    """Base of the data source's errors."""

    err_code = 21000
    http_code = 400
    default_description = "jsraft Spark data source error"


class BadOption(SparkSourceError):
    """An option is missing, malformed or not supported (a save mode other than append included)."""

    err_code = 21001


class DataLoss(SparkSourceError):
    """A streaming read's next sequences were purged or expired before they were read
    (`failOnDataLoss`, the default)."""

    err_code = 21002


class ReadFailed(SparkSourceError):
    """The cluster answered a read with something other than messages and an end of batch."""

    err_code = 21003
    http_code = 500


class WriteFailed(SparkSourceError):
    """A row was not acknowledged by the stream (an error answer, no stream, or no answer in time)."""

    err_code = 21004
    http_code = 500


class OfflineStoreDamaged(SparkSourceError):
    """An offline store has records that failed their CRC check, or is missing pieces."""

    err_code = 21005
    http_code = 500
