"""Operating errors of the stream layer, with stable codes in jsraft's 205xx block (layer L3).

Owns: the `JsraftError` subclasses `stream` raises. Publish rejections are not exceptions: they are
`outcomes.ApiError` values with nats-server's codes. Codes here are jsraft's own (DESIGN: 20000 and up;
`raft` has 201xx, `runtime` 202xx, `meta` 203xx, `transport` 204xx).

Invariants:
  1. A code is never reused for another condition (`tests/unit/test_errors.py` checks the package).
  2. Damaged bytes (an entry, a snapshot, a catch-up message) are `CorruptRecord`s: the caller drops
     them and asks again; they never crash a node.

Imports: L0 (`errors`).
"""

from __future__ import annotations

from jsraft.errors import CorruptRecord, JsraftError


class MalformedEntry(CorruptRecord):
    """A stream entry that does not decode: a bug in its writer, or damage the WAL CRC did not catch."""

    err_code = 20500
    default_description = "malformed stream entry"


class MalformedSnapshot(CorruptRecord):
    err_code = 20502
    default_description = "malformed stream snapshot"


class StreamNotHealthy(JsraftError):
    """The replica's store cannot stand for the group now (drifted, repairing, or with faults)."""

    err_code = 20503
    http_code = 503
    default_description = "stream replica is not current"


class MalformedCatchup(CorruptRecord):
    err_code = 20504
    default_description = "malformed catch-up message"


class CatchupFailed(JsraftError):
    """A range catch-up could not complete (refused, inconsistent answers, or failed verification)."""

    err_code = 20505
    http_code = 503
    default_description = "stream catch-up failed"


class StaleSnapshot(JsraftError):
    """A leader's snapshot older than what this replica has applied: the runtime asks for a newer one."""

    err_code = 20506
    http_code = 503
    default_description = "stream snapshot is behind this replica"


class RepairSourceRefused(JsraftError):
    """This replica will not serve as a repair source now (its `RefusalCode` leads the description): it is
    not current, its store has faults, or its store disagreed with the majority at its latest audit. The
    repairing replica waits and asks again."""

    err_code = 20507
    http_code = 503
    default_description = "this replica is not a verified repair source"
