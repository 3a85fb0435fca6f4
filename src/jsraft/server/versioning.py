"""What an operator is told about JetStream API levels (ADR-44) and offline assets (DESIGN §9) (layer L5).

Owns: the JetStream startup banner (API level, store directory, limits: nats-server logs the same block
when JetStream starts); the warning logged for each asset this node loads offline, in nats-server's
words ("Detected unsupported stream '<account> > <stream>': <reason>") with what to do about it; and
jsraft's asset-offline advisory (`io.jsraft.advisory.v1.asset_offline`), raised with the warning.

Invariants:
  1. Each offline asset is warned about once per reason and node run: at startup (meta recovery) and
     whenever an applied entry makes it offline; the same reason again stays quiet.
  2. Nothing here changes state: it reads configs and assignments and writes log lines.

Imports: stdlib, L1 (`jsapi`), L3 (`meta` assignments), server siblings (config).
Reference: nats-server `server/jetstream.go` (the JetStream banner), `server/jetstream_cluster.go`
(processStreamAssignment's unsupported warning), PR #7158 (offline assets).
"""

from __future__ import annotations

import datetime
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from jsraft.server.config import NodeConfig

log = logging.getLogger("jsraft.server")

ACCOUNT = "$G"  # jsraft has one account; nats-server names the global account so
_LEVEL_REASON = re.compile(r"required API level: (\d+)")
OFFLINE_TYPE = "io.jsraft.advisory.v1.asset_offline"
OFFLINE_SUBJECT = "$JS.EVENT.ADVISORY.JSRAFT.ASSET_OFFLINE"


def banner_lines(config: NodeConfig) -> list[str]:
    """The JetStream block of the startup log."""
    return [
        "---------------- JETSTREAM ----------------",
        "  Max Memory:      unlimited",
        "  Max Storage:     unlimited",
        f'  Store Directory: "{config.store_dir}"',
        f"  API Level:       {config.api_level}",
        "-------------------------------------------",
    ]


def log_banner(config: NodeConfig) -> None:
    log.info("Starting JetStream")
    for line in banner_lines(config):
        log.info("%s", line)


def what_to_do(kind: str, reason: str) -> str:
    """The advice after a reason: upgrade to the level it names, or (a config this build cannot read at
    all) upgrade to a build that can."""
    found = _LEVEL_REASON.search(reason)
    level = f" to API level {found.group(1)}" if found else ""
    return f"delete the {kind} or upgrade the server{level}"


def unsupported_stream(stream: str, reason: str) -> str:
    return f"Detected unsupported stream '{ACCOUNT} > {stream}': {reason}; {what_to_do('stream', reason)}"


def unsupported_consumer(stream: str, consumer: str, reason: str) -> str:
    return (f"Detected unsupported consumer '{ACCOUNT} > {stream} > {consumer}': {reason}; "
            f"{what_to_do('consumer', reason)}")


def offline_advisory(node: str, stream: str, consumer: str | None, reason: str) -> tuple[str, dict[str, Any]]:
    """jsraft's asset-offline advisory: `(subject, body)` (`io.jsraft.advisory.v1.asset_offline` on
    `$JS.EVENT.ADVISORY.JSRAFT.ASSET_OFFLINE.<stream>[.<consumer>]`)."""
    subject = f"{OFFLINE_SUBJECT}.{stream}" + (f".{consumer}" if consumer else "")
    body: dict[str, Any] = {"type": OFFLINE_TYPE, "id": uuid.uuid4().hex, "timestamp": _now_rfc3339(),
                            "server": node, "stream": stream}
    if consumer:
        body["consumer"] = consumer
    body["reason"] = reason
    return subject, body


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


class OfflineWarnings:
    """Invariant 1: remembers what was already said."""

    def __init__(self) -> None:
        self._said: dict[tuple[str, ...], str] = {}

    def stream(self, stream: str, reason: str | None) -> bool:
        return self._say((stream,), reason, lambda r: unsupported_stream(stream, r))

    def consumer(self, stream: str, consumer: str, reason: str | None) -> bool:
        return self._say((stream, consumer), reason, lambda r: unsupported_consumer(stream, consumer, r))

    def _say(self, key: tuple[str, ...], reason: str | None, line: Callable[[str], str]) -> bool:
        """Log the warning when `reason` is new for `key`; forget `key` once it is online. True: logged."""
        if reason is None:
            self._said.pop(key, None)
            return False
        if self._said.get(key) == reason:
            return False
        self._said[key] = reason
        log.warning("%s", line(reason))
        return True
