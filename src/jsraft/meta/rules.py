"""Validation rules shared by the leader (before proposing) and by apply (after committing).

Owns: the checks whose outcome depends only on configs and on which streams exist — subject overlap and
what a stream update may change — so the leader and every replica decide them with the same code. The
leader runs them against committed state plus its in-flight proposals; apply runs them against
committed state alone, which makes apply safe even for entries a previous leader proposed without
knowing of ours.

Invariants:
  1. Pure: no state is read except the arguments; the same arguments give the same answer everywhere.
  2. Update rules follow nats-server's `configUpdateCheck` wording, so clients see the same text.
  3. `find_overlap` answers what comparing every pair with `subjects.overlaps` answers, in the same order
     (the first token only rules pairs out that `overlaps` would refuse too).

Imports: L0, L1 (`jsapi`, `subjects`), `meta.errors`. Reference: nats-server `server/stream.go`
(configUpdateCheck), `server/jetstream_cluster.go` (jsClusteredStreamRequest subject overlap check).
"""

from __future__ import annotations

from collections.abc import Iterable

from jsraft import subjects as subjectlib
from jsraft.errors import InvalidConfig
from jsraft.jsapi import Placement, Retention, StreamConfig
from jsraft.meta.errors import RequiredApiLevel, StreamSubjectOverlap

_UPDATE_PREFIX = "stream configuration update can not"
_WILD = frozenset(("*", ">"))


def find_overlap(
    subjects: Iterable[str], others: Iterable[tuple[str, tuple[str, ...]]], *, exclude: str | None = None
) -> tuple[str, str, str] | None:
    """The first `(other stream, its subject, our subject)` that overlaps, skipping stream `exclude`.

    Invariant 3: a stream none of whose subjects can meet ours by its first token is passed over without
    comparing its subjects whole (two subjects overlap only if their first tokens are equal or one is a
    wildcard), so the scan a create makes over every stream costs little per stream."""
    mine = tuple(subjects)
    heads = {subject.partition(".")[0] for subject in mine}
    anything = bool(heads & _WILD)  # a subject of ours starting with a wildcard may meet any other
    for name, theirs in others:
        if name == exclude:
            continue
        if not anything and not any(other.partition(".")[0] in heads or other.partition(".")[0] in _WILD
                                    for other in theirs):
            continue
        for subject in mine:
            for other in theirs:
                if subjectlib.overlaps(subject, other):
                    return name, other, subject
    return None


def check_no_overlap(
    subjects: Iterable[str], others: Iterable[tuple[str, tuple[str, ...]]], *, exclude: str | None = None
) -> None:
    """Raise `StreamSubjectOverlap` (10065) if any subject overlaps another stream's, in nats-server's
    exact words ("subjects overlap with an existing stream"; `find_overlap` names the conflict)."""
    if find_overlap(subjects, others, exclude=exclude) is not None:
        raise StreamSubjectOverlap()


def check_update(old: StreamConfig, new: StreamConfig) -> None:
    """What an update may not change (nats-server `configUpdateCheck`); raise `InvalidConfig` (10052).

    Replicas may change (the leader re-places); subjects may change (checked for overlap separately).
    A placement change would be a stream move, which jsraft does not implement yet, so it is refused
    rather than silently ignored.
    """
    if new.name != old.name:
        raise InvalidConfig("stream configuration name must match original")
    if new.storage != old.storage:
        raise InvalidConfig(f"{_UPDATE_PREFIX} change storage type")
    if new.max_consumers != old.max_consumers:
        raise InvalidConfig(f"{_UPDATE_PREFIX} change MaxConsumers")
    if new.retention != old.retention and Retention.workqueue in (old.retention, new.retention):
        raise InvalidConfig(f"{_UPDATE_PREFIX} change retention policy to/from workqueue")
    if old.sealed and not new.sealed:
        raise InvalidConfig(f"{_UPDATE_PREFIX} unseal a sealed stream")
    if old.deny_delete and not new.deny_delete:
        raise InvalidConfig(f"{_UPDATE_PREFIX} cancel deny message deletes")
    if old.deny_purge and not new.deny_purge:
        raise InvalidConfig(f"{_UPDATE_PREFIX} cancel deny purge")
    if old.allow_msg_ttl and not new.allow_msg_ttl:
        raise InvalidConfig("message TTL status can not be disabled")  # ADR-43: may be enabled, never disabled
    if old.allow_msg_counter != new.allow_msg_counter:  # ADR-49: chosen at creation, read-only after
        raise InvalidConfig("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not new.allow_msg_schedules:  # ADR-51: never disabled once enabled
        raise InvalidConfig("message schedules can not be disabled")
    if _placement_key(old.placement) != _placement_key(new.placement):
        raise InvalidConfig(f"{_UPDATE_PREFIX} change placement (stream moves are not supported)")


def _placement_key(placement: Placement | None) -> tuple[str | None, tuple[str, ...]] | None:
    """An empty placement means "anywhere", the same as none; tags compare case-insensitively."""
    if placement is None or (placement.cluster is None and not placement.tags):
        return None
    return placement.cluster, tuple(sorted(tag.lower() for tag in placement.tags))


def check_request_level(header_value: str | None, api_level: int) -> None:
    """A request's `Nats-Required-Api-Level` header must be an integer at most `api_level`: otherwise
    `RequiredApiLevel` (10185), as nats-server answers (an unparsable value fails the same way)."""
    if header_value is None:
        return
    try:
        required = int(header_value.strip(), 10)
    except ValueError:
        required = -1
    if required < 0 or required > api_level:
        raise RequiredApiLevel(
            f"JetStream minimum api level required: {header_value.strip()!r}, this server is at {api_level}")

