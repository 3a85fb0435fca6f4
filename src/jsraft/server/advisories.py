"""`AdvisoryLog`: the stream advisories this node raised, kept for readers (layer L5).

Owns: stamping an `Advisory` (stream/audit.py) with its `id` and `timestamp` — the clock and randomness
the deterministic layer leaves to the runtime — logging it, and keeping the last `ADVISORIES_MAX` of them
in order, for stream info readers, monitoring and tests. (Publishing the stream advisories on
`$JS.EVENT.ADVISORY.>` waits for the NATS client listener.) Also the consumer events
(`consumer_events`): kept the same way and published on the client port once the node's JetStream API
attached its `publisher`.

Invariants:
  1. Bounded: the oldest advisory is dropped first.
  2. Each entry is the advisory's JSON exactly as it would be published.
  3. `publish` is never called from the Raft apply path (consumer_events invariant 2).

Imports: stdlib, L3 (`stream` advisories).
"""

from __future__ import annotations

import collections
import datetime
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from jsraft.stream import Advisory

log = logging.getLogger("jsraft.server.advisories")

ADVISORIES_MAX = 1024


class AdvisoryLog:
    def __init__(self, node_id: str, *, advisories_max: int = ADVISORIES_MAX) -> None:
        self.node_id = node_id
        self._entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=advisories_max)
        self.publisher: Callable[[str, bytes], None] | None = None  # the client port (JsApi attaches it)

    def record(self, advisory: Advisory) -> dict[str, Any]:
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        body = advisory.to_json(uuid.uuid4().hex, stamp)
        self._entries.append(body)
        log.warning("node %s advisory %s: %s", self.node_id, advisory.type.rsplit(".", 1)[-1],
                    {k: v for k, v in body.items() if k not in ("type", "id", "timestamp")})
        return body

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
