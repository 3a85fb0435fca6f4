"""Values the stream state machine reports: health, apply results, audit reports (layer L3).

Owns: `Health` (a replica's own view of its store), `ApplyResult` (what applying one entry did, for
the runtime to answer clients) and `AuditReport` (a replica's state tuple at an AUDIT entry's index).

Invariants:
  1. `AuditReport.agreement_key()` is `StoreState.agreement_key()` at exactly the report's index.
  2. `ApplyResult` for MSGS acknowledges every seq in `first_seq..last_seq` not listed in `refused`.

Imports: `stream.entries`, `stream.drift`, `stream.outcomes`, attrs.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import attrs

from jsraft.stream.drift import Finding
from jsraft.stream.entries import EntryKind
from jsraft.stream.outcomes import ApiError


class Health(enum.StrEnum):
    current = "current"
    repairing = "repairing"
    drifted = "drifted"




@attrs.frozen(kw_only=True)
class AuditReport:
    """A replica's state tuple at exactly the index of an AUDIT entry."""

    index: int
    audit_id: int
    first_seq: int
    last_seq: int
    msgs: int
    bytes: int
    digest: int
    health: Health = Health.current
    faults: int = 0

    def agreement_key(self) -> tuple[int, int, int, int, int]:
        return (self.first_seq, self.last_seq, self.msgs, self.bytes, self.digest)


class ApplyResult(NamedTuple):
    """What applying one entry did. For MSGS, `refused` maps seqs the store refused to the error the
    runtime answers that publish with; every other seq in `first_seq..last_seq` is acknowledged."""

    index: int
    kind: EntryKind | None
    first_seq: int = 0
    last_seq: int = 0
    removed: int = 0
    refused: dict[int, ApiError] | None = None
    error: ApiError | None = None
    audit: AuditReport | None = None
    finding: Finding | None = None
    consumer_body: bytes | None = None
