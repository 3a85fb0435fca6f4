"""`StateMachine`: what a Raft group applies its committed entries to (layer L3½).

Owns: the contract between the runtime and an application state machine — the stream and consumer
state machine of a stream group, the meta state machine of the meta group — so that any of them plugs
into `NodeRuntime.open_group` unchanged.

How the applied index is tracked, and how a state machine is restored:
  - The state machine owns `applied_index`: the index of the last entry whose effects it holds. After
    `apply(entries)` it equals `entries[-1].index`; after `restore(data)` it equals the index of the
    snapshot `data` was taken at (so the snapshot bytes must record that index themselves).
  - At `open_group`, the runtime reads `applied_index` once. A purely in-memory state machine starts at 0
    and is rebuilt: restored from the WAL's snapshot if there is one, then fed the committed entries
    after it. A state machine with its own durable state (a `FileStore`) may start above 0; entries up
    to its `applied_index` are then not applied again. It must report only what it will still hold
    after a crash — the index its own storage made durable — or it loses those entries for good.
  - `snapshot()` returns the state at exactly `applied_index`. A state machine with durable state makes
    that state durable first (DESIGN §2: the store is fsynced before the WAL is compacted past it). The
    runtime saves the bytes in the WAL, then compacts the log through that index. A state machine that
    finds, while building it, that it cannot vouch for its state (a record read back damaged) raises
    `SnapshotUnavailable`: the cycle skips this compaction (the log keeps every entry) and asks again
    later; compaction is an optimisation, never a reason to stop a group.

Invariants (checked by the runtime with `invariant()`):
  1. `apply` is called with every committed entry exactly once, in index order, contiguous from
     `applied_index + 1` — NORMAL, NOOP and CONF_CHANGE entries alike (most state machines just record
     the index of the latter two). It returns one result per entry, in the same order; the result of a
     NORMAL entry is what `NodeRuntime.propose` returns to the proposer on this node.
  2. `apply` and `restore` are deterministic: every replica that applies the same entries reaches the
     same state (DESIGN §1: state machines take no time, randomness or I/O besides their own storage).
  3. `applied_index` never decreases except through `restore`, which sets it to the snapshot's index.
  4. All methods run on the driver's thread (the runtime's trio thread, the simulator's loop), between
     persistence cycles; none of them is ever called concurrently with another, or from a worker thread.

Optional hooks, looked up with `getattr` by `replica.cycle.GroupCycle`:
  - `snapshot_ready() -> bool`: may the cycle take our own snapshot now? (A replica under repair cannot
    vouch for its state.) Asked only when a snapshot is otherwise due.
  - `prepare_install(meta: SnapshotMeta)`: a leader's snapshot is about to be written to the WAL, which
    then drops the entries it covers; called before that write, `restore` follows in the same cycle.

Imports: L0 (`errors`), L1 (`raft.types`), stdlib. Never trio. Reference: hashicorp/raft `FSM` (Apply / Snapshot / Restore);
etcd-io/raft `Ready.CommittedEntries`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from jsraft.errors import JsraftError
from jsraft.raft.types import Entry


class SnapshotUnavailable(JsraftError):
    """The state machine cannot vouch for its state now (found damaged while the snapshot was built)."""

    err_code = 20903
    http_code = 503
    default_description = "state machine cannot snapshot now"


class StateMachine(Protocol):
    """An application state machine driven by one Raft group (see the module docstring)."""

    @property
    def applied_index(self) -> int:
        """Index of the last entry applied (or restored from a snapshot); 0 for an empty machine."""
        ...

    def apply(self, entries: Sequence[Entry]) -> Sequence[object]:
        """Apply committed `entries` in order; one result per entry (invariant 1)."""
        ...

    def snapshot(self) -> bytes:
        """The state at `applied_index`, durable where the machine has storage of its own."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's (ours, or a leader's); sets `applied_index`."""
        ...
