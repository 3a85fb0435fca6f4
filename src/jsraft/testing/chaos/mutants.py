"""The mutant launcher: run a node with one durability rule patched out, to show the chaos harness has
teeth — a scenario that passes against the real node must FAIL against its mutant. Test code only; the
node's own code is not changed, the patch is applied in this process before the normal CLI runs:

    python -m jsraft.testing.chaos.mutants MUTANT serve ARGS...     (ChaosCluster(mutant=MUTANT) does this)

Mutants and what they patch (and why there):
  - `ack_before_fsync` — `jsraft.replica.persist.sync_work`, step 2 of a persist cycle (`Wal.sync()`, the
    fsync of the entries just appended) is skipped for STREAM groups (their WAL lives under
    `streams/<name>/raft`); the hard state and the meta group are untouched. `runtime.persist.persist_jobs`
    looks `sync_work` up on `replica.persist` on every call, so the patch takes effect for every group. The
    runtime then reports the entries durable, the leader counts the follower's (and its own) append as
    persisted, commits, applies, and the publish is acked — before anything reached the disk. A
    coordinated power cut (shadow disk, `drop`) then loses acked messages on every node: the store's
    blocks only fsync on seal and before snapshots, and the WAL segment never did. (Since issue #18 the
    stream's hard state is a record in that same segment and reaches its witness file only in
    `Wal.sync()`, so it is lost with the entries; the messages are gone from every local store either
    way, which is what `replica_read` shows.)
  - `truncate_at_corrupt` — `jsraft.store.filestore.FileStore.open` (the classmethod every stream replica
    opens its store with, `stream_replica.open_replica_files`): after the normal recovery, if any sequence is
    damaged (`corrupt`), the store is truncated just below the first damaged one — NATS's behaviour in
    Jepsen's bit-flip test — instead of keeping the rest and repairing the range from a peer. A flipped
    bit in an older sealed block then throws away every later message held only in the store. The mutant
    opens with a full verifying scan (`use_index=False`), so it meets the damage at open.
  - `forget_lost_groups` — `jsraft.runtime.group_record.GroupRecord.lost_storage` answers False: a group
    whose directory was lost (S13) bootstraps a new log at term 1 that votes, and a stale follower can
    lead without what the others acknowledged.

Invariants:
  1. Production code never imports this module (tests/test_architecture.py); a mutant exists only in a
     process started through `main` here.
  2. An unknown mutant name exits 2 before anything runs.

Imports: anything (test kit). Reference: issue #7 acceptance ("the harness has teeth").
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("jsraft.testing.chaos.mutants")


def _ack_before_fsync() -> None:
    from jsraft.replica import persist

    original = persist.sync_work

    def sync_work(wal: Any, disk: Any, work: Any, **options: Any) -> None:
        root = os.path.normpath(str(getattr(disk, "root", "")))
        if not (os.path.basename(root) == "raft" and os.path.basename(os.path.dirname(os.path.dirname(root)))
                == "streams"):
            original(wal, disk, work, **options)
            return
        # MUTANT: no `wal.sync()` — the entries are reported durable without an fsync.
        if work.hard_state is not None:
            wal.save_hard_state(work.hard_state)
        if work.marker is not None:
            disk.write_atomic(persist.GROUP_MARKER, work.marker)

    persist.sync_work = sync_work


def _truncate_at_corrupt() -> None:
    from jsraft.store.base import FaultKind
    from jsraft.store.filestore import FileStore

    original = FileStore.open.__func__  # type: ignore[attr-defined]

    def open_truncating(cls: type, disk: Any, config: Any = None, **kwargs: Any) -> Any:
        # A full verifying scan at open, as nats-server's recovery does: the real node trusts its index and
        # finds such damage in the background, where this mutant would not see it.
        store = original(cls, disk, config, **{**kwargs, "use_index": False})
        damaged = [fault.first for fault in store.faults() if fault.kind is FaultKind.corrupt]
        if damaged and not kwargs.get("read_only"):
            first = min(damaged)
            log.warning("MUTANT truncate_at_corrupt: seq %d is damaged; truncating the store to %d (last was %d)",
                        first, first - 1, store.state().last_seq)
            store.truncate(first - 1)
        return store

    FileStore.open = classmethod(open_truncating)  # type: ignore[method-assign, assignment]


def _forget_lost_groups() -> None:
    from jsraft.runtime.group_record import GroupRecord

    # MUTANT: the node's record of its groups is never consulted, so a group whose directory was lost
    # bootstraps a fresh log that votes (the behaviour before issue 14's fix).
    GroupRecord.lost_storage = lambda self, name, *, assigned_index: False  # type: ignore[method-assign]


MUTANTS: dict[str, Callable[[], None]] = {
    "ack_before_fsync": _ack_before_fsync,
    "truncate_at_corrupt": _truncate_at_corrupt,
    "forget_lost_groups": _forget_lost_groups,
}


def apply(name: str) -> None:
    """Patch this process with mutant `name` (`KeyError` for an unknown one)."""
    MUTANTS[name]()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in MUTANTS:
        print(f"usage: python -m jsraft.testing.chaos.mutants {{{','.join(MUTANTS)}}} serve ARGS...", file=sys.stderr)
        return 2  # invariant 2
    apply(argv[0])
    print(f"jsraft mutant: {argv[0]} applied", file=sys.stderr, flush=True)
    from jsraft.cli import main as cli_main

    return cli_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
