"""The running AUDIT check, per-replica status, and drift advisories (layer L3).

Owns: judging the state tuples replicas reported for one AUDIT entry (`judge_audit`), the leader's
view of each replica (`ReplicaBoard`: `current`, `lag`, `repairing`, `drifted`, last audit index), and
the advisories published when drift is found and when it is repaired.

Advisory types (JetStream advisory style; `id` and `timestamp` are added by the runtime, which owns
clocks and randomness, through `Advisory.to_json`):

  io.nats.jetstream.advisory.v1.stream_drift           a replica's state disagrees with the group's
      stream, replica, leader (bool), index, audit_id, expected {state}, found {state}, findings [...]
  io.nats.jetstream.advisory.v1.stream_drift_repaired  a drifted replica agrees again
      stream, replica, index, fetched_msgs, deleted_seqs, reset, verified, state {state}, findings [...]
  io.nats.jetstream.advisory.v1.stream_audit_split     no state tuple is held by a majority
      stream, index, audit_id, reports {replica: {state}}

Invariants:
  1. A replica is drifted only against a state held by a strict majority of the group's voters; with
     no majority nobody is resynced automatically (there is nothing to resync from) — the split is
     reported instead.
  2. A leader that disagrees with its majority is told to step down (`AuditVerdict.leader_drifted`): it
     must not keep serving reads or catch-up from a store the group does not hold.
  3. Status precedence: drifted > repairing > lag > current.

Imports: L0, `stream` below it, attrs. Reference: DESIGN.md §8 (running audit, visible drift).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping

import attrs

from jsraft.errors import invariant
from jsraft.stream.drift import Finding
from jsraft.stream.results import AuditReport, Health

ADVISORY_PREFIX = "io.jsraft.advisory.v1."  # jsraft's own: not in nats-server's namespace
DRIFT_ADVISORY = ADVISORY_PREFIX + "stream_drift"
DRIFT_REPAIRED_ADVISORY = ADVISORY_PREFIX + "stream_drift_repaired"
AUDIT_SPLIT_ADVISORY = ADVISORY_PREFIX + "stream_audit_split"
LAG_ENTRIES_DEFAULT = 1000  # behind the leader's commit by more than this: `lag`, not `current`

Key = tuple[int, int, int, int, int]


class ReplicaState(enum.StrEnum):
    current = "current"
    lag = "lag"
    repairing = "repairing"
    drifted = "drifted"


def state_json(key: Key | None) -> dict[str, int] | None:
    if key is None:
        return None
    first_seq, last_seq, msgs, total_bytes, digest = key
    return {"first_seq": first_seq, "last_seq": last_seq, "messages": msgs, "bytes": total_bytes,
            "digest": f"{digest:016x}"}


@attrs.frozen(kw_only=True)
class Advisory:
    type: str
    body: dict[str, object]

    def to_json(self, event_id: str, timestamp: str) -> dict[str, object]:
        return {"type": self.type, "id": event_id, "timestamp": timestamp, **self.body}


@attrs.frozen(kw_only=True)
class AuditVerdict:
    index: int
    audit_id: int
    majority: Key | None
    agreeing: tuple[str, ...] = ()
    drifted: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    leader_drifted: bool = False

    @property
    def split(self) -> bool:
        return self.majority is None


def judge_audit(reports: Mapping[str, AuditReport], voters: Iterable[str], leader: str) -> AuditVerdict:
    """Compare the replicas' reports for one audit; the majority is counted over all voters."""
    voters = tuple(voters)
    indexes = {report.index for report in reports.values()}
    invariant(len(indexes) <= 1, "reports judged together are for one audit index")
    index = indexes.pop() if indexes else 0
    audit_id = next(iter(reports.values())).audit_id if reports else 0
    # Only voters count toward the majority; a learner's report is still judged against it.
    counts = Counter(report.agreement_key() for name, report in reports.items() if name in voters)
    majority = next((key for key, count in counts.most_common(1) if count > len(voters) // 2), None)
    missing = tuple(v for v in voters if v not in reports)
    if majority is None:
        return AuditVerdict(index=index, audit_id=audit_id, majority=None, missing=missing)
    agreeing = tuple(sorted(r for r, report in reports.items() if report.agreement_key() == majority))
    drifted = tuple(sorted(r for r, report in reports.items() if report.agreement_key() != majority))
    return AuditVerdict(index=index, audit_id=audit_id, majority=majority, agreeing=agreeing, drifted=drifted,
                        missing=missing, leader_drifted=leader in drifted)


@attrs.define
class ReplicaStatus:
    name: str
    state: ReplicaState = ReplicaState.current
    applied_index: int = 0
    lag: int = 0
    last_audit_index: int = 0
    agreed_at_last_audit: bool | None = None
    drifted_since_index: int = 0
    repairing: bool = False

    def to_json(self) -> dict[str, object]:
        """The replica entry of stream info's `cluster.replicas`, with the drift fields jsraft adds."""
        return {"name": self.name, "current": self.state is ReplicaState.current, "lag": self.lag,
                "status": str(self.state), "last_audit_index": self.last_audit_index,
                "agreed_at_last_audit": self.agreed_at_last_audit}


class ReplicaBoard:
    """The leader's view of every replica of one stream, fed by progress, audits and repairs."""

    def __init__(self, stream: str, replicas: Iterable[str], *, lag_entries_max: int = LAG_ENTRIES_DEFAULT) -> None:
        self.stream = stream
        self.lag_entries_max = lag_entries_max
        self.replicas: dict[str, ReplicaStatus] = {name: ReplicaStatus(name) for name in replicas}

    def _restate(self, status: ReplicaStatus) -> None:
        if status.drifted_since_index:
            status.state = ReplicaState.drifted
        elif status.repairing:
            status.state = ReplicaState.repairing
        elif status.lag > self.lag_entries_max:
            status.state = ReplicaState.lag
        else:
            status.state = ReplicaState.current

    def on_progress(self, replica: str, applied_index: int, commit_index: int, *, repairing: bool = False) -> None:
        """A replica's applied index (and whether Raft or its store says it is repairing)."""
        status = self.replicas.setdefault(replica, ReplicaStatus(replica))
        status.applied_index = applied_index
        status.lag = max(0, commit_index - applied_index)
        status.repairing = repairing
        self._restate(status)

    def on_verdict(self, verdict: AuditVerdict, reports: Mapping[str, AuditReport],
                   leader: str) -> list[Advisory]:
        """Record an audit's outcome; return the advisories it causes (drift found, drift repaired)."""
        if verdict.split:
            body = {"stream": self.stream, "index": verdict.index, "audit_id": verdict.audit_id,
                    "reports": {r: state_json(rep.agreement_key()) for r, rep in sorted(reports.items())}}
            return [Advisory(type=AUDIT_SPLIT_ADVISORY, body=body)]
        advisories: list[Advisory] = []
        for name in verdict.agreeing:
            status = self.replicas.setdefault(name, ReplicaStatus(name))
            status.last_audit_index, status.agreed_at_last_audit = verdict.index, True
            if status.drifted_since_index:
                status.drifted_since_index = 0
                advisories.append(self._repaired(name, verdict.index, state=verdict.majority))
            self._restate(status)
        for name in verdict.drifted:
            status = self.replicas.setdefault(name, ReplicaStatus(name))
            status.last_audit_index, status.agreed_at_last_audit = verdict.index, False
            newly = not status.drifted_since_index
            status.drifted_since_index = status.drifted_since_index or verdict.index
            self._restate(status)
            if newly:
                advisories.append(drift_advisory(self.stream, name, leader=name == leader, index=verdict.index,
                                                 audit_id=verdict.audit_id, expected=verdict.majority,
                                                 found=reports[name].agreement_key()))
        return advisories

    def mark_drifted(self, replica: str, index: int, findings: Iterable[Finding], found: Key | None = None,
                     expected: Key | None = None) -> Advisory | None:
        """A replica found drift in itself (recovery, the last-sequence check); None if already known."""
        status = self.replicas.setdefault(replica, ReplicaStatus(replica))
        if status.drifted_since_index:
            return None
        status.drifted_since_index = max(index, 1)
        self._restate(status)
        return drift_advisory(self.stream, replica, leader=False, index=index, audit_id=0, expected=expected,
                              found=found, findings=findings)

    def on_repair_started(self, replica: str) -> None:
        status = self.replicas.setdefault(replica, ReplicaStatus(replica))
        status.repairing = True
        self._restate(status)

    def on_repaired(self, replica: str, index: int, *, fetched_msgs: int = 0, deleted_seqs: int = 0,
                    reset: bool = False, verified: bool | None = None, state: Key | None = None) -> Advisory | None:
        """A catch-up finished. Verified against the group state: the replica is current again (advisory).
        Otherwise (`verified` None: the leader moved on meanwhile) the next audit decides, and says so."""
        status = self.replicas.setdefault(replica, ReplicaStatus(replica))
        status.repairing = False
        self._restate(status)
        if not verified or not status.drifted_since_index:
            return None
        status.drifted_since_index = 0
        self._restate(status)
        return self._repaired(replica, index, state=state, fetched_msgs=fetched_msgs, deleted_seqs=deleted_seqs,
                              reset=reset, verified=verified)

    def _repaired(self, replica: str, index: int, *, state: Key | None, fetched_msgs: int = 0,
                  deleted_seqs: int = 0, reset: bool = False, verified: bool | None = True) -> Advisory:
        return repaired_advisory(self.stream, replica, index=index, state=state, fetched_msgs=fetched_msgs,
                                 deleted_seqs=deleted_seqs, reset=reset, verified=verified)

    def statuses(self) -> list[ReplicaStatus]:
        return [self.replicas[name] for name in sorted(self.replicas)]


def drift_advisory(stream: str, replica: str, *, leader: bool, index: int, audit_id: int, expected: Key | None,
                   found: Key | None, findings: Iterable[Finding] = ()) -> Advisory:
    body = {"stream": stream, "replica": replica, "leader": leader, "index": index, "audit_id": audit_id,
            "expected": state_json(expected), "found": state_json(found),
            "findings": [finding.to_json() for finding in findings]}
    return Advisory(type=DRIFT_ADVISORY, body=body)


def repaired_advisory(stream: str, replica: str, *, index: int, state: Key | None, fetched_msgs: int = 0,
                      deleted_seqs: int = 0, reset: bool = False, verified: bool | None = True,
                      findings: Iterable[Finding] = ()) -> Advisory:
    """`findings`: what the repair itself found on the way (e.g. where a changed message was cut)."""
    body = {"stream": stream, "replica": replica, "index": index, "fetched_msgs": fetched_msgs,
            "deleted_seqs": deleted_seqs, "reset": reset, "verified": verified, "state": state_json(state),
            "findings": [finding.to_json() for finding in findings]}
    return Advisory(type=DRIFT_REPAIRED_ADVISORY, body=body)


def report_health(report: AuditReport) -> ReplicaState:
    """How a replica describes itself in its own report (before the leader judges it)."""
    if report.health is Health.drifted:
        return ReplicaState.drifted
    if report.health is Health.repairing or report.faults:
        return ReplicaState.repairing
    return ReplicaState.current
