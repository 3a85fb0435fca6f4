"""`AdvisoryLog`: the stream advisories this node raised, kept for readers (layer L3½).

Owns: stamping an `Advisory` (stream/audit.py) with its `id` and `timestamp` — the clock and randomness
the deterministic layer leaves to the runtime — logging it, keeping the last `ADVISORIES_MAX` of them
in order, for stream info readers, monitoring and tests, and publishing it on
`$JS.EVENT.ADVISORY.JSRAFT.<KIND>.<stream>` (`stream_events`) from the outbox `flush` empties. Also the
consumer events (`consumer_events`) and the other stream advisories: kept the same way and published on
the client port once the node's JetStream API attached its `publisher`.

Invariants:
  1. Bounded: the oldest advisory is dropped first.
  2. Each entry is the advisory's JSON exactly as it would be published.
  3. `publish` is never called from the Raft apply path (consumer_events invariant 2); what is raised
     there (`record`, `queue`) waits in the bounded outbox until a task calls `flush` (the stream
     manager's and every replica's loop do).

Imports: stdlib, L3 (`stream` advisories), replica siblings (`stream_events`).
"""

from __future__ import annotations

import collections
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from jsraft.replica.stream_events import jsraft_subject, now_rfc3339
from jsraft.stream import Advisory

log = logging.getLogger("jsraft.replica.advisories")

ADVISORIES_MAX = 1024


class AdvisoryLog:
    def __init__(self, node_id: str, *, advisories_max: int = ADVISORIES_MAX) -> None:
        self.node_id = node_id
        self._entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=advisories_max)
        self._outbox: collections.deque[tuple[str, dict[str, Any]]] = collections.deque(maxlen=advisories_max)
        self.publisher: Callable[[str, bytes], None] | None = None  # the client port (JsApi attaches it)

    def record(self, advisory: Advisory) -> dict[str, Any]:
        body = advisory.to_json(uuid.uuid4().hex, now_rfc3339())
        log.warning("node %s advisory %s: %s", self.node_id, advisory.type.rsplit(".", 1)[-1],
                    {k: v for k, v in body.items() if k not in ("type", "id", "timestamp")})
        self.queue(jsraft_subject(advisory.type, str(body.get("stream", ""))), body)
        return body

    def queue(self, subject: str, body: dict[str, Any]) -> None:
        """Keep `body` and publish it at the next `flush` (invariant 3: safe from an apply path)."""
        self._entries.append(body)
        self._outbox.append((subject, body))

    def flush(self) -> None:
        """Publish what was queued (dropped, still kept, when no client port is attached)."""
        while self._outbox:
            subject, body = self._outbox.popleft()
            if self.publisher is not None:
                self.publisher(subject, json.dumps(body, separators=(",", ":")).encode())

    def publish(self, subject: str, body: dict[str, Any]) -> None:
        """A consumer event (advisory or ack metric): kept, and published on `subject` when attached."""
        self._entries.append(body)
        log.debug("node %s event %s", self.node_id, subject)
        if self.publisher is not None:
            self.publisher(subject, json.dumps(body, separators=(",", ":")).encode())

    def entries(self, *, type: str | None = None, stream: str | None = None) -> list[dict[str, Any]]:
        return [entry for entry in self._entries
                if (type is None or entry["type"] == type) and (stream is None or entry.get("stream") == stream)]

    def __len__(self) -> int:
        return len(self._entries)
