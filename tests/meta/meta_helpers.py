"""Helpers for the meta tests: a cluster's meta state machine driven as a leader would drive it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jsraft.meta import Applied, MetaStateMachine, Proposal

NODES3 = ("n1", "n2", "n3")
NODES5 = ("n1", "n2", "n3", "n4", "n5")
NOW_NS = 1_700_000_000_000_000_000


def config(name: str, **fields: Any) -> bytes:
    """A stream create/update body as a client sends it."""
    return json.dumps({"name": name, **fields}).encode()


def commit(machine: MetaStateMachine, proposal: Proposal) -> Applied:
    """Apply a proposal's entry at the next index, as the committed log would deliver it."""
    assert proposal.data is not None and not proposal.in_flight, proposal
    return machine.apply(machine.applied_index + 1, proposal.data)


def new_cluster(
    nodes: Iterable[str] = NODES3, *, tags: dict[str, tuple[str, ...]] | None = None,
    clusters: dict[str, str] | None = None, **kwargs: Any,
) -> MetaStateMachine:
    """A machine whose committed state knows `nodes` (each added by a committed PEER_ADD)."""
    machine = MetaStateMachine(**kwargs)
    for node in nodes:
        proposal = machine.propose_peer_add(node, cluster=(clusters or {}).get(node),
                                            tags=(tags or {}).get(node, ()))
        commit(machine, proposal)
    return machine


def create(machine: MetaStateMachine, name: str, *, online: Iterable[str] = NODES5, now_ns: int = NOW_NS,
           **fields: Any) -> Applied:
    """Propose and commit a stream create; the result must be a success."""
    applied = commit(machine, machine.propose_create_stream(name, config(name, **fields), now_ns=now_ns,
                                                            online=set(online)))
    assert applied.ok, applied.error
    return applied
