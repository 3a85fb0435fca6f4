"""`Violation`: what a checker raises when an invariant breaks, and the names of the invariants.

Owns: the exception every checker raises and the stable invariant names the CLI's `--json` report and the
tests use. A violation carries a one-line detail; the simulator adds the seed and the trace.

Invariants:
  1. `Violation.invariant` is one of `INVARIANTS`.

Imports: stdlib.
"""

from __future__ import annotations

INVARIANTS = {
    "election-safety": "at most one leader per term",
    "double-vote": "a replica grants its vote to at most one candidate per term, across restarts",
    "repairing-vote": "a repairing replica never grants a (pre-)vote",
    "log-matching": "an (index, term) pair always names the same entry with the same predecessor term",
    "state-machine-safety": "every replica applies the same entry at each index (and snapshots agree)",
    "leader-completeness": "a leader of a term >= an acknowledged entry's term holds that entry",
    "acked-lost": "an acknowledged entry is applied on every replica and durable on a majority at the end",
    "durability": "a replica whose disk was never corrupted never recovers damaged (fsync contract)",
    "term-inflation": "a replica cut off from a quorum never raises its term by itself (pre-vote)",
    "stream-audit": "at each AUDIT entry every replica that vouches for its store reports the same state tuple, "
                    "the one the committed log gives (stream app)",
    "ack-floor": "a consumer's ack floor never moves back in the log, and every replica's equals the log's at "
                 "each index (consumer app)",
    "consumer-state": "every replica's consumer set equals the one the committed log gives at the same index, "
                      "also after a snapshot restore (consumer app)",
    "acked-redelivered": "a message a committed ACK acknowledged is never delivered again (consumer app)",
    "store-lock": "a second process never opens a running node's store directory (storage faults)",
    "liveness": "after healing, a leader commits a new entry on every member, and nobody is repairing",
    "crash": "the code under test raised (an invariant() or an unexpected exception)",
}


class Violation(Exception):
    def __init__(self, invariant: str, detail: str) -> None:
        if invariant not in INVARIANTS:
            raise ValueError(f"unknown invariant name {invariant!r}")
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail
