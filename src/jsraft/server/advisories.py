"""`AdvisoryLog`: the stream advisories this node raised, kept for readers (layer L5).

Owns: stamping an `Advisory` (stream/audit.py) with its `id` and `timestamp` — the clock and randomness
the deterministic layer leaves to the runtime — logging it, and keeping the last `ADVISORIES_MAX` of them
in order, for stream info readers, monitoring and tests. (Publishing them on
`$JS.EVENT.ADVISORY.>` waits for the NATS client listener.)

Invariants:
  1. Bounded: the oldest advisory is dropped first.
  2. Each entry is the advisory's JSON exactly as it would be published.

Imports: stdlib, L3 (`stream` advisories).
"""

from __future__ import annotations

import collections
import datetime
import logging
import uuid
from typing import Any

from jsraft.stream import Advisory

log = logging.getLogger("jsraft.server.advisories")

ADVISORIES_MAX = 1024


class AdvisoryLog:
    def __init__(self, node_id: str, *, advisories_max: int = ADVISORIES_MAX) -> None:
        self.node_id = node_id
        self._entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=advisories_max)

    def record(self, advisory: Advisory) -> dict[str, Any]:
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        body = advisory.to_json(uuid.uuid4().hex, stamp)
        self._entries.append(body)
        log.warning("node %s advisory %s: %s", self.node_id, advisory.type.rsplit(".", 1)[-1],
                    {k: v for k, v in body.items() if k not in ("type", "id", "timestamp")})
        return body

    def entries(self, *, type: str | None = None, stream: str | None = None) -> list[dict[str, Any]]:
        return [entry for entry in self._entries
                if (type is None or entry["type"] == type) and (stream is None or entry.get("stream") == stream)]

    def __len__(self) -> int:
        return len(self._entries)
