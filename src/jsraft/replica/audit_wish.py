"""A stream replica's wish to take part in an audit after a recovery or a repair (layer L3½).

Owns: `AuditWish`, what production's `server.groups.stream_audit.AuditRunner` and the simulator
(`testing.sim.stream_repair`) both keep to honour DESIGN §8's "an audit after every recovery and repair":
the replica asks the stream leader for an AUDIT, and keeps asking (at the caller's pace) until it has
applied and reported one above the index where it recovered or was repaired.

Why not "until a leader took the request": the replica can miss the AUDIT it asked for — an
InstallSnapshot covering that entry lands it past the audit without applying it — and an idle stream's
leader proposes no further periodic audit (`StreamLeader.audit_due` skips an unchanged state tuple), so a
store whose catch-up could not be verified stayed unjudged for good (simulator, `--app consumer` seed
10410: n1 caught up unverified at index 236, the audit came at 237, n1 installed snapshot 238).

Invariants:
  1. `wanted` holds from `want(index)` until `on_reported(i)` with `i > index` after a leader `taken` the
     request; a later `want` only raises the index (an audit that answered the first wish but predates the
     second does not answer it).
  2. Only an audit this replica reported counts (a current machine, not replaying: stream_adapter
     invariant 6), so an audit applied while it still repairs does not clear the wish.
  3. Asked once, the wish is asked again only while the machine is current (`due`): a replica that is
     not could not report the audit, and each ask costs every replica an AUDIT entry; its repair ends in
     a new `want` anyway.
  4. A leader that takes the request raises the wish to the index it had applied (`taken`): the AUDIT it
     proposes comes after it. An audit between the replica's applied index and the leader's cannot settle
     a catch-up the leader served from further along (the store may already hold removals the audit's
     index has not reached), and such an audit — one already in flight when the catch-up ended — used to
     end the wish while the replica stayed unjudged (simulator `--app consumer` seeds 398, 986). So only
     an audit reported after a leader took the request since the last `want` answers the wish.
  5. A report made while the store is unjudged (replica/judgement.py) leaves the wish wanted: the verdict
     may never come (no majority reported, a lost message), and only another audit makes up for it. The
     caller asks for that one later than for a first one (production's `REASK_S`, the simulator's
     `REASK_TICKS`): usually the verdict comes first.

Imports: stdlib, attrs. Never trio, time or the server layer. Reference: DESIGN.md §8.
"""

from __future__ import annotations

import attrs


@attrs.define
class AuditWish:
    after_index: int | None = None  # an AUDIT reported above this index answers the wish
    asked: bool = False  # a stream leader took a request since the last `want`

    @property
    def wanted(self) -> bool:
        return self.after_index is not None

    def want(self, index: int) -> None:
        """This replica recovered or was repaired at applied `index`: it wants an audit after it (inv. 1)."""
        self.after_index = index if self.after_index is None else max(self.after_index, index)
        self.asked = False

    def due(self, *, current: bool) -> bool:
        """Whether to ask the stream leader now (invariant 3); the caller paces the asks."""
        return self.after_index is not None and (current or not self.asked)

    def taken(self, leader_applied_index: int) -> None:
        """A stream leader took the request at its applied `leader_applied_index` (invariant 4)."""
        self.asked = True
        if self.after_index is not None:
            self.after_index = max(self.after_index, leader_applied_index)

    def on_reported(self, index: int, *, unjudged: bool = False) -> bool:
        """This replica reported the AUDIT at `index` (invariant 2). True when it wants another at once
        because its store is still unjudged (invariant 5): the caller paces that ask."""
        if self.after_index is not None and self.asked and index > self.after_index:
            self.after_index = None
        if unjudged and self.after_index is None:
            self.want(index)
            return True
        return False

    def drop(self) -> None:
        """This replica leads: it applies the audit it proposes itself."""
        self.after_index = None
