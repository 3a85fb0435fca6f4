"""Stream advisories as nats-server publishes them, and the subjects of jsraft's own (layer L3½).

Owns: the JSON and subjects of `$JS.EVENT.ADVISORY.STREAM.{CREATED,UPDATED,DELETED}.<stream>`
(`io.nats.jetstream.advisory.v1.stream_action`) and `$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<stream>`
(`io.nats.jetstream.advisory.v1.stream_leader_elected`; a replica is `current` when it is a voter, not
a learner still catching up), and the subject each of jsraft's own stream
advisories (`io.jsraft.advisory.v1.*`: stream_drift, stream_drift_repaired, stream_audit_split,
asset_offline) is published on: `$JS.EVENT.ADVISORY.JSRAFT.<KIND>.<stream>`.

Invariants:
  1. nats-server's advisories carry its field names and types (`TypedEvent`: `type`, `id`, `timestamp`),
     so its tools and clients read them unchanged; jsraft's own are under `io.jsraft.` and `JSRAFT.`,
     never in nats-server's namespace.
  2. Pure: nothing here publishes; the callers decide when (never from a Raft apply path).

Imports: stdlib. Reference: nats-server `server/jetstream_events.go` (JSStreamActionAdvisory,
JSStreamLeaderElectedAdvisory), `server/jetstream_api.go` (JSAdvisoryStream*Pre).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable
from typing import Any

STREAM_PREFIX = "$JS.EVENT.ADVISORY.STREAM"
ACTION_TYPE = "io.nats.jetstream.advisory.v1.stream_action"
LEADER_ELECTED_TYPE = "io.nats.jetstream.advisory.v1.stream_leader_elected"
JSRAFT_TYPE_PREFIX = "io.jsraft.advisory.v1."
JSRAFT_PREFIX = "$JS.EVENT.ADVISORY.JSRAFT"
_ACTION_SUBJECT = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _typed(event_type: str) -> dict[str, Any]:
    return {"type": event_type, "id": uuid.uuid4().hex, "timestamp": now_rfc3339()}


def stream_action(stream: str, action: str) -> tuple[str, dict[str, Any]]:
    """`action`: "create", "modify" or "delete" (nats-server's `ActionAdvisoryType`)."""
    return f"{STREAM_PREFIX}.{_ACTION_SUBJECT[action]}.{stream}", {**_typed(ACTION_TYPE), "stream": stream,
                                                                     "action": action}


def leader_elected(stream: str, leader: str, peers: Iterable[str], current: Iterable[str],
                   account: str = "$G") -> tuple[str, dict[str, Any]]:
    """The stream's new leader and its other replicas as nats-server's `PeerInfo`s."""
    caught_up = set(current)
    replicas = [{"name": peer, "current": peer in caught_up, "active": 0, "peer": peer}
                for peer in sorted(peers) if peer != leader]
    body = {**_typed(LEADER_ELECTED_TYPE), "account": account, "stream": stream, "leader": leader,
            "replicas": replicas}
    return f"{STREAM_PREFIX}.LEADER_ELECTED.{stream}", body


def jsraft_subject(event_type: str, stream: str) -> str:
    """`io.jsraft.advisory.v1.stream_drift_repaired` on stream S -> `$JS.EVENT.ADVISORY.JSRAFT.STREAM_DRIFT_REPAIRED.S`."""
    kind = event_type.removeprefix(JSRAFT_TYPE_PREFIX).upper()
    return f"{JSRAFT_PREFIX}.{kind}.{stream}"
