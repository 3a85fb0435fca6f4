"""Quarantine: set aside local stream directories the meta state does not assign — never delete them.

Owns: the startup sweep of `streams/<name>/` against the assigned stream names, and its undo. A
directory with no assignment is renamed to `quarantine/<name>-<meta index>/` (durably) and reported.
This is the answer to nats-server deleting streams after meta snapshot corruption (Jepsen, NATS
2.12.1): a node whose meta state was partial took real streams for orphans and removed them. Here
nothing is removed because it is *absent*; only an applied delete entry deletes data (DESIGN §5).

Not this module's case: a group this node knew from its own committed meta state that a restored meta
snapshot no longer holds. That absence is proof of a committed delete (the snapshot is the committed
state at an index past the group's creation), so the server removes it as the delete entry would have
(`reconcile`). Every other unassigned directory — one no meta state of this node ever held — is set
aside here, never deleted.

Precondition (enforced through `MetaProgress`): sweep only when the meta state is known complete —
this replica is not repairing and has applied the meta log up to the commit index the leader reported
after this node started. With anything less, `quarantine_unknown_streams` touches nothing and says why.

Invariants:
  1. Nothing under `streams/` or `quarantine/` is ever removed or overwritten; a rename whose
     destination exists picks another name.
  2. A rename is durable before the sweep returns: the destination directory is synced first, then the
     source, so no crash point leaves the data under neither name.
  3. `restore_quarantined` is the exact inverse of one quarantine move, and refuses to overwrite.

Imports: L0, L1 (`disk` protocol), attrs, `meta.errors`. Reference: DESIGN.md §5; Jepsen "NATS 2.12.1"
(December 2025), "streams deleted after snapshot corruption".
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from jsraft.disk import Disk
from jsraft.meta.errors import QuarantineConflict

STREAMS_DIR = "streams"
QUARANTINE_DIR = "quarantine"
# Re-quarantining the same name at the same meta index needs a suffix; a handful is plenty, and the
# bound keeps a confused caller from looping.
_SUFFIXES_MAX = 1000


@attrs.frozen(kw_only=True)
class MetaProgress:
    """Evidence that the meta state is complete (the precondition above)."""

    applied_index: int
    leader_commit_index: int | None  # the commit index the meta leader reported since startup; None: unknown
    repairing: bool = False  # the meta replica lost or damaged data and is being repaired

    def incomplete_reason(self) -> str | None:
        if self.repairing:
            return "the meta replica is repairing: its state may be missing entries"
        if self.leader_commit_index is None:
            return "no meta leader commit index known yet: the meta state may be partial"
        if self.applied_index < self.leader_commit_index:
            return (f"meta applied index {self.applied_index} is behind the leader's commit index "
                    f"{self.leader_commit_index}")
        return None


@attrs.frozen(kw_only=True)
class Quarantined:
    name: str
    source: str  # "streams/<name>"
    destination: str  # "quarantine/<name>-<index>[.<n>]"


@attrs.frozen(kw_only=True)
class QuarantineReport:
    """What the sweep found and did. `performed` is false (and nothing moved) when the state was not
    known complete; `reason` says why. `unknown` lists the unassigned directories either way."""

    performed: bool
    reason: str | None = None
    unknown: tuple[str, ...] = ()
    quarantined: tuple[Quarantined, ...] = ()
    kept: tuple[str, ...] = ()  # assigned stream directories, left in place
    ignored: tuple[str, ...] = ()  # entries under streams/ that are not directories, left in place


def _scan(disk: Disk, assigned: Collection[str]) -> tuple[list[str], list[str], list[str]]:
    """`(unknown dirs, kept dirs, ignored non-dirs)` under `streams/`, each sorted."""
    if not disk.is_dir(STREAMS_DIR):
        return [], [], []
    unknown, kept, ignored = [], [], []
    for entry in disk.listdir(STREAMS_DIR):
        # A '.'-name is no stream's (stream names cannot hold '.'): a directory being formatted, whose
        # leftover after a crash the stream manager removes (`server.groups.stream_format` invariant 2).
        if entry.startswith(".") or not disk.is_dir(f"{STREAMS_DIR}/{entry}"):
            ignored.append(entry)
        elif entry in assigned:
            kept.append(entry)
        else:
            unknown.append(entry)
    return unknown, kept, ignored


def _free_destination(disk: Disk, name: str, meta_index: int) -> str:
    base = f"{QUARANTINE_DIR}/{name}-{meta_index}"
    for suffix in range(_SUFFIXES_MAX):
        candidate = base if suffix == 0 else f"{base}.{suffix}"
        if not disk.exists(candidate):
            return candidate
    raise QuarantineConflict(f"{base} and {_SUFFIXES_MAX - 1} suffixed names are all taken")


def quarantine_unknown_streams(disk: Disk, assigned: Collection[str], progress: MetaProgress) -> QuarantineReport:
    """Rename every `streams/<name>/` whose name is not in `assigned` to `quarantine/<name>-<index>/`.

    `assigned` is the set of streams this node holds data for (`MetaStateMachine.names_for(node_id)`,
    offline streams included). Nothing is touched unless `progress` shows the meta state complete.
    """
    unknown, kept, ignored = _scan(disk, assigned)
    reason = progress.incomplete_reason()
    if reason is not None or not unknown:
        return QuarantineReport(performed=reason is None, reason=reason, unknown=tuple(unknown),
                                kept=tuple(kept), ignored=tuple(ignored))
    disk.makedirs(QUARANTINE_DIR)
    moved: list[Quarantined] = []
    for name in unknown:
        source = f"{STREAMS_DIR}/{name}"
        destination = _free_destination(disk, name, progress.applied_index)
        disk.rename(source, destination)
        moved.append(Quarantined(name=name, source=source, destination=destination))
    # Destination first (invariant 2): after it the data is durable under its new name whatever happens
    # to the old one; a crash before the second sync at worst leaves it reachable under both.
    disk.sync_dir(QUARANTINE_DIR)
    disk.sync_dir(STREAMS_DIR)
    return QuarantineReport(performed=True, unknown=tuple(unknown), quarantined=tuple(moved),
                            kept=tuple(kept), ignored=tuple(ignored))


def list_quarantined(disk: Disk) -> list[str]:
    """The entries under `quarantine/` (each `<name>-<index>[.<n>]`)."""
    return disk.listdir(QUARANTINE_DIR) if disk.is_dir(QUARANTINE_DIR) else []


def restore_quarantined(disk: Disk, entry: str, *, name: str | None = None) -> str:
    """Move `quarantine/<entry>` back to `streams/<name>` (default: the name it was quarantined under).

    Run it for a directory quarantined by mistake, then let the meta state assign the stream again (or
    recreate it) so the node opens it. Refuses with `QuarantineConflict` to overwrite anything.
    """
    source = f"{QUARANTINE_DIR}/{entry}"
    if "/" in entry or not disk.is_dir(source):
        raise QuarantineConflict(f"no quarantined directory {entry!r}")
    stream = name if name is not None else entry.rsplit("-", 1)[0]
    if not stream or "/" in stream or stream in (".", ".."):
        raise QuarantineConflict(f"can not tell the stream name of {entry!r}; pass name=")
    destination = f"{STREAMS_DIR}/{stream}"
    if disk.exists(destination):
        raise QuarantineConflict(f"{destination} exists; move it aside before restoring {entry!r}")
    disk.makedirs(STREAMS_DIR)
    disk.rename(source, destination)
    disk.sync_dir(STREAMS_DIR)
    disk.sync_dir(QUARANTINE_DIR)
    return destination
