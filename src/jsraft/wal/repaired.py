"""Putting a repairing replica's repaired entries into its WAL: `put_repaired` (layer L2).

Owns: `truncate` (a cut that records the repairing flag first) and the one step between the Raft core's
`Ready.repaired_entries` and `Wal.replace`, called from the one persistence step every driver of a Raft
node runs (`replica.persist.write_work`: the runtime's and the simulator's), bridging two gaps between
what the core knows and what the WAL knows:

  1. An entry the WAL holds good with the same term is not rewritten (one (index, term) names one entry).
     An entry it holds faulty stays faulty until rewritten here, even if it would read good now (a
     transient misread at recovery): `Wal` invariant 6, so the leader's copy, of whatever term, goes in.
  2. The WAL knows a faulty entry's term only as its successor's record claims it. If the leader's copy
     has another term, that successor is not in the leader's log (Log Matching), so it and everything
     after it are an uncommitted divergent suffix. The core keeps it for now (raft `append` invariant 2:
     it compares it with the leader's entries later and truncates it then), but the WAL refuses to rewrite
     an entry under a different term. The suffix is cut here: the core never acknowledges or applies it
     before truncating it itself (it lies past the verified prefix), and a restart finds the log below the
     acked watermark — repairing, which this replica already is.

Invariants:
  1. A cut happens only on a replica that is repairing, and the WAL's hard state says so before the cut
     (the WAL allows a cut below its commit hint only on a replica it knows is repairing).
  2. Only entries the WAL still holds as faulty, or holds under another term, are rewritten.

Imports: L0, L1 (`raft.types`), attrs, siblings.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from jsraft.errors import invariant
from jsraft.raft.types import Entry
from jsraft.wal.log import Wal


def put_repaired(wal: Wal, entries: Sequence[Entry], *, repairing: bool) -> int | None:
    """Write the leader's copies of `entries` in place; returns the first index of a divergent suffix that
    had to be cut first (see the module docstring), or None."""
    faulty = wal.faulty()
    needed = [e for e in entries if e.index in faulty or wal.term(e.index) != e.term]
    cut_from: int | None = None
    for entry in needed:
        claimed = wal.term(entry.index)
        if entry.index in faulty and claimed not in (None, entry.term) and entry.index < wal.last_index():
            cut_from = entry.index + 1
            invariant(repairing, f"a divergent suffix from {cut_from} is cut only on a repairing replica")
            truncate(wal, cut_from, repairing=repairing)
            break
    needed = [e for e in needed if e.index <= wal.last_index()]
    if needed:
        wal.replace(needed)
    return cut_from


def truncate(wal: Wal, index: int, *, repairing: bool) -> None:
    """`Wal.truncate_from`, first recording a repairing replica's flag in the WAL's hard state if it is not
    there yet: the WAL allows a cut below its commit hint only on a replica it knows is repairing."""
    if repairing and not wal.hard_state.repairing:
        wal.save_hard_state(attrs.evolve(wal.hard_state, repairing=True))
    wal.truncate_from(index)
