"""From what a WAL recovered to a Raft core's `RestoredState` and a restored state machine (layer L3½).

Owns: the decision, at `open_group`, of how a replica starts — a new group's member (bootstrap), a member
added later (blank), a restart from its WAL, or a member that lost its storage — and bringing the state
machine to the snapshot the WAL holds.

Decisions:
  1. The WAL holds something (a snapshot, entries, faulty records or a non-initial hard state): restart
     from it. The WAL's findings (`Recovered.reasons`) become `repair_reasons` when it says repairing.
     With damage findings (a hard state lost or rolled back: its vote unknown) the node record's
     vote-term ceiling fences it as in decision 3, not only the terms its log still shows.
  2. The WAL is empty and the group marker is absent: never durably started. With `voters`, an initial
     member bootstraps the group (`RestoredState.bootstrap`); without, a blank member waits to be added.
  3. The WAL is empty but the marker exists (or the state machine holds applied state): this member lost
     its data after it may have voted and acknowledged. It restarts with `storage_uuid_changed`, which
     makes the core a repairing member with no vote to trust; it never bootstraps again. Losing the
     whole group directory, marker included, is caught by the node's record of the groups its storage
     started (`group_record`), which lives outside every group directory: `open_group` then passes
     `formatted=True`, so the same decision applies. The record (like the marker) names a group only from
     its first durable cycle on, before it sends: a member cut off before that cycle sent nothing a peer
     counted on, and decision 2 lets it bootstrap again (`group_record` decision 5). With the record's
     vote-term ceiling (`vote_ceiling`), the lost member is fenced through it, not just through term 1.
     Without one (the record lost as well, a version-1 record, or no record kept) nothing bounds the
     votes it lost: it restores "term unknown" (`RestoredState.term_query_voters` = `peers`, the group's
     voters as known outside it) and learns the term from every voter before it answers anything
     (`raft.term_query`).
  4. State machine: if the WAL holds a snapshot above the machine's `applied_index`, the machine is
     restored from it; the core is told the machine's applied index, so entries at or below it are not
     applied again (`state_machine` module docstring).

The runtime calls `prepare` (restore the machine, then decide); the simulator, whose replicas open from
the snapshot themselves, calls `restored_state` with the index its replica opened at. One set of rules
for both.

Invariants:
  1. After `prepare`, `state_machine.applied_index >= snapshot index` (checked).

Imports: attrs, L0, L1 (`raft`), L2 (`wal`), sibling `state_machine`. Never trio.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from jsraft.errors import invariant
from jsraft.raft.config import RestoredState
from jsraft.raft.types import ConfState, HardState
from jsraft.replica.state_machine import StateMachine
from jsraft.wal import Recovered


def prepare(recovered: Recovered, state_machine: StateMachine, *, voters: Sequence[str] | None,
            formatted: bool, vote_ceiling: int = 0, peers: Sequence[str] | None = None) -> RestoredState:
    """The core's `RestoredState`, after restoring `state_machine` from the WAL's snapshot if needed
    (decision 4; an empty WAL has no snapshot, so a new member is never restored)."""
    snapshot = recovered.snapshot
    applied = state_machine.applied_index
    if snapshot is not None and applied < snapshot[0].index:
        meta, data = snapshot
        state_machine.restore(data)
        applied = state_machine.applied_index
        invariant(applied == meta.index, f"restore() of snapshot {meta.index} set applied_index {applied}")
    return restored_state(recovered, applied, voters=voters, formatted=formatted, vote_ceiling=vote_ceiling,
                          peers=peers)


def recovered_empty(recovered: Recovered) -> bool:
    """The WAL holds nothing at all: no snapshot, entry, faulty record or non-initial hard state (decision 2
    or 3; the node's record of started groups asks the same question, `runtime.group_record`)."""
    return (recovered.snapshot is None and not recovered.entries and not recovered.faulty
            and recovered.hard_state == HardState())


def restored_state(recovered: Recovered, applied: int, *, voters: Sequence[str] | None,
                   formatted: bool, vote_ceiling: int = 0, peers: Sequence[str] | None = None) -> RestoredState:
    """The core's `RestoredState` for a state machine already at `applied` (decisions 1–3). `vote_ceiling`:
    the node record's ceiling for the group (decision 3's fence when the storage is lost; 0: none).
    `peers`: the group's voters as known outside it (default `voters`), asked for the term when the
    storage is lost with no ceiling (decision 3)."""
    snapshot = recovered.snapshot
    meta, data = snapshot if snapshot is not None else (None, None)
    empty = recovered_empty(recovered)
    if empty and not formatted and applied == 0:
        if voters:
            return RestoredState.bootstrap(tuple(voters))
        return RestoredState()
    snapshot_index = meta.index if meta is not None else 0
    hard_state = recovered.hard_state
    query_voters = None
    if (empty or recovered.damage_findings()) and vote_ceiling > hard_state.vote_fence_term:
        # Decision 3 with the node record's ceiling (`runtime.group_record` decision 7): no vote up to it.
        # Damage too: a hard state lost or rolled back with its newest segment says nothing of a vote
        # above the log's terms (sim meta seed 866: a vote in 9 forgotten, fenced only through 8).
        hard_state = attrs.evolve(hard_state, vote_fence_term=vote_ceiling)
    elif empty:
        # Decision 3 with no ceiling (`runtime.group_record` decision 8): ask every voter for the term.
        query_voters = tuple(peers if peers is not None else voters or ())
    return RestoredState(
        hard_state=hard_state,
        conf_state=meta.conf if meta is not None else ConfState(voters=()),
        snapshot=meta,
        snapshot_data=data,
        entries=recovered.entries,
        faulty=recovered.faulty,
        applied_index=applied if applied > snapshot_index else None,
        storage_uuid_changed=empty,
        repair_reasons=recovered.damage_findings(),
        term_query_voters=query_voters,
    )
