"""Stream and consumer assignments: what the meta state says exists, where, and in which form.

Owns: `StreamAssignment` and `ConsumerAssignment`, and the one place a stored config is turned into an
assignment (`load_stream`, `load_consumer`), which decides whether the asset is *offline* (DESIGN §9).

A stream assignment holds the config as the raw JSON bytes received plus the parsed view, the peer set,
the group name, the created timestamp (decided by the proposing leader) and index, and the API level
the config requires (DESIGN §5).

Invariants:
  1. `config_raw` is never re-encoded: it is exactly the bytes the client sent, online or offline.
  2. Exactly one of `config` and `offline_reason` is None for a stream. An asset is offline when its
     required level is above this node's API level or its raw config does not decode strictly; it is
     then not started, but its subjects are still guarded (`subjects` is read leniently from the raw
     JSON) and it can still be deleted.
  3. `subjects` is the parsed config's for an online stream; for an offline one it is a conservative
     reading of the raw JSON (`lenient_subjects`), which gives the same tuple for any config a leader
     accepted, so every build guards the same subjects.

Imports: L0, L1 (`jsapi`, `subjects`), attrs, stdlib `json`. Reference: DESIGN.md §5 and §9; ADR-44;
nats-server `server/jetstream_cluster.go` (streamAssignment, consumerAssignment, unsupported assets).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from jsraft import subjects as subjectlib
from jsraft.errors import InvalidJSON, JsraftError
from jsraft.jsapi import API_LEVEL, StreamConfig, parse_stream_config, without_dynamic_metadata


@attrs.frozen(kw_only=True)
class StreamAssignment:
    name: str
    config_raw: bytes = attrs.field(repr=False)
    config: StreamConfig | None  # None exactly when offline (invariant 2)
    subjects: tuple[str, ...]  # the subjects guarded against overlap, online or offline
    peers: tuple[str, ...]  # the first is the preferred leader
    group: str
    created_ns: int
    created_index: int
    required_level: int
    offline_reason: str | None = None
    config_index: int = 0  # the meta log index of the entry that set `config_raw` (create or update)
    # The meta log index at which `peers` last changed (0: at creation). While it is the creation index,
    # the stream group's membership is still `peers` as created, which a new replica may bootstrap with;
    # after a change, a new replica starts blank and the group's leader adds it.
    peers_index: int = 0

    @property
    def peers_unchanged(self) -> bool:
        return self.peers_index in (0, self.created_index)

    @property
    def offline(self) -> bool:
        return self.offline_reason is not None


@attrs.frozen(kw_only=True)
class ConsumerAssignment:
    """A consumer's existence and config. Its config is kept raw: the strict `ConsumerConfig` decode
    arrives with the consumer package; until then a config that is not a JSON object is offline."""

    stream: str
    name: str
    config_raw: bytes = attrs.field(repr=False)
    created_ns: int
    created_index: int
    required_level: int
    offline_reason: str | None = None

    @property
    def offline(self) -> bool:
        return self.offline_reason is not None


def level_reason(required_level: int, api_level: int) -> str | None:
    """The offline reason for an asset needing `required_level` on a node at `api_level` (nats-server's
    wording), or None when the node supports it."""
    if required_level <= api_level:
        return None
    return f"unsupported - required API level: {required_level}, current API level: {api_level}"


def load_stream(
    name: str, config_raw: bytes, *, peers: tuple[str, ...], group: str, created_ns: int, created_index: int,
    required_level: int, api_level: int = API_LEVEL, config_index: int = 0, peers_index: int = 0,
) -> StreamAssignment:
    """Build an assignment from stored parts, loading it offline when it must be (invariant 2)."""
    reason = level_reason(required_level, api_level)
    config: StreamConfig | None = None
    if reason is None:
        try:
            config = parse_config(name, config_raw)
        except JsraftError as error:
            reason = f"unsupported - config error: {error.description}"
    subjects = config.subjects if config is not None else lenient_subjects(name, config_raw)
    return StreamAssignment(
        name=name, config_raw=bytes(config_raw), config=config, subjects=subjects, peers=tuple(peers),
        group=group, created_ns=created_ns, created_index=created_index, required_level=required_level,
        offline_reason=reason, config_index=config_index or created_index,
        peers_index=peers_index or created_index,
    )


def parse_config(name: str, config_raw: bytes) -> StreamConfig:
    """`parse_stream_config` for stream `name`; JSON nested too deeply for the parser is invalid JSON
    (10025), not a `RecursionError` escaping into apply."""
    try:
        config, _ = parse_stream_config(config_raw, expected_name=name)
    except RecursionError:
        raise InvalidJSON("invalid JSON: nested too deeply") from None
    return config


def lenient_subjects(name: str, config_raw: bytes) -> tuple[str, ...]:
    """The subjects an offline stream's raw config claims, read without the strict decoder.

    Guarding too much only refuses a create that overlaps; guarding too little could let two streams
    capture one subject. So: the valid strings of `subjects`, else the stream name (the default nats-server
    fills in) unless the stream is a mirror or sources-only stream, and the name when the JSON is unreadable.
    """
    try:
        data = json.loads(config_raw)
    except (ValueError, RecursionError):
        return (name,)
    if not isinstance(data, dict):
        return (name,)
    found: list[str] = []
    listed = data.get("subjects")
    for subject in listed if isinstance(listed, list) else ():
        if isinstance(subject, str) and subject not in found and subjectlib.is_valid(subject, wildcards=True):
            found.append(subject)
    if not found and data.get("mirror") is None and not data.get("sources"):
        found.append(name)
    return tuple(found)



def same_stream_config(assignment: StreamAssignment, config: StreamConfig | None, config_raw: bytes) -> bool:
    """Whether a create for an existing stream asks for the config it already has (idempotent create).

    Parsed configs are compared with defaults filled and `_nats.*` metadata dropped, as nats-server
    compares them; when either side is offline only identical bytes count as the same.
    """
    if assignment.config is not None and config is not None:
        return without_dynamic_metadata(assignment.config) == without_dynamic_metadata(config)
    return assignment.config_raw == config_raw


def decode_consumer_config(config_raw: bytes) -> dict[str, Any]:
    """The consumer config as a JSON object; raise `InvalidJSON` otherwise."""
    try:
        data = json.loads(config_raw)
    except (ValueError, RecursionError) as error:
        raise InvalidJSON(f"invalid JSON: {error}") from None
    if not isinstance(data, dict):
        raise InvalidJSON(f"invalid JSON: consumer config is a JSON {type(data).__name__}, not an object")
    return data


def load_consumer(
    stream: str, name: str, config_raw: bytes, *, created_ns: int, created_index: int, required_level: int,
    api_level: int = API_LEVEL,
) -> ConsumerAssignment:
    reason = level_reason(required_level, api_level)
    if reason is None:
        try:
            decode_consumer_config(config_raw)
        except JsraftError as error:
            reason = f"unsupported - config error: {error.description}"
    return ConsumerAssignment(
        stream=stream, name=name, config_raw=bytes(config_raw), created_ns=created_ns,
        created_index=created_index, required_level=required_level, offline_reason=reason,
    )


def same_consumer_config(assignment: ConsumerAssignment, config_raw: bytes) -> bool:
    if assignment.config_raw == config_raw:
        return True
    try:
        return decode_consumer_config(assignment.config_raw) == decode_consumer_config(config_raw)
    except JsraftError:
        return False
