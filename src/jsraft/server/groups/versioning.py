"""What an operator is told about JetStream API levels (ADR-44) and offline assets (DESIGN §9) (layer L5).

Owns: the reasons this node cannot run a consumer (`consumer_offline_reason`) and the reason a stream is
stopped because of one (`stream_stopped_reason`, PR #7158); the JetStream startup banner (API level, store directory, limits: nats-server logs the same block
when JetStream starts); the warning logged for each asset this node loads offline, in nats-server's
words ("Detected unsupported stream '<account> > <stream>': <reason>") with what to do about it; and
jsraft's asset-offline advisory (`io.jsraft.advisory.v1.asset_offline`), raised with the warning.

Invariants:
  1. Each offline asset is warned about once per reason and node run: at startup (meta recovery) and
     whenever an applied entry makes it offline; the same reason again stays quiet.
  2. Nothing here changes state: it reads configs and assignments and writes log lines.

Imports: stdlib, L1 (`jsapi`), L3 (`consumer`, `meta`), server siblings (config).
Reference: nats-server `server/jetstream.go` (the JetStream banner), `server/jetstream_cluster.go`
(processStreamAssignment's unsupported warning), PR #7158 (offline assets).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from jsraft.consumer import ConsumerEntry, ConsumerSet
from jsraft.jsapi import consumer_required_level
from jsraft.jsapi.consumer_config import ConsumerConfig
from jsraft.meta import RequiredApiLevel, level_reason
from jsraft.server.settings.config import NodeConfig
from jsraft.replica.stream_events import JSRAFT_TYPE_PREFIX, jsraft_subject, now_rfc3339

log = logging.getLogger("jsraft.server")

ACCOUNT = "$G"  # jsraft has one account; nats-server names the global account so
_LEVEL_REASON = re.compile(r"required API level: (\d+)")
OFFLINE_TYPE = JSRAFT_TYPE_PREFIX + "asset_offline"


def consumer_offline_reason(entry: ConsumerEntry, api_level: int) -> str | None:
    """Why this node cannot run consumer `entry`, or None: a stored config it cannot decode, or a level
    above `api_level` (nats-server's reason texts). The replicated state is the same on every replica
    whatever its level; only what this node does with it differs."""
    if entry.config is None:
        return entry.offline_reason
    return level_reason(consumer_required_level(entry.config, entry.paused_until_ns), api_level)


def check_consumer_level(config: ConsumerConfig, paused_until_ns: int, api_level: int) -> None:
    """A leader at a lower API level than a consumer (or its pause) needs does not make it: it could not run
    it (the stream would stop at once). `RequiredApiLevel` (10185) names both levels."""
    needed = consumer_required_level(config, paused_until_ns)
    if needed > api_level:
        raise RequiredApiLevel(f"JetStream minimum api level required: the consumer needs API level {needed}, "
                               f"this server is at {api_level}")


def stream_stopped_reason(entries: Mapping[str, ConsumerEntry], api_level: int) -> str | None:
    """PR #7158: a consumer this node cannot run stops its whole stream here (the first by name)."""
    for name in sorted(entries):
        if consumer_offline_reason(entries[name], api_level) is not None:
            return f"stopped - unsupported consumer {json.dumps(name)}"
    return None


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
    `$JS.EVENT.ADVISORY.JSRAFT.ASSET_OFFLINE.<stream>[.<consumer>]`), queued by the caller."""
    subject = jsraft_subject(OFFLINE_TYPE, stream) + (f".{consumer}" if consumer else "")
    body: dict[str, Any] = {"type": OFFLINE_TYPE, "id": uuid.uuid4().hex, "timestamp": now_rfc3339(),
                            "server": node, "stream": stream}
    if consumer:
        body["consumer"] = consumer
    body["reason"] = reason
    return subject, body


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


class StoppedWatch:
    """One replica's view of PR #7158's rule: whether a consumer this node cannot run stops the stream
    here. `reason` is asked on the publish path, so it is recomputed only when the consumer set changed
    (a CONSUMER entry applied, or a snapshot replaced the set)."""

    def __init__(self, stream: str, node: str, api_level: int, warnings: OfflineWarnings | None,
                 publish: Callable[[str, dict[str, Any]], None] | None) -> None:
        self.stream, self.node, self.api_level = stream, node, api_level
        self._warnings = warnings if warnings is not None else OfflineWarnings()
        self._publish = publish
        self._of: ConsumerSet | None = None
        self._index = -1
        self._reason: str | None = None
        self._noted: str | None = None
        self._noted_of: ConsumerSet | None = None
        self._noted_index = -1

    def reason(self, consumers: ConsumerSet | None) -> str | None:
        if consumers is None:
            return None
        if consumers is not self._of or consumers.applied_index != self._index:
            self._of, self._index = consumers, consumers.applied_index
            self._reason = stream_stopped_reason(consumers.consumers, self.api_level)
        return self._reason

    def note(self, consumers: ConsumerSet | None) -> None:
        """Warn (versioning invariant 1) and raise the advisory when the stream stops or runs again."""
        if consumers is None or (consumers is self._noted_of and consumers.applied_index == self._noted_index):
            return
        self._noted_of, self._noted_index = consumers, consumers.applied_index
        for name, entry in sorted(consumers.consumers.items()):
            why = consumer_offline_reason(entry, self.api_level)
            if self._warnings.consumer(self.stream, name, why) and why and self._publish is not None:
                self._publish(*offline_advisory(self.node, self.stream, name, why))
        reason = self.reason(consumers)
        if reason == self._noted:
            return
        self._noted = reason
        if reason is not None:
            log.warning("stream '%s > %s' %s: no publishes, deliveries or expiries on this node until the "
                        "consumer is deleted or the server upgraded", ACCOUNT, self.stream, reason)
        else:
            log.info("stream '%s > %s' runs again: no unsupported consumer left", ACCOUNT, self.stream)
